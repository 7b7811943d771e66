// fill, arange, copy, unary, binary, binary_scalar, where, masked_fill on cuda against cpu, on contiguous,
// transposed, sliced and expanded (broadcast) operands.
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

Tensor transposed(const Tensor& t) { return t.transpose(0, 1); }
Tensor every_other_column(const Tensor& t) { return t.slice(1, 0, std::nullopt, 2); }

// Values exactly representable in every dtype (halves up to 49.5), non-negative where the target is
// unsigned so no conversion is implementation-defined.
std::vector<double> exact_values(int64_t n, bool allow_negative, bool boolean) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (boolean) {
      v[i] = (i * 7 % 3) == 0 ? 1.0 : 0.0;
    } else {
      const int64_t k = (i * 37) % 100;  // 0..99
      v[i] = allow_negative ? (k - 50) * 0.5 : k * 0.5;
    }
  }
  return v;
}

bool is_unsigned_like(ScalarType t) { return t == ScalarType::uint8 || t == ScalarType::bool_; }

TEST_CASE("fill writes every element of contiguous and strided views, in every dtype") {
  require_gpu();
  for (ScalarType dtype : kAllDtypes) {
    Pair out = empty_pair({6, 10}, dtype);
    cpu().fill(out.cpu_view(), 3.0);
    gpu().fill(out.gpu_view(), 3.0);
    Pair strided = out.map(every_other_column);
    cpu().fill(strided.cpu_view(), 1.0);
    gpu().fill(strided.gpu_view(), 1.0);
    check_close(out, -1, -1, "fill");
  }
}

TEST_CASE("arange counts in row-major order, in every dtype but bool") {
  require_gpu();
  for (ScalarType dtype : kAllDtypes) {
    if (dtype == ScalarType::bool_) continue;
    Pair out = empty_pair({4, 25}, dtype);
    const double step = is_floating_point(dtype) ? 0.25 : 1.0;
    cpu().arange(out.cpu_view(), 2.0, step);
    gpu().arange(out.gpu_view(), 2.0, step);
    check_close(out, -1, -1, "arange");
    Pair t = out.map(transposed);  // a strided destination still counts in its own row-major order
    cpu().arange(t.cpu_view(), -3.0, 1.0);
    gpu().arange(t.gpu_view(), -3.0, 1.0);
    check_close(out, -1, -1, "arange (transposed)");
  }
}

TEST_CASE("copy converts between all 8 dtypes, from transposed, sliced and expanded sources") {
  require_gpu();
  const Shape shape{12, 9};
  for (ScalarType from : kAllDtypes) {
    for (ScalarType to : kAllDtypes) {
      const bool negative = !is_unsigned_like(from) && !is_unsigned_like(to);
      Pair src = from_values(exact_values(12 * 9, negative, from == ScalarType::bool_), shape, from);
      const std::string what =
          std::string("copy ") + std::string(scalar_type_name(from)) + " -> " + std::string(scalar_type_name(to));
      {  // transposed source into a contiguous destination
        Pair s = src.map(transposed);
        Pair dst = empty_pair({9, 12}, to);
        cpu().copy(dst.cpu_view(), s.cpu_view());
        gpu().copy(dst.gpu_view(), s.gpu_view());
        check_close(dst, 0, 0, what + " (transposed)");
      }
      {  // sliced source into a strided destination
        Pair s = src.map(every_other_column);
        Pair dst_base = empty_pair({9, 12}, to);
        Pair dst = dst_base.map([](const Tensor& t) { return t.transpose(0, 1).slice(1, 0, 5); });
        cpu().copy(dst.cpu_view(), s.cpu_view());
        gpu().copy(dst.gpu_view(), s.gpu_view());
        check_close(dst_base, 0, 0, what + " (sliced)");
      }
      {  // expanded (stride 0) source
        Pair s = src.map([](const Tensor& t) { return t.select(0, 3).unsqueeze(0).expand({5, 9}); });
        Pair dst = empty_pair({5, 9}, to);
        cpu().copy(dst.cpu_view(), s.cpu_view());
        gpu().copy(dst.gpu_view(), s.gpu_view());
        check_close(dst, 0, 0, what + " (expanded)");
      }
    }
  }
}

TEST_CASE("copy rounds float32 to float16 and bfloat16 to nearest even, as PyTorch") {
  require_gpu();
  Pair src = random_pair({64, 33}, ScalarType::float32, 100.0);
  for (ScalarType to : {ScalarType::float16, ScalarType::bfloat16, ScalarType::float64}) {
    Pair dst = empty_pair({33, 64}, to);
    Pair s = src.map(transposed);
    cpu().copy(dst.cpu_view(), s.cpu_view());
    gpu().copy(dst.gpu_view(), s.gpu_view());
    check_close(dst, 0, 0, "rounding copy");
  }
}

TEST_CASE("unary ops match cpu on transposed inputs (float32, float64, float16, bfloat16)") {
  require_gpu();
  // logical_not writes bool: its own subcase below
  std::vector<UnaryOp> ops = {UnaryOp::neg,   UnaryOp::abs, UnaryOp::exp, UnaryOp::log,        UnaryOp::sqrt,
                              UnaryOp::rsqrt, UnaryOp::cos, UnaryOp::sin, UnaryOp::log_sigmoid};
#define BYTEGRAD_ACTIVATION_FORWARD(op, ...) ops.push_back(UnaryOp::op);  // every activation row
  BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_ACTIVATION_FORWARD)
#undef BYTEGRAD_ACTIVATION_FORWARD
  for (ScalarType dtype : kFloatDtypes) {
    Pair x = random_pair({40, 31}, dtype, 2.0);
    Pair positive = on_both(x.cpu.to(ScalarType::float64));  // |x| + 0.1 for log and sqrt
    {
      std::vector<double> v = positive.cpu.tolist();
      for (double& e : v) e = std::abs(e) + 0.1;
      positive = from_values(v, {40, 31}, dtype);
    }
    for (UnaryOp op : ops) {
      Pair in = (op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt) ? positive : x;
      in = in.map(transposed);
      Pair out = empty_pair({31, 40}, dtype);
      cpu().unary(op, out.cpu_view(), in.cpu_view());
      gpu().unary(op, out.gpu_view(), in.gpu_view());
      check_close(out, -1, 1e-6, "unary op " + std::to_string(static_cast<int>(op)));
    }
  }
  SUBCASE("logical_not into bool") {
    Pair in = from_values({0, 1, 2, 0, -3, 0}, {2, 3}, ScalarType::float32);
    Pair out = empty_pair({2, 3}, ScalarType::bool_);
    cpu().unary(UnaryOp::logical_not, out.cpu_view(), in.cpu_view());
    gpu().unary(UnaryOp::logical_not, out.gpu_view(), in.gpu_view());
    check_close(out, 0, 0, "logical_not");
  }
}

TEST_CASE("binary ops match cpu with broadcast and transposed operands") {
  require_gpu();
  std::vector<BinaryOp> arithmetic = {BinaryOp::add, BinaryOp::sub,     BinaryOp::mul,    BinaryOp::div,
                                      BinaryOp::pow, BinaryOp::maximum, BinaryOp::minimum};
#define BYTEGRAD_ACTIVATION_BACKWARD(op, ...) arithmetic.push_back(BinaryOp::op##_backward);  // every activation row
  BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_ACTIVATION_BACKWARD)
#undef BYTEGRAD_ACTIVATION_BACKWARD
  const std::vector<BinaryOp> to_bool = {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt,          BinaryOp::le,
                                         BinaryOp::gt, BinaryOp::ge, BinaryOp::logical_and, BinaryOp::logical_or};
  for (ScalarType dtype : kFloatDtypes) {
    Pair a_base = random_pair({24, 17}, dtype);
    Pair b_row = random_pair({17}, dtype);
    // pow needs a positive base; the others take any values.
    Pair a_positive = on_both(a_base.cpu.to(ScalarType::float64));
    {
      std::vector<double> v = a_positive.cpu.tolist();
      for (double& e : v) e = std::abs(e) + 0.5;
      a_positive = from_values(v, {24, 17}, dtype);
    }
    Pair b = b_row.map([](const Tensor& t) { return t.unsqueeze(0).expand({24, 17}); });
    for (BinaryOp op : arithmetic) {
      Pair a = op == BinaryOp::pow ? a_positive : a_base;
      Pair out = empty_pair({24, 17}, dtype);
      cpu().binary(op, out.cpu_view(), a.cpu_view(), b.cpu_view(), 0.5);
      gpu().binary(op, out.gpu_view(), a.gpu_view(), b.gpu_view(), 0.5);
      check_close(out, -1, 1e-6, "binary op " + std::to_string(static_cast<int>(op)));
    }
    for (BinaryOp op : to_bool) {
      Pair a = a_base.map(transposed);
      Pair bt = b.map(transposed);
      Pair out = empty_pair({17, 24}, ScalarType::bool_);
      cpu().binary(op, out.cpu_view(), a.cpu_view(), bt.cpu_view(), 1.0);
      gpu().binary(op, out.gpu_view(), a.gpu_view(), bt.gpu_view(), 1.0);
      check_close(out, 0, 0, "comparison " + std::to_string(static_cast<int>(op)));
    }
  }
  SUBCASE("integer arithmetic is exact, and in place (out aliases a)") {
    Pair a = from_values(exact_values(60, true, false), {6, 10}, ScalarType::int64);
    Pair b = from_values(exact_values(60, true, false), {10, 6}, ScalarType::int64).map(transposed);
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::maximum, BinaryOp::minimum}) {
      cpu().binary(op, a.cpu_view(), a.cpu_view(), b.cpu_view(), 2.0);
      gpu().binary(op, a.gpu_view(), a.gpu_view(), b.gpu_view(), 2.0);
      check_close(a, 0, 0, "int64 binary");
    }
  }
}

TEST_CASE("binary ops on operands of two dtypes match cpu (the mixed-dtype path)") {
  require_gpu();
  const std::vector<BinaryOp> arithmetic = {BinaryOp::add, BinaryOp::sub,     BinaryOp::mul,
                                            BinaryOp::div, BinaryOp::maximum, BinaryOp::minimum};
  const std::vector<BinaryOp> to_bool = {BinaryOp::eq, BinaryOp::lt, BinaryOp::ge, BinaryOp::logical_and};
  struct Types {
    ScalarType a, b, common;
  };
  for (const Types t : {Types{ScalarType::float32, ScalarType::bfloat16, ScalarType::float32},
                        Types{ScalarType::bfloat16, ScalarType::float32, ScalarType::float32},
                        Types{ScalarType::float16, ScalarType::bfloat16, ScalarType::float32},
                        Types{ScalarType::float32, ScalarType::float64, ScalarType::float64},
                        Types{ScalarType::int64, ScalarType::float16, ScalarType::float16},
                        Types{ScalarType::int32, ScalarType::int64, ScalarType::int64},
                        // a 0-d float32 with bfloat16 is computed in bfloat16 (result_type's zero-dim rule)
                        Types{ScalarType::bfloat16, ScalarType::float32, ScalarType::bfloat16}}) {
    const std::string what = std::string(scalar_type_name(t.a)) + " with " + std::string(scalar_type_name(t.b)) +
                             " in " + std::string(scalar_type_name(t.common));
    CAPTURE(what);
    const bool integral = !is_floating_point(t.a) || !is_floating_point(t.b);
    Pair a = from_values(exact_values(24 * 17, true, false), {24, 17}, t.a);
    Pair b_row = integral ? from_values(exact_values(17, true, false), {17}, t.b) : random_pair({17}, t.b);
    Pair b = b_row.map([](const Tensor& x) { return x.unsqueeze(0).expand({24, 17}); });
    for (BinaryOp op : arithmetic) {
      if (op == BinaryOp::div && !is_floating_point(t.common)) continue;
      Pair out = empty_pair({24, 17}, t.common);
      cpu().binary(op, out.cpu_view(), a.cpu_view(), b.cpu_view(), 0.5, t.common);
      gpu().binary(op, out.gpu_view(), a.gpu_view(), b.gpu_view(), 0.5, t.common);
      check_close(out, -1, 1e-6, what + " binary op " + std::to_string(static_cast<int>(op)));
    }
    for (BinaryOp op : to_bool) {
      Pair at = a.map(transposed), bt = b.map(transposed);
      Pair out = empty_pair({17, 24}, ScalarType::bool_);
      cpu().binary(op, out.cpu_view(), at.cpu_view(), bt.cpu_view(), 1.0, t.common);
      gpu().binary(op, out.gpu_view(), at.gpu_view(), bt.gpu_view(), 1.0, t.common);
      check_close(out, 0, 0, what + " comparison " + std::to_string(static_cast<int>(op)));
    }
  }
  SUBCASE("in place: a bfloat16 target with a float32 operand (out aliases a, narrower than common)") {
    Pair a = random_pair({24, 17}, ScalarType::bfloat16);
    Pair b = random_pair({17, 24}, ScalarType::float32).map(transposed);
    for (BinaryOp op : {BinaryOp::add, BinaryOp::mul, BinaryOp::sub}) {
      cpu().binary(op, a.cpu_view(), a.cpu_view(), b.cpu_view(), 2.0, ScalarType::float32);
      gpu().binary(op, a.gpu_view(), a.gpu_view(), b.gpu_view(), 2.0, ScalarType::float32);
      check_close(a, 0, 0, "in-place bfloat16 op float32");
    }
  }
  SUBCASE("through the ops: float32 + bfloat16 allocates only the float32 output") {
    Pair x = random_pair({64, 64}, ScalarType::float32);
    Pair y = random_pair({64, 64}, ScalarType::bfloat16);
    const int64_t before = caching_allocator(x.gpu.device()).memory_allocated();
    caching_allocator(x.gpu.device()).reset_peak_stats();
    Tensor gz = x.gpu + y.gpu;
    CHECK(gz.dtype() == ScalarType::float32);
    CHECK(caching_allocator(x.gpu.device()).memory_allocated() - before == 64 * 64 * 4);
    CHECK(caching_allocator(x.gpu.device()).max_memory_allocated() - before == 64 * 64 * 4);
    check_close(gz, x.cpu + y.cpu, 0, 0, "float32 + bfloat16");
  }
}

TEST_CASE("binary_scalar matches cpu, scalar second and first, with pow's special exponents") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16}) {
    Pair a = random_pair({30, 20}, dtype).map(transposed);
    Pair positive = on_both(a.cpu.to(ScalarType::float64));
    {
      std::vector<double> v = positive.cpu.tolist();
      for (double& e : v) e = std::abs(e) + 0.5;
      positive = from_values(v, {20, 30}, dtype);
    }
    struct Case {
      BinaryOp op;
      double scalar;
      bool scalar_first;
    };
    const std::vector<Case> cases = {
        {BinaryOp::add, 1.5, false}, {BinaryOp::sub, 1.5, true},      {BinaryOp::mul, -3.0, false},
        {BinaryOp::div, 7.0, false}, {BinaryOp::div, 7.0, true},      {BinaryOp::pow, 2.0, false},
        {BinaryOp::pow, 0.5, false}, {BinaryOp::pow, -1.0, false},    {BinaryOp::pow, 1.7, false},
        {BinaryOp::pow, 2.0, true},  {BinaryOp::maximum, 0.1, false}, {BinaryOp::gt, 0.25, false}};
    for (const Case& c : cases) {
      const bool needs_positive = c.op == BinaryOp::pow || (c.op == BinaryOp::div && c.scalar_first);
      Pair in = needs_positive ? positive : a;
      const bool comparison = c.op == BinaryOp::gt;
      Pair out = empty_pair({20, 30}, comparison ? ScalarType::bool_ : dtype);
      cpu().binary_scalar(c.op, out.cpu_view(), in.cpu_view(), c.scalar, c.scalar_first);
      gpu().binary_scalar(c.op, out.gpu_view(), in.gpu_view(), c.scalar, c.scalar_first);
      check_close(out, -1, 1e-6, "binary_scalar op " + std::to_string(static_cast<int>(c.op)));
    }
  }
}

TEST_CASE("where and masked_fill with broadcast masks") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::int64, ScalarType::float16}) {
    Pair a = random_pair({8, 12}, ScalarType::float32, 10.0);
    a = on_both(a.cpu.to(dtype));
    Pair b = on_both(random_pair({12}, ScalarType::float32, 10.0).cpu.to(dtype)).map([](const Tensor& t) {
      return t.unsqueeze(0).expand({8, 12});
    });
    Pair mask_row = from_values({1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1}, {12}, ScalarType::bool_);
    Pair mask = mask_row.map([](const Tensor& t) { return t.unsqueeze(0).expand({8, 12}); });
    Pair out = empty_pair({8, 12}, dtype);
    cpu().where(out.cpu_view(), mask.cpu_view(), a.cpu_view(), b.cpu_view());
    gpu().where(out.gpu_view(), mask.gpu_view(), a.gpu_view(), b.gpu_view());
    check_close(out, 0, 0, "where");

    Pair column_mask = from_values({0, 1, 1, 0, 0, 0, 1, 0}, {8, 1}, ScalarType::bool_).map([](const Tensor& t) {
      return t.expand({8, 12});
    });
    cpu().masked_fill(out.cpu_view(), out.cpu_view(), column_mask.cpu_view(), -7.0);
    gpu().masked_fill(out.gpu_view(), out.gpu_view(), column_mask.gpu_view(), -7.0);
    check_close(out, 0, 0, "masked_fill");
    // Out of place (PyTorch's clone and fill, in one pass): a contiguous source and a broadcast one.
    for (const Pair* source : {&a, &b}) {
      Pair filled = empty_pair({8, 12}, dtype);
      cpu().masked_fill(filled.cpu_view(), source->cpu_view(), column_mask.cpu_view(), -7.0);
      gpu().masked_fill(filled.gpu_view(), source->gpu_view(), column_mask.gpu_view(), -7.0);
      check_close(filled, 0, 0,
                  source == &a ? "masked_fill from a contiguous source" : "masked_fill from a broadcast one");
      // masked_fill_then_scalar (a deferred gradient's last step) gives the two launches' bits.
      if (dtype == ScalarType::int64) continue;
      for (BinaryOp op : {BinaryOp::mul, BinaryOp::div}) {
        Pair separate = empty_pair({8, 12}, dtype);
        gpu().masked_fill(separate.gpu_view(), source->gpu_view(), column_mask.gpu_view(), 0.0);
        gpu().binary_scalar(op, separate.gpu_view(), separate.gpu_view(), 0.3);
        const Tensor fused = empty({8, 12}, TensorOptions{dtype, kCuda});
        gpu().masked_fill_then_scalar(op, fused.view_for_kernels(), source->gpu_view(), column_mask.gpu_view(), 0.0,
                                      0.3);
        CHECK(fused.to(kCpu).to(ScalarType::float64).flatten().tolist() ==
              separate.gpu.to(kCpu).to(ScalarType::float64).flatten().tolist());
      }
    }
  }
}

}  // namespace
}  // namespace bytegrad::testing
