// LayerNorm's kernels (kernels/cuda/cuda_layer_norm.cu) and triu/tril (cuda_triangle.cu) on cuda against
// the cpu backend: forward output, mean and rstd, and every gradient, for short rows (warp per row), long
// rows (block per row), 2-d normalized shapes, without weight/bias, in float32, float64 and bfloat16, and
// the tall-and-narrow shape whose weight/bias gradients go through partial blocks and sum(0); the same kernels
// in RMS mode (fused_rms_norm: no mean) likewise.
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

std::optional<Tensor> opt(const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; }

void compare_layer_norm(const Shape& shape, const Shape& norm, ScalarType dtype, bool affine, bool bias,
                        double offset = 0.0) {
  CAPTURE(shape_str(shape));
  CAPTURE(shape_str(norm));
  CAPTURE(scalar_type_name(dtype));
  CAPTURE(affine);
  CAPTURE(bias);
  Pair x = random_pair(shape, dtype, 2.0);
  if (offset != 0.0) x = on_both((x.cpu.to(ScalarType::float64) + offset).to(dtype));
  Pair w = affine ? random_pair(norm, dtype) : Pair{};
  Pair b = affine && bias ? random_pair(norm, dtype) : Pair{};
  Pair dy = random_pair(shape, dtype);
  const LayerNormResult rc = native_layer_norm(x.cpu, norm, opt(w.cpu), opt(b.cpu), 1e-5);
  const LayerNormResult rg = native_layer_norm(x.gpu, norm, opt(w.gpu), opt(b.gpu), 1e-5);
  const bool bf16 = dtype == ScalarType::bfloat16;
  const double rtol = dtype == ScalarType::float64 ? 1e-10 : bf16 ? 2e-2 : 1e-4;
  check_close(rg.output, rc.output, rtol, rtol * std::max(1.0, max_abs(rc.output)), "output");
  check_close(rg.mean, rc.mean, dtype == ScalarType::float64 ? 1e-10 : 1e-5, 1e-5 * (1 + std::abs(offset)), "mean");
  check_close(rg.rstd, rc.rstd, dtype == ScalarType::float64 ? 1e-10 : 1e-4, 1e-6, "rstd");
  const std::array<bool, 3> mask = {true, affine, affine && bias};
  const LayerNormGrads gc =
      native_layer_norm_backward(dy.cpu, x.cpu, norm, rc.mean, rc.rstd, opt(w.cpu), opt(b.cpu), mask);
  const LayerNormGrads gg =
      native_layer_norm_backward(dy.gpu, x.gpu, norm, rg.mean, rg.rstd, opt(w.gpu), opt(b.gpu), mask);
  check_close(gg.grad_input, gc.grad_input, rtol * 4, rtol * 4 * std::max(1.0, max_abs(gc.grad_input)), "grad_input");
  if (affine)
    check_close(gg.grad_weight, gc.grad_weight, rtol, rtol * std::max(1.0, max_abs(gc.grad_weight)), "grad_weight");
  if (affine && bias)
    check_close(gg.grad_bias, gc.grad_bias, rtol, rtol * std::max(1.0, max_abs(gc.grad_bias)), "grad_bias");
}

void compare_rms_norm(const Shape& shape, const Shape& norm, ScalarType dtype, bool affine) {
  CAPTURE(shape_str(shape));
  CAPTURE(shape_str(norm));
  CAPTURE(scalar_type_name(dtype));
  CAPTURE(affine);
  Pair x = random_pair(shape, dtype, 2.0);
  Pair w = affine ? random_pair(norm, dtype) : Pair{};
  Pair dy = random_pair(shape, dtype);
  const RmsNormResult rc = fused_rms_norm(x.cpu, norm, opt(w.cpu), 1e-6);
  const RmsNormResult rg = fused_rms_norm(x.gpu, norm, opt(w.gpu), 1e-6);
  const double rtol = dtype == ScalarType::float64 ? 1e-10 : dtype == ScalarType::bfloat16 ? 2e-2 : 1e-4;
  check_close(rg.output, rc.output, rtol, rtol * std::max(1.0, max_abs(rc.output)), "output");
  check_close(rg.rstd, rc.rstd, dtype == ScalarType::float64 ? 1e-10 : 1e-4, 1e-6, "rstd");
  const RmsNormGrads gc = fused_rms_norm_backward(dy.cpu, x.cpu, norm, rc.rstd, opt(w.cpu), {true, affine});
  const RmsNormGrads gg = fused_rms_norm_backward(dy.gpu, x.gpu, norm, rg.rstd, opt(w.gpu), {true, affine});
  check_close(gg.grad_input, gc.grad_input, rtol * 4, rtol * 4 * std::max(1.0, max_abs(gc.grad_input)), "grad_input");
  if (affine)
    check_close(gg.grad_weight, gc.grad_weight, rtol, rtol * std::max(1.0, max_abs(gc.grad_weight)), "grad_weight");
}

TEST_CASE("rms_norm forward and backward: cuda matches cpu") {
  require_gpu();
  manual_seed(43);
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16}) {
    compare_rms_norm({4, 16}, {16}, dtype, true);
    compare_rms_norm({2, 3, 100}, {3, 100}, dtype, true);  // 2-d normalized shape
    compare_rms_norm({64, 256}, {256}, dtype, false);
    compare_rms_norm({16, 3000}, {3000}, dtype, true);  // block per row
  }
  compare_rms_norm({70000, 32}, {32}, ScalarType::float32, true);  // weight gradient through partial rows
}

TEST_CASE("layer_norm forward and backward: cuda matches cpu") {
  require_gpu();
  manual_seed(41);
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16}) {
    compare_layer_norm({4, 16}, {16}, dtype, true, true);
    compare_layer_norm({3, 5, 7}, {7}, dtype, true, false);
    compare_layer_norm({2, 3, 100}, {3, 100}, dtype, true, true);  // 2-d normalized shape
    compare_layer_norm({64, 256}, {256}, dtype, false, false);
    compare_layer_norm({16, 3000}, {3000}, dtype, true, true);  // block per row
    compare_layer_norm({5, 1}, {1}, dtype, true, true);         // one element per row: output = bias
  }
  // a large common offset: the two-pass variance keeps rstd right in float32
  compare_layer_norm({32, 512}, {512}, ScalarType::float32, true, true, 1000.0);
  // many rows: more rows than one grid covers per pass
  compare_layer_norm({20000, 33}, {33}, ScalarType::float32, true, true);
}

TEST_CASE("layer_norm backward: partial weight/bias blocks (M > 65536, short rows) match cpu") {
  require_gpu();
  manual_seed(42);
  compare_layer_norm({100000, 64}, {64}, ScalarType::float32, true, true);
  compare_layer_norm({70000, 40}, {40}, ScalarType::float32, true, false);
  // the backend's partial rows directly: R = 7, row r summing the rows m with m % 7 == r
  Pair x = random_pair({50, 33}), dy = random_pair({50, 33}), w = random_pair({33});
  Pair mean = empty_pair({50}, ScalarType::float32), rstd = empty_pair({50}, ScalarType::float32);
  Pair y = empty_pair({50, 33}, ScalarType::float32);
  const StridedView wc = w.cpu_view(), wg = w.gpu_view();
  cpu().layer_norm(y.cpu_view(), mean.cpu_view(), rstd.cpu_view(), x.cpu_view(), &wc, nullptr, 1e-5);
  gpu().layer_norm(y.gpu_view(), mean.gpu_view(), rstd.gpu_view(), x.gpu_view(), &wg, nullptr, 1e-5);
  check_close(y, 1e-4, 1e-4, "y");
  Pair dw = empty_pair({7, 33}, ScalarType::float32), db = empty_pair({7, 33}, ScalarType::float32);
  const StridedView dwc = dw.cpu_view(), dwg = dw.gpu_view(), dbc = db.cpu_view(), dbg = db.gpu_view();
  cpu().layer_norm_backward(nullptr, &dwc, &dbc, dy.cpu_view(), x.cpu_view(), mean.cpu_view(), rstd.cpu_view(), &wc);
  gpu().layer_norm_backward(nullptr, &dwg, &dbg, dy.gpu_view(), x.gpu_view(), mean.gpu_view(), rstd.gpu_view(), &wg);
  check_close(dw, 1e-4, 1e-4, "dweight partials");
  check_close(db, 1e-4, 1e-4, "dbias partials");
}

TEST_CASE("triu / tril: cuda matches cpu (batched, transposed, bool)") {
  require_gpu();
  manual_seed(43);
  Pair x = random_pair({3, 5, 7});
  for (int64_t diagonal : {-2, 0, 1, 4}) {
    check_close(triu(x.gpu, diagonal), triu(x.cpu, diagonal), 0, 0, "triu");
    check_close(tril(x.gpu, diagonal), tril(x.cpu, diagonal), 0, 0, "tril");
    Pair t = x.map([](const Tensor& v) { return v.transpose(1, 2); });
    check_close(triu(t.gpu, diagonal), triu(t.cpu, diagonal), 0, 0, "triu transposed");
  }
  Pair ones_pair = on_both(ones({64, 64}, TensorOptions{ScalarType::bool_, kCpu}));
  check_close(triu(ones_pair.gpu, 1), triu(ones_pair.cpu, 1), 0, 0, "causal mask");
}

}  // namespace
}  // namespace bytegrad::testing
