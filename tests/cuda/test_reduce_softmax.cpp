// Reductions (flagged dimensions, argmax/argmin, max/min with indices) and softmax forward/backward on cuda
// against cpu, on transposed and sliced inputs.
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/pending_scores.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

Shape kept_shape(const Shape& in, const std::vector<bool>& reduced) {
  Shape out = in;
  for (size_t d = 0; d < in.size(); ++d)
    if (reduced[d]) out[d] = 1;
  return out;
}

TEST_CASE("reduce over every combination of dimensions, all ops, float32 and float16") {
  require_gpu();
  const std::vector<ReduceOp> ops = {ReduceOp::sum, ReduceOp::mean,   ReduceOp::prod,   ReduceOp::max,
                                     ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin, ReduceOp::norm};
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16, ScalarType::float64}) {
    // (5, 300, 7) seen through a permutation, so no reduced dimension is innermost in memory by accident.
    Pair base = random_pair({7, 5, 300}, dtype);
    Pair in = base.map([](const Tensor& t) { return t.permute({1, 2, 0}); });  // (5, 300, 7)
    for (int mask = 1; mask < 8; ++mask) {
      const std::vector<bool> reduced = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      const Shape out_shape = kept_shape(in.cpu.sizes(), reduced);
      for (ReduceOp op : ops) {
        // prod over hundreds of normals under/overflows: use it on the short dimensions only.
        if (op == ReduceOp::prod && reduced[1]) continue;
        const bool indices = op == ReduceOp::argmax || op == ReduceOp::argmin;
        Pair out = empty_pair(out_shape, indices ? ScalarType::int64 : dtype);
        cpu().reduce(op, out.cpu_view(), in.cpu_view());
        gpu().reduce(op, out.gpu_view(), in.gpu_view());
        const double scale = std::max(1.0, max_abs(out.cpu));
        const double rtol = indices ? 0.0 : default_rtol(dtype) * (dtype == ScalarType::float16 ? 2 : 1);
        check_close(out, rtol, indices ? 0.0 : rtol * scale,
                    "reduce op " + std::to_string(static_cast<int>(op)) + " mask " + std::to_string(mask));
      }
    }
  }
  SUBCASE("variance and standard deviation (Welford), with corrections 1 and 0") {
    for (ScalarType dtype : {ScalarType::float32, ScalarType::float64}) {
      // A large common offset: a naive sum of squares would lose the variance in float32.
      Pair base = on_both(randn({7, 5, 300}, TensorOptions{}.with_dtype(dtype).with_device(kCpu)) + 1000.0);
      Pair in = base.map([](const Tensor& t) { return t.permute({1, 2, 0}); });  // (5, 300, 7)
      for (int mask = 1; mask < 8; ++mask) {
        const std::vector<bool> reduced = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
        for (double correction : {1.0, 0.0}) {
          for (bool take_sqrt : {false, true}) {
            Pair out = empty_pair(kept_shape(in.cpu.sizes(), reduced), dtype);
            cpu().reduce_variance(out.cpu_view(), in.cpu_view(), correction, take_sqrt);
            gpu().reduce_variance(out.gpu_view(), in.gpu_view(), correction, take_sqrt);
            const double rtol = dtype == ScalarType::float32 ? 1e-4 : 1e-10;
            check_close(out, rtol, rtol * std::max(1.0, max_abs(out.cpu)),
                        std::string(take_sqrt ? "std" : "var") + " mask " + std::to_string(mask));
          }
        }
      }
    }
  }
  SUBCASE("integer sums are exact, bool sums count") {
    Pair ints = on_both(randint(-50, 50, {64, 129}, TensorOptions{}.with_dtype(ScalarType::int64).with_device(kCpu)));
    Pair out = empty_pair({64, 1}, ScalarType::int64);
    cpu().reduce(ReduceOp::sum, out.cpu_view(), ints.cpu_view());
    gpu().reduce(ReduceOp::sum, out.gpu_view(), ints.gpu_view());
    check_close(out, 0, 0, "int64 sum");
    Pair flags = on_both(randint(0, 2, {64, 129}, TensorOptions{}.with_dtype(ScalarType::int64).with_device(kCpu))
                             .to(ScalarType::bool_));
    Pair counts = empty_pair({1, 129}, ScalarType::int64);
    cpu().reduce(ReduceOp::sum, counts.cpu_view(), flags.cpu_view());
    gpu().reduce(ReduceOp::sum, counts.gpu_view(), flags.gpu_view());
    check_close(counts, 0, 0, "bool sum");
  }
  SUBCASE("long reductions use whole blocks") {
    Pair big = random_pair({3, 100000});
    Pair out = empty_pair({3, 1}, ScalarType::float32);
    cpu().reduce(ReduceOp::sum, out.cpu_view(), big.cpu_view());
    gpu().reduce(ReduceOp::sum, out.gpu_view(), big.gpu_view());
    check_close(out, 1e-5, 1e-5 * 1000, "long sum");
    Pair idx = empty_pair({3, 1}, ScalarType::int64);
    cpu().reduce(ReduceOp::argmax, idx.cpu_view(), big.cpu_view());
    gpu().reduce(ReduceOp::argmax, idx.gpu_view(), big.gpu_view());
    check_close(idx, 0, 0, "long argmax");
  }
}

TEST_CASE("float16 and bfloat16 inputs reduced into float32 outputs (sum, prod and norm under autocast)") {
  require_gpu();
  // Autocast's fp32_set_opt_dtype runs these with dtype=float32 and the kernel reads the 16-bit input as it
  // is (gpu_lowp_to_f32): both backends read the same 16-bit values, cuda accumulating in float, cpu in
  // double, and write float32.
  for (ScalarType dtype : {ScalarType::float16, ScalarType::bfloat16}) {
    Pair base = random_pair({7, 5, 300}, dtype);
    Pair in = base.map([](const Tensor& t) { return t.permute({1, 2, 0}); });  // (5, 300, 7)
    for (int mask = 1; mask < 8; ++mask) {
      const std::vector<bool> reduced = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::norm}) {
        if (op == ReduceOp::prod && reduced[1]) continue;
        Pair out = empty_pair(kept_shape(in.cpu.sizes(), reduced), ScalarType::float32);
        cpu().reduce(op, out.cpu_view(), in.cpu_view());
        gpu().reduce(op, out.gpu_view(), in.gpu_view());
        check_close(
            out, 1e-4, 1e-4 * std::max(1.0, max_abs(out.cpu)),
            "16-bit into float32: op " + std::to_string(static_cast<int>(op)) + " mask " + std::to_string(mask));
      }
    }
    // A whole (1024, 1024) sum and norm: one output from a million inputs (the block-per-output kernel).
    Pair big = random_pair({1024, 1024}, dtype);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::norm}) {
      Pair out = empty_pair({1, 1}, ScalarType::float32);
      cpu().reduce(op, out.cpu_view(), big.cpu_view());
      gpu().reduce(op, out.gpu_view(), big.gpu_view());
      check_close(out, 1e-4, 1e-4 * std::max(1.0, max_abs(out.cpu)), "16-bit (1024, 1024) into float32");
    }
  }
}

// The column path (a bias gradient's sum over rows, contiguous): 16-bit columns are read in pairs when their
// count is even and the data 4-byte aligned, one at a time otherwise (an odd count, or a view one element in).
TEST_CASE("sums and means over rows of 16-bit columns, in pairs and one at a time, equal cpu's") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16, ScalarType::float32}) {
    for (const Shape& shape : {Shape{1024, 768}, Shape{300, 771}, Shape{129, 32}}) {
      const Pair whole = random_pair({shape[0], shape[1] + 1}, dtype);
      for (int64_t start : {0, 1}) {  // start 1: the rows' first element is 2 bytes past a 4-byte boundary
        const Pair in = whole.map(
            [&](const Tensor& t) { return t.view({-1}).slice(0, start, start + shape[0] * shape[1]).view(shape); });
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
          Pair out = empty_pair({1, shape[1]}, dtype);
          cpu().reduce(op, out.cpu_view(), in.cpu_view());
          gpu().reduce(op, out.gpu_view(), in.gpu_view());
          check_close(out, default_rtol(dtype), default_rtol(dtype) * std::max(1.0, max_abs(out.cpu)),
                      "columns: " + std::to_string(shape[0]) + " x " + std::to_string(shape[1]) + " from " +
                          std::to_string(start) + " " + std::string(scalar_type_name(dtype)));
        }
      }
    }
  }
}

TEST_CASE("argmax, argmin and max(dim) take the first of equal values and propagate NaN") {
  require_gpu();
  const double nan = std::nan("");
  Pair in = from_values({1, 3, 3, 0, 0, 2, nan, 5, nan, -1, -1, -1}, {3, 4}, ScalarType::float32);
  for (ReduceOp op : {ReduceOp::argmax, ReduceOp::argmin}) {
    Pair out = empty_pair({3, 1}, ScalarType::int64);
    cpu().reduce(op, out.cpu_view(), in.cpu_view());
    gpu().reduce(op, out.gpu_view(), in.gpu_view());
    check_close(out, 0, 0, "ties / NaN");
  }
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    Pair values = empty_pair({3, 1}, ScalarType::float32);
    Pair indices = empty_pair({3, 1}, ScalarType::int64);
    cpu().reduce_with_indices(op, values.cpu_view(), indices.cpu_view(), in.cpu_view(), 1);
    gpu().reduce_with_indices(op, values.gpu_view(), indices.gpu_view(), in.gpu_view(), 1);
    check_close(values, 0, 0, "max/min values");
    check_close(indices, 0, 0, "max/min indices");
  }
}

TEST_CASE("reduce_with_indices along each dimension of a transposed input") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::int32}) {
    Pair in = on_both(random_pair({9, 70, 4}, ScalarType::float32, 100.0).cpu.to(dtype)).map([](const Tensor& t) {
      return t.transpose(0, 2);
    });  // (4, 70, 9)
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape out_shape = in.cpu.sizes();
      out_shape[dim] = 1;
      for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
        Pair values = empty_pair(out_shape, dtype);
        Pair indices = empty_pair(out_shape, ScalarType::int64);
        cpu().reduce_with_indices(op, values.cpu_view(), indices.cpu_view(), in.cpu_view(), dim);
        gpu().reduce_with_indices(op, values.gpu_view(), indices.gpu_view(), in.gpu_view(), dim);
        check_close(values, 0, 0, "values");
        check_close(indices, 0, 0, "indices");
      }
    }
  }
}

TEST_CASE("softmax and log_softmax forward and backward along every dimension") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16, ScalarType::float64, ScalarType::bfloat16}) {
    // dim 2 is longer than 1024, so it runs one block per row; the others one warp per row.
    Pair x = random_pair({6, 33, 1500}, dtype, 3.0).map([](const Tensor& t) { return t.transpose(0, 1); });
    for (int64_t dim = 0; dim < 3; ++dim) {
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim);
        Pair y = empty_pair(x.cpu.sizes(), dtype);
        cpu().softmax(y.cpu_view(), x.cpu_view(), dim, log);
        gpu().softmax(y.gpu_view(), x.gpu_view(), dim, log);
        const double rtol = default_rtol(dtype) * 2;
        check_close(y, rtol, rtol * 1e-2, what);

        Pair grad_out = random_pair(x.cpu.sizes(), dtype);
        Pair grad_in = empty_pair(x.cpu.sizes(), dtype);
        // The same forward output on both sides (cpu's), so only the backward kernels are compared.
        Pair output = on_both(y.cpu);
        cpu().softmax_backward(grad_in.cpu_view(), grad_out.cpu_view(), output.cpu_view(), dim, log);
        gpu().softmax_backward(grad_in.gpu_view(), grad_out.gpu_view(), output.gpu_view(), dim, log);
        check_close(grad_in, rtol, rtol * std::max(1.0, max_abs(grad_in.cpu)), what + " backward");
      }
    }
  }
  SUBCASE("a row of -inf but one stays finite; NaN propagates") {
    const double inf = INFINITY, nan = std::nan("");
    Pair x = from_values({-inf, 0, -inf, 1, nan, 2}, {2, 3}, ScalarType::float32);
    Pair y = empty_pair({2, 3}, ScalarType::float32);
    cpu().softmax(y.cpu_view(), x.cpu_view(), 1, false);
    gpu().softmax(y.gpu_view(), x.gpu_view(), 1, false);
    check_close(y, 1e-6, 0, "special values");
  }
}

TEST_CASE("softmax_backward writing a float16 gradient from float32 operands (log_softmax's half_to_float)") {
  require_gpu();
  // Transposed (the general kernel), contiguous rows of 1000 (a warp's registers) and of 3000 (shared memory).
  const std::vector<std::pair<Shape, bool>> cases = {{{6, 33, 1500}, true}, {{64, 1000}, false}, {{8, 3000}, false}};
  for (const auto& [shape, transpose] : cases) {
    Pair x = random_pair(shape, ScalarType::float32, 3.0);
    if (transpose) x = x.map([](const Tensor& t) { return t.transpose(0, 1); });
    for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim) + " of " +
                                 std::to_string(shape.size()) + "-d";
        Pair y = empty_pair(x.cpu.sizes(), ScalarType::float32);
        cpu().softmax(y.cpu_view(), x.cpu_view(), dim, log);
        Pair output = on_both(y.cpu);
        Pair grad_out = random_pair(x.cpu.sizes(), ScalarType::float32);
        Pair grad_in = empty_pair(x.cpu.sizes(), ScalarType::float16);
        cpu().softmax_backward(grad_in.cpu_view(), grad_out.cpu_view(), output.cpu_view(), dim, log);
        gpu().softmax_backward(grad_in.gpu_view(), grad_out.gpu_view(), output.gpu_view(), dim, log);
        const double rtol = default_rtol(ScalarType::float16) * 2;
        check_close(grad_in, rtol, rtol * std::max(1.0, max_abs(grad_in.cpu)), what);
      }
    }
  }
}

TEST_CASE("softmax of a 16-bit input into a float32 output: the converted input's bits, in every kernel") {
  require_gpu();
  // Contiguous rows of 64 and 500 (a warp's registers), 1024 (a block's registers), 1001 (the general
  // kernel's warp a row), 3000 (shared memory); transposed (the general kernel), along every dimension.
  const std::vector<std::pair<Shape, bool>> cases = {{{64, 64}, false},   {{40, 500}, false}, {{12, 1024}, false},
                                                     {{12, 1001}, false}, {{8, 3000}, false}, {{6, 33, 1500}, true}};
  for (ScalarType dtype : {ScalarType::float16, ScalarType::bfloat16}) {
    for (const auto& [shape, transpose] : cases) {
      Tensor x = random_pair(shape, dtype, 3.0).gpu;
      if (transpose) x = x.transpose(0, 1);
      const Tensor widened = x.to(ScalarType::float32);  // exact, in x's layout
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
        for (bool log : {false, true}) {
          const TensorOptions f32 = TensorOptions{}.with_device(kCuda);
          const Tensor direct = empty(x.sizes(), f32), converted = empty(x.sizes(), f32);
          gpu().softmax(direct.view_for_kernels(), x.view_for_kernels(), dim, log);
          gpu().softmax(converted.view_for_kernels(), widened.view_for_kernels(), dim, log);
          INFO(scalar_type_name(dtype), " ", shape.size(), "-d dim ", dim, log ? " log" : "");
          CHECK(direct.cpu().tolist() == converted.cpu().tolist());  // bit for bit
        }
      }
    }
  }
  SUBCASE("backward: a 16-bit gradient from float32 operands is the float32 gradient's cast, bit for bit") {
    for (ScalarType dtype : {ScalarType::float16, ScalarType::bfloat16}) {
      for (const auto& [shape, transpose] : cases) {
        Tensor y = random_pair(shape, ScalarType::float32, 0.1).gpu, g = random_pair(shape).gpu;
        if (transpose) y = y.transpose(0, 1), g = g.transpose(0, 1);
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
          for (bool log : {false, true}) {
            const Tensor direct = empty(y.sizes(), TensorOptions{}.with_device(kCuda).with_dtype(dtype));
            const Tensor whole = empty(y.sizes(), TensorOptions{}.with_device(kCuda));
            gpu().softmax_backward(direct.view_for_kernels(), g.view_for_kernels(), y.view_for_kernels(), dim, log);
            gpu().softmax_backward(whole.view_for_kernels(), g.view_for_kernels(), y.view_for_kernels(), dim, log);
            INFO(scalar_type_name(dtype), " ", shape.size(), "-d dim ", dim, log ? " log" : "");
            CHECK(direct.to(ScalarType::float32).cpu().tolist() ==
                  whole.to(dtype).to(ScalarType::float32).cpu().tolist());
          }
        }
      }
    }
  }
  CHECK_THROWS_WITH_AS(
      gpu().softmax(
          empty({4, 4}, TensorOptions{}.with_device(kCuda).with_dtype(ScalarType::float64)).view_for_kernels(),
          random_pair({4, 4}, ScalarType::float16).gpu.view_for_kernels(), 1, false),
      doctest::Contains("float32 from float16 or bfloat16"), std::invalid_argument);
}

TEST_CASE("a deferred chain from softmax's gradient in one kernel: the separate launches' bits") {
  require_gpu();
  // grad_out float32, or 16-bit (a deferred cast's source, read as its float32 copy): the bits of the float32
  // copy's chain either way.
  // Contiguous rows of 64 and 500, attention's (B, H, T, T) with a causal (1, 1, T, T) mask broadcast (the
  // one-pass kernel); rows of 3000 and transposed ones (the default: the three launches themselves).
  struct Case {
    Shape shape;
    bool broadcast_mask, transpose;
  };
  const std::vector<Case> cases = {{{64, 64}, false, false},
                                   {{40, 500}, false, false},
                                   {{2, 3, 96, 1024}, true, false},
                                   {{8, 3000}, false, false},
                                   {{48, 40}, false, true}};
  const TensorOptions f32 = TensorOptions{}.with_device(kCuda);
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::float16}) {
    for (const Case& c : cases) {
      for (ScalarType grad_dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::float16}) {
        Tensor y = random_pair(c.shape, ScalarType::float32, 0.1).gpu;
        Tensor g_read = random_pair(c.shape, grad_dtype).gpu;
        if (c.transpose) y = y.transpose(0, 1), g_read = g_read.transpose(0, 1);
        const Tensor g = g_read.to(ScalarType::float32);  // the values the kernels read, exactly
        const Shape shape = y.sizes();
        const int64_t dim = static_cast<int64_t>(shape.size()) - 1;
        const int64_t T = shape.back();
        const Tensor mask = c.broadcast_mask
                                ? eq(tril(ones({shape[2], T}, f32)).view({1, 1, shape[2], T}), 0.0).expand(shape)
                                : gt(random_pair(shape).gpu, 0.0);
        struct Steps {
          bool masked;
          std::optional<BinaryOp> then;
        };
        for (const Steps steps : {Steps{true, BinaryOp::mul}, Steps{true, BinaryOp::div}, Steps{true, std::nullopt},
                                  Steps{false, std::nullopt}, Steps{false, BinaryOp::mul}}) {
          const Tensor whole = empty(shape, f32);
          gpu().softmax_backward(whole.view_for_kernels(), g.view_for_kernels(), y.view_for_kernels(), dim, false);
          const Tensor separate = whole.to(dtype);
          if (steps.masked)
            gpu().masked_fill(separate.view_for_kernels(), separate.view_for_kernels(), mask.view_for_kernels(), -3.0);
          if (steps.then)
            gpu().binary_scalar(*steps.then, separate.view_for_kernels(), separate.view_for_kernels(), 0.3);
          const Tensor fused = empty(shape, TensorOptions{}.with_device(kCuda).with_dtype(dtype));
          const StridedView mask_view = mask.view_for_kernels();
          const ScalarStep then{steps.then.value_or(BinaryOp::mul), 0.3};
          gpu().softmax_backward_then(fused.view_for_kernels(), g_read.view_for_kernels(), y.view_for_kernels(), dim,
                                      steps.masked ? &mask_view : nullptr, -3.0, steps.then ? &then : nullptr);
          INFO(scalar_type_name(dtype), " from ", scalar_type_name(grad_dtype), " ", shape.size(), "-d rows of ", T,
               steps.masked ? " masked" : "", steps.then ? " then a number" : "");
          CHECK(fused.to(ScalarType::float32).cpu().tolist() == separate.to(ScalarType::float32).cpu().tolist());
        }
        // softmax_backward itself from the 16-bit gradient (warp, shared-memory and strided kernels), into
        // float32 and into `dtype` (a gradient its reader casts): the float32 copy's bits, and cpu's values.
        const Tensor whole = empty(shape, f32);
        gpu().softmax_backward(whole.view_for_kernels(), g.view_for_kernels(), y.view_for_kernels(), dim, false);
        for (ScalarType gi_dtype : {ScalarType::float32, dtype}) {
          const Tensor direct = empty(shape, TensorOptions{}.with_device(kCuda).with_dtype(gi_dtype));
          gpu().softmax_backward(direct.view_for_kernels(), g_read.view_for_kernels(), y.view_for_kernels(), dim,
                                 false);
          INFO(scalar_type_name(gi_dtype), " from ", scalar_type_name(grad_dtype), " rows of ", T);
          CHECK(direct.to(ScalarType::float32).cpu().tolist() ==
                whole.to(gi_dtype).to(ScalarType::float32).cpu().tolist());
          const Tensor on_cpu = empty(shape, TensorOptions{}.with_device(kCpu).with_dtype(gi_dtype));
          cpu().softmax_backward(on_cpu.view_for_kernels(), g_read.cpu().view_for_kernels(), y.cpu().view_for_kernels(),
                                 dim, false);
          check_close(Pair{on_cpu, direct}, gi_dtype == ScalarType::float32 ? 1e-5 : 1e-2, 1e-5,
                      "softmax_backward from a 16-bit gradient");
        }
      }
    }
  }
}

}  // namespace
}  // namespace bytegrad::testing

namespace bytegrad::testing {
namespace {

TEST_CASE("softmax of pending scores in one kernel: the bits of the scale, masked_fill and softmax launches") {
  require_gpu();
  const TensorOptions on_gpu = TensorOptions{}.with_device(kCuda);
  struct Case {
    ScalarType source, out;
    int64_t T;
  };
  for (const Case c :
       {Case{ScalarType::float32, ScalarType::float32, 1024}, Case{ScalarType::bfloat16, ScalarType::float32, 1024},
        Case{ScalarType::bfloat16, ScalarType::bfloat16, 1024}, Case{ScalarType::float16, ScalarType::float32, 520},
        Case{ScalarType::float32, ScalarType::float32, 776}}) {
    const Shape shape{2, 3, 40, c.T};
    const Tensor source = (random_pair(shape).gpu * 4.0).to(c.source);
    // attention's causal mask, broadcast over batch and heads (rows past the diagonal masked): its rows
    // merge into two dimensions, [batch x heads, query]; and one that differs per batch, broadcast over heads
    // only, whose rows stay three dimensions (the kernels find a row's mask two ways).
    const Tensor columns = arange(0, c.T, 1, on_gpu).view({1, 1, 1, c.T});
    const Tensor diagonal = arange(0, 40, 1, on_gpu).view({1, 1, 40, 1}) * 20.0;
    const Tensor mask = gt(columns, diagonal).expand(shape);
    const Tensor per_batch = gt(columns, diagonal + arange(0, 2, 1, on_gpu).view({2, 1, 1, 1}) * 7.0).expand(shape);
    for (const BinaryOp op : {BinaryOp::mul, BinaryOp::div}) {
      for (const Tensor* masking : {&mask, &per_batch, static_cast<const Tensor*>(nullptr)}) {
        const bool masked = masking != nullptr;
        for (const bool log : {false, true}) {
          const Tensor scaled = empty(shape, TensorOptions{}.with_device(kCuda).with_dtype(c.source));
          gpu().binary_scalar(op, scaled.view_for_kernels(), source.view_for_kernels(), 0.125, false);
          if (masked)
            gpu().masked_fill(scaled.view_for_kernels(), scaled.view_for_kernels(), masking->view_for_kernels(),
                              -INFINITY);
          const Tensor separate = empty(shape, TensorOptions{}.with_device(kCuda).with_dtype(c.out));
          gpu().softmax(separate.view_for_kernels(), scaled.view_for_kernels(), 3, log);
          const Tensor fused = empty(shape, TensorOptions{}.with_device(kCuda).with_dtype(c.out));
          const StridedView mask_view = masked ? masking->view_for_kernels() : StridedView{};
          REQUIRE(gpu().softmax_of_scaled(fused.view_for_kernels(), source.view_for_kernels(), ScalarStep{op, 0.125},
                                          masked ? &mask_view : nullptr, -INFINITY, 3, log, nullptr));
          INFO(scalar_type_name(c.source), " -> ", scalar_type_name(c.out), " rows of ", c.T,
               op == BinaryOp::div ? " div" : " mul",
               masking == &mask ? " masked"
               : masked         ? " masked per batch"
                                : "",
               log ? " log" : "");
          CHECK(fused.to(ScalarType::float32).cpu().tolist() == separate.to(ScalarType::float32).cpu().tolist());
          if (c.out != ScalarType::float32) continue;
          // A 16-bit copy beside a float32 output: the bits of a cast run after.
          for (const ScalarType copy_dtype : {ScalarType::bfloat16, ScalarType::float16}) {
            const Tensor with_copy = empty(shape, on_gpu);
            const Tensor copy = empty(shape, TensorOptions{}.with_device(kCuda).with_dtype(copy_dtype));
            const StridedView copy_view = copy.view_for_kernels();
            REQUIRE(gpu().softmax_of_scaled(with_copy.view_for_kernels(), source.view_for_kernels(),
                                            ScalarStep{op, 0.125}, masked ? &mask_view : nullptr, -INFINITY, 3, log,
                                            &copy_view));
            CHECK(with_copy.cpu().tolist() == separate.cpu().tolist());
            CHECK(copy.to(ScalarType::float32).cpu().tolist() ==
                  separate.to(copy_dtype).to(ScalarType::float32).cpu().tolist());
          }
        }
      }
    }
  }
  // Rows the kernel does not take: refused, nothing written.
  const Tensor short_rows = random_pair({4, 512}).gpu;
  const Tensor out = empty({4, 512}, on_gpu);
  CHECK_FALSE(gpu().softmax_of_scaled(out.view_for_kernels(), short_rows.view_for_kernels(),
                                      ScalarStep{BinaryOp::mul, 2.0}, nullptr, 0.0, 1, false, nullptr));
  // A copy of a 16-bit output, or into float32: refused too.
  const Tensor rows = random_pair({4, 1024}).gpu,
               half_out = empty({4, 1024}, TensorOptions{ScalarType::bfloat16, kCuda});
  const Tensor wide_copy = empty({4, 1024}, on_gpu);
  const StridedView wide_view = wide_copy.view_for_kernels(), half_view = half_out.view_for_kernels();
  CHECK_FALSE(gpu().softmax_of_scaled(half_out.view_for_kernels(), rows.to(ScalarType::bfloat16).view_for_kernels(),
                                      ScalarStep{BinaryOp::mul, 2.0}, nullptr, 0.0, 1, false, &half_view));
  CHECK_FALSE(gpu().softmax_of_scaled(empty({4, 1024}, on_gpu).view_for_kernels(), rows.view_for_kernels(),
                                      ScalarStep{BinaryOp::mul, 2.0}, nullptr, 0.0, 1, false, &wide_view));
}

TEST_CASE("nanoGPT's slow attention with its scores pending: the written path's bits, softmax in one kernel") {
  require_gpu();
  const int64_t B = 1, H = 2, T = 1024, hs = 16;
  struct Result {
    std::vector<double> y, q_grad, k_grad;
    uint64_t fused = 0, copies = 0;
  };
  const auto run = [&](bool defer, bool bf16) {
    const bool previous = defers_scores();
    set_defers_scores(defer);
    const TensorOptions on_gpu = TensorOptions{}.with_device(kCuda);
    manual_seed(3);
    const Tensor q = randn({B, H, T, hs}, on_gpu).requires_grad_();
    const Tensor k = randn({B, H, T, hs}, on_gpu).requires_grad_();
    const Tensor v = randn({B, H, T, hs}, on_gpu);
    const Tensor bias = tril(ones({T, T}, on_gpu)).view({1, 1, T, T});
    const uint64_t fused = pending_scores_fused(), copies = pending_scores_copies_fused();
    Result r;
    {
      std::optional<AutocastGuard> autocast;
      if (bf16) autocast.emplace(DeviceType::cuda, ScalarType::bfloat16);
      Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
      att = masked_fill(att, eq(bias, 0.0), -INFINITY);
      att = softmax(att, -1);
      Tensor y = matmul(att, v);
      autocast.reset();
      r.y = y.to(ScalarType::float32).cpu().flatten().tolist();
      y.sum().backward();
    }
    r.fused = pending_scores_fused() - fused;
    r.copies = pending_scores_copies_fused() - copies;
    r.q_grad = q.grad().cpu().flatten().tolist();
    r.k_grad = k.grad().cpu().flatten().tolist();
    set_defers_scores(previous);
    return r;
  };
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    const Result written = run(false, bf16);
    const Result pending = run(true, bf16);
    CHECK(written.fused == 0);
    CHECK(pending.fused == 1);
    CHECK(pending.copies == (bf16 ? 1 : 0));  // autocast's bfloat16 copy for att @ v, written beside softmax's
    CHECK(pending.y == written.y);
    CHECK(pending.q_grad == written.q_grad);
    CHECK(pending.k_grad == written.k_grad);
  }
}

}  // namespace
}  // namespace bytegrad::testing
