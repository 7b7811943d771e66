// LayerNorm's kernels (kernels/cuda/cuda_layer_norm.cu) and triu/tril (cuda_triangle.cu) on cuda against
// the cpu backend: forward output, mean and rstd, and every gradient, for short rows (warp per row), long
// rows (block per row), 2-d normalized shapes, without weight/bias, in float32, float64 and bfloat16, and
// the tall-and-narrow shape whose weight/bias gradients go through partial blocks and sum(0); the same kernels
// in RMS mode (fused_rms_norm: no mean) likewise; the backward's fused pass (scratch lent: dx and the weight
// and bias sums in one read) against cpu and against itself.
#include "bytegrad/tensor/blas_workspace.h"
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
  const double rtol = dtype == ScalarType::float64   ? 1e-10
                      : bf16                         ? 2e-2
                      : dtype == ScalarType::float16 ? 2e-3  // one rounding step of the 16-bit output
                                                     : 1e-4;
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
  // GPT-2's rows: 16-byte vectors a lane (float32 and bfloat16), and rows too long for them
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::float16}) {
    compare_layer_norm({2, 512, 768}, {768}, dtype, true, true);
    compare_layer_norm({300, 1024}, {1024}, dtype, true, false);
    compare_layer_norm({30, 1032}, {1032}, dtype, true, true);
  }
}

TEST_CASE("layer_norm on rows that start off a 16-byte boundary: the element kernels, the same results") {
  require_gpu();
  manual_seed(44);
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16}) {
    CAPTURE(scalar_type_name(dtype));
    const int64_t M = 64, N = 768;
    // one element in: contiguous, but 4 (or 2) bytes past the allocation's alignment
    const Pair flat = random_pair({M * N + 1}, dtype, 2.0);
    const Pair x = flat.map([&](const Tensor& t) { return t.narrow(0, 1, M * N).view({M, N}); });
    const Pair w = random_pair({N}, dtype), b = random_pair({N}, dtype), dy = random_pair({M, N}, dtype);
    const LayerNormResult rc = native_layer_norm(x.cpu, {N}, w.cpu, b.cpu, 1e-5);
    const LayerNormResult rg = native_layer_norm(x.gpu, {N}, w.gpu, b.gpu, 1e-5);
    const double rtol = dtype == ScalarType::bfloat16 ? 2e-2 : 1e-4;
    check_close(rg.output, rc.output, rtol, rtol * std::max(1.0, max_abs(rc.output)), "output");
    const LayerNormGrads gc =
        native_layer_norm_backward(dy.cpu, x.cpu, {N}, rc.mean, rc.rstd, w.cpu, b.cpu, {true, true, true});
    const LayerNormGrads gg =
        native_layer_norm_backward(dy.gpu, x.gpu, {N}, rg.mean, rg.rstd, w.gpu, b.gpu, {true, true, true});
    check_close(gg.grad_input, gc.grad_input, rtol * 4, rtol * 4 * std::max(1.0, max_abs(gc.grad_input)), "dx");
    check_close(gg.grad_weight, gc.grad_weight, rtol, rtol * std::max(1.0, max_abs(gc.grad_weight)), "dweight");
  }
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
  cpu().layer_norm_backward(nullptr, &dwc, &dbc, dy.cpu_view(), x.cpu_view(), mean.cpu_view(), rstd.cpu_view(), &wc,
                            DeviceScratch{});
  gpu().layer_norm_backward(nullptr, &dwg, &dbg, dy.gpu_view(), x.gpu_view(), mean.gpu_view(), rstd.gpu_view(), &wg,
                            DeviceScratch{});
  check_close(dw, 1e-4, 1e-4, "dweight partials");
  check_close(db, 1e-4, 1e-4, "dbias partials");
}

// The backend's backward on both devices from the same forward: cpu's result, and cuda's with the scratch
// given (none: the two-kernel path). Returns cuda's dx, dweight, dbias (undefined where not asked for).
struct BackwardCase {
  Shape shape;  // (M, N)
  ScalarType dtype = ScalarType::float32;
  bool rms = false, want_dx = true, want_weight = true, want_bias = true;
};

std::array<Tensor, 3> fused_backward(const BackwardCase& c, DeviceScratch scratch) {
  const int64_t M = c.shape[0], N = c.shape[1];
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(scalar_type_name(c.dtype));
  CAPTURE(c.rms);
  Pair x = random_pair(c.shape, c.dtype, 2.0), dy = random_pair(c.shape, c.dtype), w = random_pair({N}, c.dtype);
  Pair mean = empty_pair({M}, ScalarType::float32), rstd = empty_pair({M}, ScalarType::float32);
  Pair y = empty_pair(c.shape, c.dtype);
  const StridedView wc = w.cpu_view(), wg = w.gpu_view();
  StridedView mc = mean.cpu_view(), mg = mean.gpu_view();
  if (c.rms) mc.data = mg.data = nullptr;
  cpu().layer_norm(y.cpu_view(), mc, rstd.cpu_view(), x.cpu_view(), &wc, nullptr, 1e-5);
  gpu().layer_norm(y.gpu_view(), mg, rstd.gpu_view(), x.gpu_view(), &wg, nullptr, 1e-5);
  Pair dx = empty_pair(c.shape, c.dtype), dw = empty_pair({1, N}, c.dtype), db = empty_pair({1, N}, c.dtype);
  const bool bias = c.want_bias && !c.rms;
  auto run = [&](KernelBackend& backend, const Tensor& dxt, const Tensor& dwt, const Tensor& dbt, const Tensor& dyt,
                 const Tensor& xt, const StridedView& m, const Tensor& rt, const StridedView& wv, DeviceScratch s) {
    const StridedView dxv = dxt.view_for_kernels(), dwv = dwt.view_for_kernels(), dbv = dbt.view_for_kernels();
    backend.layer_norm_backward(c.want_dx ? &dxv : nullptr, c.want_weight ? &dwv : nullptr, bias ? &dbv : nullptr,
                                dyt.view_for_kernels(), xt.view_for_kernels(), m, rt.view_for_kernels(), &wv, s);
  };
  run(cpu(), dx.cpu, dw.cpu, db.cpu, dy.cpu, x.cpu, mc, rstd.cpu, wc, DeviceScratch{});
  run(gpu(), dx.gpu, dw.gpu, db.gpu, dy.gpu, x.gpu, mg, rstd.gpu, wg, scratch);
  // 16-bit dx: one rounding step of the output (float16: 2^-10 relative) apart from cpu's, at most.
  const double rtol = c.dtype == ScalarType::bfloat16 ? 2e-2 : c.dtype == ScalarType::float16 ? 2e-3 : 1e-4;
  auto close = [&](const Pair& p, const char* what) {
    check_close(p.gpu, p.cpu, rtol, rtol * std::max(1.0, max_abs(p.cpu)), what);
  };
  if (c.want_dx) close(dx, "dx");
  if (c.want_weight) close(dw, "dweight");
  if (bias) close(db, "dbias");
  return {c.want_dx ? dx.gpu : Tensor(), c.want_weight ? dw.gpu : Tensor(), bias ? db.gpu : Tensor()};
}

TEST_CASE("layer_norm backward's fused pass: lent scratch, the same gradients as cpu, the same bits each run") {
  require_gpu();
  // 4 MiB of scratch, as a product's workspace would lend: 4 * 1024 * 1024 / (2 * 1024 * 4 bytes a partial
  // row at N = 1024) = 512 partial rows, more than the SMs take at once.
  const Tensor scratch_memory = empty({4 * 1024 * 1024}, TensorOptions{ScalarType::uint8, kCuda});
  const DeviceScratch scratch{scratch_memory.data_ptr(), scratch_memory.numel()};
  const std::vector<BackwardCase> cases = {
      {{8192, 768}},                                                 // GPT-2 small's rows
      {{8192, 768}, ScalarType::bfloat16},                           //
      {{8192, 768}, ScalarType::float16},                            //
      {{3001, 1024}},                                                // the widest fused row
      {{5000, 33}},                                                  // partly filled lanes
      {{7, 200}},                                                    // fewer rows than a block has warps
      {{4096, 512}, ScalarType::float32, true},                      // RMS: no mean, no bias
      {{2048, 768}, ScalarType::float32, false, false},              // no dx: only the sums
      {{2048, 768}, ScalarType::float32, false, true, true, false},  // no bias gradient
      {{2048, 768}, ScalarType::float32, false, true, false, true},  // no weight gradient
  };
  for (const BackwardCase& c : cases) {
    manual_seed(47);
    const std::array<Tensor, 3> first = fused_backward(c, scratch);
    manual_seed(47);
    const std::array<Tensor, 3> second = fused_backward(c, scratch);
    for (size_t i = 0; i < 3; ++i)
      if (first[i].defined()) check_close(second[i], first[i].cpu(), 0, 0, "the same bits on a second run");
  }
  // scratch for one partial row only: one block takes every row
  manual_seed(48);
  fused_backward({{1000, 768}}, DeviceScratch{scratch_memory.data_ptr(), 2 * 768 * 4});
  // too little scratch for a row, and none: the two-kernel path
  fused_backward({{1000, 768}}, DeviceScratch{scratch_memory.data_ptr(), 2 * 768 * 4 - 1});
  fused_backward({{1000, 768}}, DeviceScratch{});
}

TEST_CASE("layer_norm backward after a product borrows the parked workspace and stays right") {
  require_gpu();
  manual_seed(49);
  Pair a = random_pair({64, 64});
  (void)matmul(a.gpu, a.gpu);  // parks this thread's cuBLAS workspace on the stream
  REQUIRE(parked_blas_workspace(kCuda).data != nullptr);
  compare_layer_norm({4096, 768}, {768}, ScalarType::float32, true, true);
  compare_layer_norm({2, 1000, 96}, {96}, ScalarType::bfloat16, true, false);
  compare_rms_norm({512, 640}, {640}, ScalarType::float32, true);
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
