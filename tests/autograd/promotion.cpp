// Backward through ops on operands of two dtypes (bf16 autocast's bfloat16 attention output added to the
// float32 residual stream): the engine converts each gradient a node returns to its input's dtype, as
// PyTorch's validate_outputs does (after summing a broadcast gradient down, output by output, right after
// the node ran), so every leaf's .grad has the leaf's dtype. On sim, the allocations in PyTorch's order.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr ScalarType f32 = ScalarType::float32, bf16 = ScalarType::bfloat16;

TensorOptions on(Device d, ScalarType t) { return TensorOptions{t, d}; }

// A leaf requiring grad, random values exactly representable in `dtype`.
Tensor leaf(const Shape& shape, ScalarType dtype, Device d) {
  Tensor t = randn(shape, on(d, f32)).to(dtype);
  t.requires_grad_();
  return t;
}

// bfloat16 rounding of float64 values (through float32, as the kernels convert).
std::vector<double> as_bf16(const std::vector<double>& v, Device d) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, on(d, ScalarType::float64)).to(bf16).tolist();
}

}  // namespace

TEST_CASE("float32 + bfloat16: each leaf's gradient has its own dtype") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    manual_seed(3);
    const Tensor x = leaf({8, 16}, f32, d);
    const Tensor y = leaf({8, 16}, bf16, d);
    const Tensor w = randn({8, 16}, on(d, f32));
    Tensor z = x + y;
    CHECK(z.dtype() == f32);
    sum(z * w).backward();
    REQUIRE(x.grad().defined());
    REQUIRE(y.grad().defined());
    CHECK(x.grad().dtype() == f32);
    CHECK(y.grad().dtype() == bf16);
    CHECK(x.grad().tolist() == w.tolist());
    CHECK(y.grad().tolist() == as_bf16(w.tolist(), d));  // w converted once
  }
}

TEST_CASE("broadcast bfloat16 operand: the gradient is summed down in float32, then converted") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    manual_seed(4);
    const Tensor x = leaf({8, 16}, f32, d);
    const Tensor bias = leaf({16}, bf16, d);
    const Tensor w = randn({8, 16}, on(d, f32));
    sum((x + bias) * w).backward();
    CHECK(bias.grad().dtype() == bf16);
    CHECK(bias.grad().sizes() == Shape{16});
    // The column sums of w in float32 (what sum_to computes), rounded to bfloat16 once.
    CHECK(bias.grad().tolist() == sum(w, {0}).to(bf16).tolist());
  }
}

TEST_CASE("mul, div and sub of float32 and bfloat16: PyTorch's formulas in the promoted dtype, then converted") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    manual_seed(5);
    const Tensor a = leaf({6, 5}, bf16, d);
    const Tensor b = leaf({6, 5}, f32, d);
    const std::vector<double> av = a.tolist(), bv = b.tolist();
    sum(a * b).backward();
    // mul: a's gradient grad * b (float32, exact) then converted; b's grad * a (exact in float32).
    CHECK(a.grad().dtype() == bf16);
    CHECK(a.grad().tolist() == as_bf16(bv, d));
    CHECK(b.grad().dtype() == f32);
    CHECK(b.grad().tolist() == av);

    const Tensor p = leaf({6, 5}, bf16, d);
    const Tensor q = abs(randn({6, 5}, on(d, f32))) + 0.5;
    q.requires_grad_();
    sum(p / q).backward();
    // div: p's gradient grad / q in float32, converted; q's -grad * ((p / q) / q) in float32.
    std::vector<double> dp, dq;
    const std::vector<double> pv = p.tolist(), qv = q.tolist();
    for (size_t i = 0; i < pv.size(); ++i) {
      const float pf = static_cast<float>(pv[i]), qf = static_cast<float>(qv[i]);
      dp.push_back(static_cast<double>(1.0f / qf));
      dq.push_back(static_cast<double>(-1.0f * ((pf / qf) / qf)));
    }
    CHECK(p.grad().dtype() == bf16);
    CHECK(p.grad().tolist() == as_bf16(dp, d));
    CHECK(q.grad().dtype() == f32);
    CHECK(q.grad().tolist() == dq);

    const Tensor s = leaf({3}, f32, d), t = leaf({3}, bf16, d);
    sum(sub(s, t, 2.0)).backward();
    CHECK(s.grad().tolist() == std::vector<double>{1, 1, 1});
    CHECK(t.grad().dtype() == bf16);
    CHECK(t.grad().tolist() == std::vector<double>{-2, -2, -2});
  }
}

TEST_CASE("in-place add of a bfloat16 operand into float32, and a root gradient of another dtype") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    const Tensor x = leaf({4}, f32, d);
    const Tensor y = leaf({4}, bf16, d);
    Tensor h = x * 2.0;
    h.add_(y);  // AddBackward0 in place: h stays float32
    CHECK(h.dtype() == f32);
    h.backward(ones({4}, on(d, bf16)));  // converted to float32 by the engine
    CHECK(x.grad().dtype() == f32);
    CHECK(x.grad().tolist() == std::vector<double>{2, 2, 2, 2});
    CHECK(y.grad().dtype() == bf16);
    CHECK(y.grad().tolist() == std::vector<double>{1, 1, 1, 1});
  }
}

// PyTorch's engine (validate_outputs inside call_function): after a node ran, each output is summed down
// if broadcast, then converted if its dtype differs from the input it is for; the node's incoming
// gradients are released only after that (call_function's `inputs` live until it returns).
TEST_CASE("the conversion's allocations in backward, on sim, in PyTorch's order") {
  fresh_sim();
  const Tensor w = zeros({64, 64}, on(kSim, f32));
  SUBCASE("both sides need a gradient: the float32 one is kept for x, a bfloat16 copy made for y") {
    const Tensor x = leaf({64, 64}, f32, kSim);
    const Tensor y = leaf({64, 64}, bf16, kSim);
    Tensor loss = sum((x + y) * w);
    const AllocationEvents events = allocation_events(kSim, [&] { loss.backward(); });
    CHECK(events == AllocationEvents{
                        {"alloc", 4},      // root gradient ones_like(loss)
                        {"alloc", 16384},  // MulBackward0: grad * w (64*64*4), float32
                        {"alloc", 8192},   // AddBackward0's output 1 converted to bfloat16 (64*64*2)
                        {"free", 4},       // the root gradient, when backward returns
                    });
    // Both stolen by AccumulateGrad: x.grad is MulBackward0's block, y.grad the converted one.
    CHECK(x.grad().dtype() == f32);
    CHECK(y.grad().dtype() == bf16);
    // w, x (16384 each), y (8192), loss (4 bytes: a 512-byte block), x.grad (16384), y.grad (8192).
    CHECK(allocated() == 16384 + 16384 + 8192 + 512 + 16384 + 8192);
  }
  SUBCASE("only the bfloat16 side: the float32 gradient is released with AddBackward0's inputs") {
    const Tensor x = zeros({64, 64}, on(kSim, f32));
    const Tensor y = leaf({64, 64}, bf16, kSim);
    Tensor loss = sum((x + y) * w);
    const AllocationEvents events = allocation_events(kSim, [&] { loss.backward(); });
    CHECK(events == AllocationEvents{
                        {"alloc", 4},
                        {"alloc", 16384},  // MulBackward0: grad * w
                        {"alloc", 8192},   // converted for y, after AddBackward0 ran
                        {"free", 16384},   // AddBackward0's incoming (and returned) float32 gradient
                        {"free", 4},
                    });
    CHECK(y.grad().dtype() == bf16);
  }
  SUBCASE("a broadcast bfloat16 operand: summed down first (float32), then converted") {
    const Tensor x = leaf({64, 64}, f32, kSim);
    const Tensor bias = leaf({64}, bf16, kSim);
    Tensor loss = sum((x + bias) * w);
    const AllocationEvents events = allocation_events(kSim, [&] { loss.backward(); });
    CHECK(events == AllocationEvents{
                        {"alloc", 4},
                        {"alloc", 16384},  // MulBackward0: grad * w
                        {"alloc", 256},    // at::sum_to: (64, 64) -> (64), float32 (64*4)
                        {"alloc", 128},    // then .to(bfloat16) (64*2)
                        {"free", 256},     // the summed float32 gradient, replaced
                        {"free", 4},
                    });
    CHECK(bias.grad().dtype() == bf16);
    CHECK(x.grad().dtype() == f32);
  }
}
