// Type promotion of tensor operands of two dtypes (PyTorch's TensorIterator on CUDA): result types, with the
// zero-dim rule; values against float64 references on cpu and sim; the output as the only allocation on
// sim and meta (the kernel reads each operand in its own dtype); in-place ops writing self's dtype, and
// refusing, before anything is written, a result type that cannot be cast to it; where's converted copies.
#include <cmath>
#include <stdexcept>
#include <string>

#include "helpers.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr ScalarType f32 = ScalarType::float32, f64 = ScalarType::float64, f16 = ScalarType::float16,
                     bf16 = ScalarType::bfloat16, i64 = ScalarType::int64, i32 = ScalarType::int32,
                     u8 = ScalarType::uint8, b8 = ScalarType::bool_;

TensorOptions on(Device d, ScalarType t) { return TensorOptions{t, d}; }

// A tensor of `dtype` with `shape` (dim > 0) or a 0-d one (shape {}).
Tensor typed(const Shape& shape, ScalarType dtype, Device d = kSim) { return zeros(shape, on(d, dtype)); }

// Random values exactly representable in `dtype` (drawn in float32, converted).
Tensor random_in(const Shape& shape, ScalarType dtype, Device d) { return randn(shape, on(d, f32)).to(dtype); }

// The float32 nearest to v (the rounding of an op computed in float).
double to_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

}  // namespace

TEST_CASE("result types: promote_types between tensors with dimensions, float16 with bfloat16 is float32") {
  struct Case {
    ScalarType a, b, want;
  };
  for (const Case c : {Case{f32, bf16, f32}, Case{bf16, f32, f32}, Case{f16, bf16, f32}, Case{bf16, f16, f32},
                       Case{f32, f64, f64}, Case{i64, f16, f16}, Case{i32, i64, i64}, Case{b8, u8, u8},
                       Case{u8, i32, i32}, Case{b8, f32, f32}, Case{b8, b8, b8}, Case{i64, bf16, bf16}}) {
    CAPTURE(scalar_type_name(c.a));
    CAPTURE(scalar_type_name(c.b));
    const Tensor a = typed({2, 3}, c.a), b = typed({3}, c.b);
    CHECK(result_type(a, b) == c.want);
    CHECK(add(a, b).dtype() == c.want);
    CHECK(mul(b, a).dtype() == c.want);
    CHECK(maximum(a, b).dtype() == c.want);
    CHECK(lt(a, b).dtype() == b8);  // comparisons: bool, whatever they compare in
    CHECK(logical_or(a, b).dtype() == b8);
    CHECK(where(a > b, a, b).dtype() == c.want);
  }
}

TEST_CASE("result types: a 0-d tensor decides only when of a higher category than the tensors with dimensions") {
  struct Case {
    ScalarType zero_dim, dimensioned, want;
  };
  // PyTorch: torch.result_type(torch.tensor(1.0), torch.ones(4, dtype=torch.bfloat16)) is bfloat16, ...
  for (const Case c : {Case{f32, bf16, bf16}, Case{f64, f16, f16}, Case{f32, f16, f16}, Case{i64, i32, i32},
                       Case{i64, u8, u8}, Case{f64, i32, f64}, Case{bf16, i64, bf16}, Case{i64, b8, i64},
                       Case{f32, b8, f32}, Case{b8, i32, i32}, Case{f16, f32, f32}}) {
    CAPTURE(scalar_type_name(c.zero_dim));
    CAPTURE(scalar_type_name(c.dimensioned));
    const Tensor s = typed({}, c.zero_dim), t = typed({4}, c.dimensioned);
    CHECK(result_type(s, t) == c.want);
    CHECK(result_type(t, s) == c.want);
    CHECK(add(s, t).dtype() == c.want);
    CHECK(add(t, s).dtype() == c.want);
  }
  // Only 0-d tensors: plain promotion among them.
  CHECK(result_type(typed({}, f16), typed({}, bf16)) == f32);
  CHECK(add(typed({}, f16), typed({}, bf16)).dtype() == f32);
  CHECK(result_type(typed({}, i32), typed({}, f64)) == f64);
  // A 1-element tensor with a dimension is not 0-d: it promotes as any tensor.
  CHECK(result_type(typed({1}, f32), typed({4}, bf16)) == f32);
}

TEST_CASE("a 0-d operand is converted to the result type before the op, as PyTorch's kernel reads it") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    // 1 + 2^-8 is a float32; bfloat16 (8 significant bits) rounds it to 1 (a tie, to even). With a bfloat16
    // tensor the result type is bfloat16, so the comparison is made between bfloat16 values: equal.
    const Tensor ones_bf16 = ones({3}, on(d, bf16));
    const Tensor nearly_one = scalar_tensor(1.00390625, on(d, f32));
    CHECK(eq(ones_bf16, nearly_one).tolist() == std::vector<double>{1, 1, 1});
    CHECK(eq(nearly_one, ones_bf16).tolist() == std::vector<double>{1, 1, 1});
    // With dimensions it is float32 against float32: not equal.
    CHECK(eq(ones_bf16, nearly_one.view({1})).tolist() == std::vector<double>{0, 0, 0});
    // 1 - 1.00390625 in bfloat16 is 1 - 1 = 0.
    CHECK(sub(ones_bf16, nearly_one).tolist() == std::vector<double>{0, 0, 0});
  }
}

TEST_CASE("mixed-dtype binary ops match a float64 reference on cpu and sim") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    manual_seed(5);
    // float32 (4, 1, 6) with bfloat16 (3, 6), broadcast to (4, 3, 6), and a transposed operand.
    const Tensor a = random_in({4, 1, 6}, f32, d);
    const Tensor b = random_in({3, 6}, bf16, d);
    const Shape out{4, 3, 6};
    // Every bfloat16 is a float32: the result type is float32, and each op is float32 arithmetic on exact
    // inputs, so the float64 reference rounded once to float32 is exact (sums, differences, products and
    // quotients of two float32 values are correctly rounded; double rounding through float64 is innocuous).
    auto exact = [&](const Tensor& got, const std::vector<double>& want) {
      CHECK(got.dtype() == f32);
      std::vector<double> rounded = want;
      for (double& v : rounded) v = to_f32(v);
      CHECK(got.tolist() == rounded);
    };
    exact(a + b, reference_binary(a, b, out, [](double x, double y) { return x + y; }));
    exact(b + a, reference_binary(b, a, out, [](double x, double y) { return x + y; }));
    exact(a - b, reference_binary(a, b, out, [](double x, double y) { return x - y; }));
    exact(b * a, reference_binary(b, a, out, [](double x, double y) { return x * y; }));
    const Tensor positive = abs(b) + 0.5;  // bfloat16
    CHECK(positive.dtype() == bf16);
    exact(a / positive, reference_binary(a, positive, out, [](double x, double y) { return x / y; }));
    exact(positive / a, reference_binary(positive, a, out, [](double x, double y) { return x / y; }));
    exact(maximum(a, b), reference_binary(a, b, out, [](double x, double y) { return std::max(x, y); }));
    exact(minimum(b, a), reference_binary(b, a, out, [](double x, double y) { return std::min(x, y); }));
    // alpha scales b in float: a + float(alpha * b).
    exact(add(a, b, 2.5), reference_binary(a, b, out, [](double x, double y) { return x + to_f32(2.5 * y); }));
    CHECK(relative_error(pow(positive, a),
                         reference_binary(positive, a, out, [](double x, double y) { return std::pow(x, y); })) < 1e-5);

    // Comparisons compare in the result type; with float32 and bfloat16 operands that is exact.
    const auto cmp = [&](const Tensor& got, const Tensor& x, const Tensor& y, auto f) {
      CHECK(got.dtype() == b8);
      CHECK(got.tolist() ==
            reference_binary(x, y, got.sizes(), [&](double p, double q) { return f(p, q) ? 1.0 : 0.0; }));
    };
    cmp(lt(a, b), a, b, [](double p, double q) { return p < q; });
    cmp(ge(b, a), b, a, [](double p, double q) { return p >= q; });
    cmp(eq(a, a.to(bf16)), a, a.to(bf16), [](double p, double q) { return p == q; });
    cmp(ne(a.to(bf16), a), a.to(bf16), a, [](double p, double q) { return p != q; });

    // float16 with bfloat16: float32 (both exact in it).
    const Tensor h = random_in({3, 6}, f16, d);
    const Tensor hb = h.t().contiguous().t();  // (3, 6) with strides (1, 3): a transposed operand
    {
      const Tensor sum16 = hb + b.expand({3, 6});
      CHECK(sum16.dtype() == f32);
      std::vector<double> want = reference_binary(hb, b, {3, 6}, [](double x, double y) { return x + y; });
      for (double& v : want) v = to_f32(v);
      CHECK(sum16.tolist() == want);
    }

    // float32 with float64: float64 arithmetic, exact against the float64 reference.
    const Tensor wide = random_in({3, 6}, f64, d) / 3.0;
    CHECK((b.to(f32) * wide).tolist() ==
          reference_binary(b.to(f32), wide, {3, 6}, [](double x, double y) { return x * y; }));
    // 0.1f is above 0.1 in float64: compared in float64, not in float32.
    const Tensor tenth32 = full({2}, 0.1, on(d, f32)), tenth64 = full({2}, 0.1, on(d, f64));
    CHECK(gt(tenth32, tenth64).tolist() == std::vector<double>{1, 1});
    CHECK(eq(tenth32, tenth64).tolist() == std::vector<double>{0, 0});

    // Integers with floats: the integer converted to the floating type.
    const Tensor ints = tensor({1, 2, 3, -4}, on(d, i64));
    const Tensor halves = tensor({1.5, 1.5, 3, 0.25}, on(d, f32));
    CHECK((ints * halves).dtype() == f32);
    CHECK((ints * halves).tolist() == std::vector<double>{1.5, 3, 9, -1});
    CHECK((ints / halves).tolist() == std::vector<double>{to_f32(1 / 1.5), to_f32(2 / 1.5), 1, -16});
    CHECK(lt(ints, halves).tolist() == std::vector<double>{1, 0, 0, 1});
    CHECK(logical_and(ints, halves - 1.5).tolist() == std::vector<double>{0, 0, 1, 1});
    // int64 with float16: float16 arithmetic (2049 is not a float16: it becomes 2048 before the add).
    const Tensor big = tensor({2049, 3}, on(d, i64));
    CHECK((big + zeros({2}, on(d, f16))).tolist() == std::vector<double>{2048, 3});
    // int32 with int64, bool with uint8: integer arithmetic.
    const Tensor i = tensor({7, -3}, on(d, i32));
    const Tensor l = tensor({5000000000.0, 2}, on(d, i64));
    CHECK((i + l).dtype() == i64);
    CHECK((i + l).tolist() == std::vector<double>{5000000007.0, -1});
    const Tensor flags = tensor({1, 0}, on(d, b8));
    CHECK((flags + tensor({200, 7}, on(d, u8))).tolist() == std::vector<double>{201, 7});

    // where: the result type of a and b.
    const Tensor cond = tensor({1, 0, 1, 0}, on(d, b8));
    const Tensor w = where(cond, ints, halves);
    CHECK(w.dtype() == f32);
    CHECK(w.tolist() == std::vector<double>{1, 1.5, 3, 0.25});
    CHECK(where(cond, halves.to(bf16), full({}, 1.00390625, on(d, f32))).tolist() ==
          std::vector<double>{1.5, 1, 3, 1});  // the 0-d float32 converted to bfloat16 (rounds to 1)
  }
}

TEST_CASE("dtype rules apply to the promoted type") {
  const Tensor i = typed({3}, i32), l = typed({3}, i64), f = typed({3}, f32), b = typed({3}, b8);
  // div needs a floating result type: int32 / int64 promotes to int64 and is refused, as int / int is.
  CHECK_THROWS_WITH_AS(div(i, l), doctest::Contains("promote to int64"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(div(l, l), doctest::Contains("floating-point"), std::invalid_argument);
  CHECK(div(i, f).dtype() == f32);
  CHECK(div(f, l).dtype() == f32);
  // Activation gradients are floating-only too: bool with float is float32.
  CHECK(sigmoid_backward(f, b).dtype() == f32);
  CHECK_THROWS_AS(sigmoid_backward(i, b), std::invalid_argument);
  // Devices still must agree.
  CHECK_THROWS_WITH_AS(add(f, typed({3}, bf16, kCpu)), doctest::Contains("same device"), std::invalid_argument);
}

TEST_CASE("mixed dtypes allocate only the output: one block of numel * element_size, on sim and meta") {
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    fresh(d);
    {
      const Tensor a = zeros({4, 64, 64}, on(d, f32));
      const Tensor b = zeros({4, 64, 64}, on(d, bf16));
      const Tensor h = zeros({4, 64, 64}, on(d, f16));
      const Tensor row = zeros({64}, on(d, bf16));
      const Tensor s = zeros({}, on(d, f32));
      const int64_t f32_out = 4 * 64 * 64 * 4;   // 65536
      const int64_t bf16_out = 4 * 64 * 64 * 2;  // 32768
      const int64_t bool_out = 4 * 64 * 64 * 1;  // 16384
      // (peak == bytes: nothing transient, no converted copy of either operand)
      {
        MemoryProbe p(d);
        Tensor c = a + b;
        CHECK(c.dtype() == f32);
        CHECK(p.allocated_delta_is(f32_out));
        CHECK(p.peak_allocated_delta_is(f32_out));
        CHECK(p.blocks_delta() == 1);
      }
      {
        MemoryProbe p(d);
        Tensor c = b * a;
        CHECK(p.allocated_delta_is(f32_out));
        CHECK(p.peak_allocated_delta_is(f32_out));
        CHECK(p.blocks_delta() == 1);
      }
      {
        MemoryProbe p(d);
        Tensor c = b / a;
        CHECK(p.allocated_delta_is(f32_out));
        CHECK(p.peak_allocated_delta_is(f32_out));
      }
      {
        MemoryProbe p(d);
        Tensor c = h + b;
        CHECK(c.dtype() == f32);
        CHECK(p.allocated_delta_is(f32_out));
        CHECK(p.peak_allocated_delta_is(f32_out));
      }
      {
        MemoryProbe p(d);
        Tensor c = a + row;
        CHECK(p.allocated_delta_is(f32_out));
        CHECK(p.peak_allocated_delta_is(f32_out));
      }  // broadcast
      // the 0-d float32 with bfloat16: a bfloat16 result
      {
        MemoryProbe p(d);
        Tensor c = b + s;
        CHECK(c.dtype() == bf16);
        CHECK(p.allocated_delta_is(bf16_out));
        CHECK(p.peak_allocated_delta_is(bf16_out));
      }
      {
        MemoryProbe p(d);
        Tensor c = a < b;
        CHECK(p.allocated_delta_is(bool_out));
        CHECK(p.peak_allocated_delta_is(bool_out));
        CHECK(p.blocks_delta() == 1);
      }
      {
        MemoryProbe p(d);
        Tensor c = eq(b, h);
        CHECK(p.allocated_delta_is(bool_out));
        CHECK(p.peak_allocated_delta_is(bool_out));
      }
      // In place, either way round: nothing.
      {
        MemoryProbe p(d);
        b.add_(a);
        a.mul_(b);
        b.sub_(s);
        CHECK(p.allocated_delta_is(0));
        CHECK(p.peak_allocated_delta_is(0));
      }
    }
    CHECK(allocated(d) == 0);
  }
}

TEST_CASE("where converts an operand of another dtype first, as PyTorch's where_self_out") {
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    fresh(d);
    {
      const Tensor cond = zeros({64, 64}, on(d, b8));
      const Tensor a = zeros({64, 64}, on(d, f32));
      const Tensor b = zeros({64, 64}, on(d, bf16));
      const Tensor row = zeros({64}, on(d, f16));
      // b.to(float32) (64*64*4 = 16384), then the output (16384); the copy freed on return.
      AllocationEvents events = allocation_events(d, [&] { Tensor c = where(cond, a, b); });
      CHECK(events == AllocationEvents{{"alloc", 16384}, {"alloc", 16384}, {"free", 16384}, {"free", 16384}});
      // Both converted (float16 with bfloat16 is float32): a's copy at its own shape (64*4 = 256 bytes
      // requested), then b's, then the output; b's copy freed first.
      events = allocation_events(d, [&] { Tensor c = where(cond, row, b); });
      CHECK(events ==
            AllocationEvents{
                {"alloc", 256}, {"alloc", 16384}, {"alloc", 16384}, {"free", 16384}, {"free", 256}, {"free", 16384}});
      // One dtype: the output only.
      events = allocation_events(d, [&] { Tensor c = where(cond, a, a); });
      CHECK(events == AllocationEvents{{"alloc", 16384}, {"free", 16384}});
    }
    CHECK(allocated(d) == 0);
  }
}

TEST_CASE("in-place ops write self's dtype and refuse a result type that cannot be cast to it") {
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    manual_seed(9);
    // bfloat16 += float32: computed in float32, rounded once to bfloat16 (as (b.float() + a).to(bf16)).
    const Tensor a = random_in({5, 7}, f32, d);
    const Tensor b = random_in({5, 7}, bf16, d);
    const Tensor want_b = (b.to(f32) + a).to(bf16);
    b.add_(a);
    CHECK(b.dtype() == bf16);
    CHECK(b.tolist() == want_b.tolist());
    // float32 *= bfloat16 (a transposed, broadcast operand): exact in float32.
    const Tensor row = random_in({7}, bf16, d);
    const Tensor want_a = a * row.to(f32);
    a.mul_(row);
    CHECK(a.tolist() == want_a.tolist());
    // int64 += int32 and float32 /= int64 (floating result into a floating target) are fine.
    const Tensor l = tensor({10, 20}, on(d, i64));
    l.add_(tensor({1, -2}, on(d, i32)), 3);
    CHECK(l.tolist() == std::vector<double>{13, 14});
    const Tensor f = tensor({3, 5}, on(d, f32));
    f.div_(tensor({2, 4}, on(d, i64)));
    CHECK(f.tolist() == std::vector<double>{1.5, 1.25});

    // Refused, naming the op and both dtypes, with nothing written:
    struct Refusal {
      const char* op;
      Tensor self, other;
      const char* from;
      const char* to;
    };
    const Tensor ints = tensor({1, 2}, on(d, i64));
    const Tensor flags = tensor({1, 0}, on(d, b8));
    const Tensor floats = tensor({0.5, 0.25}, on(d, f32));
    for (const Refusal& r :
         {Refusal{"add_", ints, floats, "float32", "int64"},
          Refusal{"mul_", ints, floats.to(bf16), "bfloat16", "int64"}, Refusal{"sub_", flags, ints, "int64", "bool"},
          Refusal{"add_", flags, floats, "float32", "bool"},
          Refusal{"div_", tensor({4, 6}, on(d, i32)), floats, "float32", "int32"}}) {
      CAPTURE(r.op);
      const std::vector<double> before = r.self.tolist();
      auto run = [&] {
        const std::string op = r.op;
        if (op == "add_") r.self.add_(r.other);
        else if (op == "sub_") r.self.sub_(r.other);
        else if (op == "mul_") r.self.mul_(r.other);
        else r.self.div_(r.other);
      };
      const std::string message = error_of(run);
      CHECK(message.find(r.op) != std::string::npos);
      CHECK(message.find(std::string("result type ") + r.from) != std::string::npos);
      CHECK(message.find(std::string("output type ") + r.to) != std::string::npos);
      CHECK_THROWS_AS(run(), std::invalid_argument);
      CHECK(r.self.tolist() == before);
    }
    // The 0-d rule in place: an int32 target with a 0-d int64 operand stays int32 (allowed).
    const Tensor small = tensor({1, 2}, on(d, i32));
    small.add_(scalar_tensor(5, on(d, i64)));
    CHECK(small.tolist() == std::vector<double>{6, 7});
    // but a 0-d float operand makes the result float: refused.
    CHECK_THROWS_WITH_AS(small.add_(scalar_tensor(0.5, on(d, f32))), doctest::Contains("can't be cast"),
                         std::invalid_argument);
    CHECK(small.tolist() == std::vector<double>{6, 7});
  }
}
