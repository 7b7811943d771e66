// Deferred gradients (tensor/gradient_reader.h): on the way back through nanoGPT's slow attention, the mask's
// and the scale's gradients (and under bfloat16 autocast the cast before them) are written in one pass by
// the last of them. Held here to the path that writes every step: the same bits, allocations and figures.
#include <doctest/doctest.h>

#include <cmath>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const TensorOptions f32(Device d) { return TensorOptions{ScalarType::float32, d}; }

struct AttentionRun {
  AllocationEvents events;
  std::vector<double> q_grad, k_grad, v_grad;
  int64_t peak = 0, reserved = 0;
  uint64_t deferred = 0;
};

// att = softmax((q @ k^T) * scale, masked causally), or / sqrt(hs) with `divide`; y = att @ v; y.backward(grad).
// With `hooked`, identity hooks on the scaled and the masked scores and on the probabilities make every step
// write its gradient (no offer is made past a hook).
AttentionRun attention_backward(Device d, bool bf16, bool hooked, bool divide = false) {
  const int64_t B = 2, H = 3, T = 48, hs = 16;
  manual_seed(7);
  const Tensor q = randn({B, H, T, hs}, f32(d)).requires_grad_();
  const Tensor k = randn({B, H, T, hs}, f32(d)).requires_grad_();
  const Tensor v = randn({B, H, T, hs}, f32(d)).requires_grad_();
  const Tensor grad = randn({B, H, T, hs}, f32(d));
  const Tensor mask = eq(tril(ones({T, T}, f32(d))).view({1, 1, T, T}), 0.0);
  AttentionRun run;
  const uint64_t before = packed_gradients_handed(PackedGradient::deferred);
  const bool cached = d.type != DeviceType::cpu;
  if (cached) reset_peak_memory_stats(d);
  const auto step = [&] {
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(d.type, ScalarType::bfloat16);
    // v in the product's dtype before the scores, as nanoGPT's v (a view of c_attn's output) is: the
    // product's backward then casts only the probabilities' gradient, and softmax's node runs right after.
    const Tensor v_in = bf16 ? v.to(ScalarType::bfloat16) : v;
    const double root = std::sqrt(static_cast<double>(hs));
    Tensor att = divide ? matmul(q, k.transpose(-2, -1)) / root : matmul(q, k.transpose(-2, -1)) * (1.0 / root);
    if (hooked) att.register_hook([](const Tensor& g) { return g; });
    att = att.masked_fill(mask, -INFINITY);
    if (hooked) att.register_hook([](const Tensor& g) { return g; });
    att = softmax(att, -1);
    if (hooked) att.register_hook([](const Tensor& g) { return g; });
    Tensor y = matmul(att, v_in);
    autocast.reset();
    y.backward(grad.to(y.dtype()));
  };
  if (cached) run.events = allocation_events(d, step);
  else step();
  run.deferred = packed_gradients_handed(PackedGradient::deferred) - before;
  run.peak = cached ? max_memory_allocated(d) : 0;
  run.reserved = cached ? memory_reserved(d) : 0;
  run.q_grad = q.grad().flatten().tolist();
  run.k_grad = k.grad().flatten().tolist();
  run.v_grad = v.grad().flatten().tolist();
  return run;
}

}  // namespace

TEST_CASE("slow attention's way back: mask and scale deferred give every step's bits, memory and graph") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (const Device d : {kSim, kCpu}) {
    for (bool bf16 : {false, true}) {
      if (bf16 && d == kCpu) continue;  // autocast follows PyTorch's CUDA policy: not on cpu
      CAPTURE(d.str());
      CAPTURE(bf16);
      const AttentionRun hooked = attention_backward(d, bf16, true);
      const AttentionRun deferred = attention_backward(d, bf16, false);
      // float32: SoftmaxBackward0 and MaskedFillBackward0 hand their gradients on deferred; bfloat16: the cast
      // between them too, and the cast of the probabilities' gradient before softmax's. Not on cpu, whose freed
      // memory goes back to the host at once. Hooked, under autocast softmax's gradient still goes deferred to
      // its cast (no hook between them), which writes it.
      CHECK(deferred.deferred == (d == kCpu ? 0 : (bf16 ? 4 : 2)));
      CHECK(hooked.deferred == (d != kCpu && bf16 ? 1 : 0));
      CHECK(deferred.q_grad == hooked.q_grad);  // bit for bit
      CHECK(deferred.k_grad == hooked.k_grad);
      CHECK(deferred.v_grad == hooked.v_grad);
      CHECK(deferred.events == hooked.events);
      CHECK(deferred.peak == hooked.peak);
      CHECK(deferred.reserved == hooked.reserved);
    }
  }
}

TEST_CASE("the scale as a division (/ sqrt(d)) is deferred alike") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    const AttentionRun hooked = attention_backward(kSim, bf16, true, true);
    const AttentionRun deferred = attention_backward(kSim, bf16, false, true);
    CHECK(deferred.deferred == (bf16 ? 4 : 2));
    CHECK(deferred.q_grad == hooked.q_grad);
    CHECK(deferred.k_grad == hooked.k_grad);
    CHECK(deferred.events == hooked.events);
  }
}

namespace {

// A float32 deferred gradient over `buffer`: source elements [0, n), one masked step into `target`.
struct MaskedChain {
  Tensor buffer, target, mask;
  DeferredGradient chain(int64_t n) const {
    return DeferredGradient{buffer.narrow(0, 0, n).view_for_kernels(),
                            {{target.view_for_kernels(), mask.view_for_kernels(), 0.0}},
                            std::nullopt};
  }
};

}  // namespace

TEST_CASE("a deferred gradient whose last output overlaps its source is written through eager's steps") {
  const Device d = kSim;
  const int64_t n = 64;
  const MaskedChain c{randn({2 * n}, f32(d)), empty({n}, f32(d)), gt(randn({n}, f32(d)), 0.0)};
  // Eager: target = source masked; out = target * 0.5.
  const Tensor expected = c.buffer.narrow(0, 0, n).masked_fill(c.mask, 0.0) * 0.5;
  for (const int64_t shift : {int64_t{0}, int64_t{5}, n, int64_t{-1}}) {
    CAPTURE(shift);
    const Tensor buffer_before = c.buffer.clone();
    // The output starts `shift` elements into the source (0: the source itself; n: just past it; -1: a
    // separate tensor).
    const Tensor separate = empty({n}, f32(d));
    const Tensor out = shift < 0 ? separate : c.buffer.narrow(0, shift, n);
    write_deferred_gradient(c.chain(n), out.view_for_kernels(), std::nullopt, 0.0, ScalarStep{BinaryOp::mul, 0.5},
                            backend_for(d));
    CHECK(out.tolist() == expected.tolist());
    c.buffer.copy_(buffer_before);
  }
}

TEST_CASE("a deferred gradient is written out before the allocator gives memory back") {
  const Device d = kSim;
  const int64_t n = 1 << 18;
  const MaskedChain c{randn({n}, f32(d)), empty({n}, f32(d)), gt(randn({n}, f32(d)), 0.0)};
  const Tensor expected = c.buffer.masked_fill(c.mask, 0.0);
  empty({4 << 20}, f32(d));  // a segment of its own, cached when freed
  hand_deferred_gradient(c.target.storage().get(), c.chain(n));
  empty_cache(d);  // releases that segment: the chain is replayed first
  CHECK_FALSE(packed_gradient_pending());
  CHECK_FALSE(take_deferred_gradient(c.target.storage().get()).has_value());
  CHECK(c.target.tolist() == expected.tolist());
}

namespace {

// A chain from softmax's gradient (SoftmaxBackward0 deferred) over rows of `n`: grad_in unwritten, then
// (with `bf16`) a cast to bfloat16, then a masked step; eager's result for `out = that * 0.5`.
struct SoftmaxChain {
  Tensor buffer, grad_out, output, mask, grad_in, cast, masked;  // grad_out: buffer's first rows
  bool bf16 = false;
  SoftmaxChain(Device d, int64_t rows, int64_t n, bool to_bf16)
      : buffer(randn({rows + 1, n}, f32(d))),
        grad_out(buffer.narrow(0, 0, rows)),
        output(softmax(randn({rows, n}, f32(d)), -1)),
        mask(gt(randn({rows, n}, f32(d)), 0.0)),
        grad_in(empty({rows, n}, f32(d))),
        cast(empty({rows, n}, TensorOptions{ScalarType::bfloat16, d})),
        masked(empty({rows, n}, TensorOptions{to_bf16 ? ScalarType::bfloat16 : ScalarType::float32, d})),
        bf16(to_bf16) {}
  DeferredGradient chain() const {
    std::vector<DeferredStep> steps;
    if (bf16) steps.push_back({cast.view_for_kernels()});
    steps.push_back({masked.view_for_kernels(), mask.view_for_kernels(), 0.0});
    return DeferredGradient{grad_in.view_for_kernels(), steps,
                            SoftmaxGradientSource{grad_out.view_for_kernels(), output.view_for_kernels(), 1}};
  }
  Tensor eager() const {
    Tensor g = softmax_backward(grad_out, output, -1, false, std::nullopt);
    if (bf16) g = g.to(ScalarType::bfloat16);
    return g.masked_fill(mask, 0.0);
  }
};

}  // namespace

TEST_CASE("a chain from softmax's gradient is written in one pass, or through eager's steps where it overlaps") {
  const Device d = kSim;
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    const SoftmaxChain c(d, 6, 40, bf16);
    const Tensor expected = c.eager() * 0.5;
    const Tensor grad_out_before = c.grad_out.clone(), output_before = c.output.clone();
    // out: a tensor of its own, softmax's unwritten gradient itself (nothing reads it), or (float32) grad_out
    // or the forward's output exactly (their freed blocks reused: each row is read before it is written): one
    // pass; over grad_out one row on: eager's steps, replayed, then the scale.
    std::vector<Tensor> outs{empty_like(expected), c.grad_in.to(expected.dtype())};
    if (!bf16) outs.insert(outs.end(), {c.grad_out, c.output, c.buffer.narrow(0, 1, c.grad_out.size(0))});
    for (size_t i = 0; i < outs.size(); ++i) {
      CAPTURE(i);
      write_deferred_gradient(c.chain(), outs[i].view_for_kernels(), std::nullopt, 0.0, ScalarStep{BinaryOp::mul, 0.5},
                              backend_for(d));
      CHECK(outs[i].tolist() == expected.tolist());
      c.grad_out.copy_(grad_out_before);
      c.output.copy_(output_before);
    }
    // The cast or the masked_fill as the chain's last node (a reader that takes no deferred gradient).
    const Tensor masked_out = empty_like(expected);
    write_deferred_gradient(c.chain(), masked_out.view_for_kernels(), std::nullopt, 0.0, std::nullopt, backend_for(d));
    CHECK(masked_out.tolist() == c.eager().tolist());
  }
}

TEST_CASE("a chain from softmax's gradient is written out before the allocator gives memory back") {
  const Device d = kSim;
  const SoftmaxChain c(d, 64, 1000, true);
  const Tensor expected = c.eager();
  empty({4 << 20}, f32(d));  // a segment of its own, cached when freed
  hand_deferred_gradient(c.masked.storage().get(), c.chain());
  empty_cache(d);
  CHECK_FALSE(packed_gradient_pending());
  CHECK(c.masked.tolist() == expected.tolist());
  CHECK(c.grad_in.tolist() == softmax_backward(c.grad_out, c.output, -1, false, std::nullopt).tolist());
}

TEST_CASE("softmax's gradient deferred along any dimension, into a mask and a scale, as the written path") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  struct Case {
    Shape shape;
    int64_t dim;
    bool bf16;
  };
  for (const Case& c :
       {Case{{4, 6, 10}, 1, false}, Case{{4, 6, 10}, 2, true}, Case{{5, 7}, 0, false}, Case{{3, 2, 9, 9}, 3, true}}) {
    CAPTURE(c.dim);
    CAPTURE(c.bf16);
    const auto run = [&](bool hooked) {
      manual_seed(11);
      const Tensor x = randn(c.shape, f32(d)).requires_grad_();
      const Tensor mask = gt(randn(c.shape, f32(d)), 0.5);
      const Tensor grad = randn(c.shape, f32(d));
      AttentionRun r;
      const uint64_t before = packed_gradients_handed(PackedGradient::deferred);
      r.events = allocation_events(d, [&] {
        std::optional<AutocastGuard> autocast;
        if (c.bf16) autocast.emplace(d.type, ScalarType::bfloat16);
        Tensor s = (c.bf16 ? x.to(ScalarType::bfloat16) : x) * 0.7;
        if (hooked) s.register_hook([](const Tensor& g) { return g; });
        s = s.masked_fill(mask, -1.5);
        if (hooked) s.register_hook([](const Tensor& g) { return g; });
        Tensor y = softmax(s, c.dim);
        autocast.reset();
        y.backward(grad.to(y.dtype()));
      });
      r.deferred = packed_gradients_handed(PackedGradient::deferred) - before;
      r.q_grad = x.grad().flatten().tolist();
      return r;
    };
    const AttentionRun hooked = run(true), deferred = run(false);
    CHECK(deferred.deferred == (c.bf16 ? 3 : 2));
    CHECK(deferred.q_grad == hooked.q_grad);
    CHECK(deferred.events == hooked.events);
  }
}

TEST_CASE("the probabilities' cast deferred to a softmax gradient written in place: the hooked graph's bits") {
  // float32 scores straight from a product (whose backward takes nothing deferred), softmax, then a bfloat16
  // product under autocast: SoftmaxBackward0 writes its gradient itself and reads the cast written first.
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  struct Run {
    AllocationEvents events;
    std::vector<double> a_grad, v_grad;
    uint64_t deferred = 0;
  };
  const auto run = [&](bool hooked) {
    manual_seed(11);
    const Tensor a = randn({2, 3, 40, 40}, f32(d)).requires_grad_();
    const Tensor v = randn({2, 3, 40, 16}, f32(d)).requires_grad_();
    Run r;
    const uint64_t before = packed_gradients_handed(PackedGradient::deferred);
    r.events = allocation_events(d, [&] {
      const Tensor v_in = v.to(ScalarType::bfloat16);  // before the scores, as nanoGPT's v
      const Tensor scores = a * a;                     // MulBackward0 of a tensor product: takes no deferred gradient
      Tensor att = softmax(scores, -1);
      if (hooked) att.register_hook([](const Tensor& g) { return g; });
      Tensor y;
      {
        const AutocastGuard autocast(d.type, ScalarType::bfloat16);
        y = matmul(att, v_in);
      }
      y.sum().backward();
    });
    r.deferred = packed_gradients_handed(PackedGradient::deferred) - before;
    r.a_grad = a.grad().flatten().tolist();
    r.v_grad = v.grad().flatten().tolist();
    return r;
  };
  const Run hooked = run(true);
  const Run deferred = run(false);
  CHECK(hooked.deferred == 0);
  CHECK(deferred.deferred == 1);  // the cast, written by softmax's gradient before its kernel
  CHECK(deferred.a_grad == hooked.a_grad);
  CHECK(deferred.v_grad == hooked.v_grad);
  CHECK(deferred.events == hooked.events);
}
