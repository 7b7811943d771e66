// Times the cuda backend's main kernels on the GPU and sets each against a reference measured in the same
// run: fp32 gemm against a plain cublasSgemm (same size, and 8192^3 as the device's fp32 peak), the
// elementwise add against cudaMemcpy device-to-device bandwidth (bytes read + written in both), softmax
// (and slow attention's one pass: scale, mask, softmax), attention's head copies and LayerNorm's backward
// (with and without lent scratch) likewise. CUDA events around each repeat; the median of the repeats after
// warm-up. Short kernels are timed over back-to-back calls, so their rows include the backend's host cost
// per call (the softmax of 8 MiB is launch-bound: PyTorch's eager softmax, timed the same way on an H100,
// is 9.9 us a call). Exits 0 with a message when no GPU is present.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/blas_plan.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"

namespace {

using namespace bytegrad;

// Median milliseconds of one call of f, after `warmup` untimed calls. Each sample times `calls_per_sample`
// back-to-back calls (so launch and event overheads of short kernels are amortised) and divides.
double median_ms(const std::function<void()>& f, int calls_per_sample = 1, int warmup = 3, int repeats = 15) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t start, stop;
  BYTEGRAD_CUDA_CHECK(cudaEventCreate(&start));
  BYTEGRAD_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    BYTEGRAD_CUDA_CHECK(cudaEventRecord(start, 0));
    for (int call = 0; call < calls_per_sample; ++call) f();
    BYTEGRAD_CUDA_CHECK(cudaEventRecord(stop, 0));
    BYTEGRAD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BYTEGRAD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms / calls_per_sample);
  }
  BYTEGRAD_CUDA_CHECK(cudaEventDestroy(start));
  BYTEGRAD_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Tensor on_gpu_randn(const Shape& shape) { return randn(shape, TensorOptions{}.with_device(kCuda)); }
Tensor on_gpu_empty(const Shape& shape) { return empty(shape, TensorOptions{}.with_device(kCuda)); }

// A plain cublasSgemm of n x n x n on its own handle (default math: no TF32), as the reference.
double plain_sgemm_ms(int n, int calls_per_sample) {
  Tensor a = on_gpu_randn({n, n}), b = on_gpu_randn({n, n}), c = on_gpu_empty({n, n});
  cublasHandle_t handle;
  BYTEGRAD_CUBLAS_CHECK(cublasCreate(&handle));
  BYTEGRAD_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  const float alpha = 1, beta = 0;
  const double ms = median_ms(
      [&] {
        BYTEGRAD_CUBLAS_CHECK(
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, static_cast<const float*>(b.data_ptr()), n,
                        static_cast<const float*>(a.data_ptr()), n, &beta, static_cast<float*>(c.data_ptr()), n));
      },
      calls_per_sample);
  BYTEGRAD_CUBLAS_CHECK(cublasDestroy(handle));
  return ms;
}

double tflops(double flop, double ms) { return flop / (ms * 1e-3) / 1e12; }
double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

void row(const std::string& what, const std::string& size, double ms, const std::string& rate, const std::string& ref) {
  std::printf("| %-26s | %-20s | %9.4f | %-16s | %-34s |\n", what.c_str(), size.c_str(), ms, rate.c_str(), ref.c_str());
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

int main() {
  if (!cuda_is_available()) {
    std::puts("no CUDA GPU: nothing to benchmark");
    return 0;
  }
  try {
    KernelBackend& gpu = backend_for(kCuda);
    cudaDeviceProp prop{};
    BYTEGRAD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (%d SMs)\n\n", prop.name, prop.multiProcessorCount);

    const double peak_ms = plain_sgemm_ms(8192, 1);
    const double peak_tflops = tflops(2.0 * 8192.0 * 8192.0 * 8192.0, peak_ms);

    const double copy_bytes = 256.0 * 1024 * 1024;
    double memcpy_gbps = 0;
    {
      Tensor src = on_gpu_empty({static_cast<int64_t>(copy_bytes / 4)}),
             dst = on_gpu_empty({static_cast<int64_t>(copy_bytes / 4)});
      const double ms = median_ms([&] {
        BYTEGRAD_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(copy_bytes),
                                            cudaMemcpyDeviceToDevice, 0));
      });
      memcpy_gbps = gbps(2 * copy_bytes, ms);  // read + write
    }

    std::printf("| %-26s | %-20s | %9s | %-16s | %-34s |\n", "kernel", "size", "median ms", "achieved", "vs reference");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(28, '-').c_str(), std::string(22, '-').c_str(),
                std::string(11, '-').c_str(), std::string(18, '-').c_str(), std::string(36, '-').c_str());
    row("cublasSgemm (reference)", "8192^3 fp32", peak_ms, fmt("%.1f TFLOP/s", peak_tflops), "fp32 peak (no TF32)");
    row("cudaMemcpy D2D (reference)", "256 MiB", copy_bytes * 2 / memcpy_gbps / 1e6, fmt("%.0f GB/s", memcpy_gbps),
        "bandwidth, read + write");

    for (int n : {1024, 4096}) {
      Tensor a = on_gpu_randn({1, n, n}), b = on_gpu_randn({1, n, n}), c = on_gpu_empty({1, n, n});
      const int calls = n <= 1024 ? 20 : 1;
      const double ms = median_ms([&] { gemm_into(c, a, b, 1.0, 0.0); }, calls);
      const double rate = tflops(2.0 * n * n * n, ms);
      const double plain = tflops(2.0 * n * n * n, plain_sgemm_ms(n, calls));
      row("backend gemm fp32", std::to_string(n) + "^3", ms, fmt("%.1f TFLOP/s", rate),
          fmt("%.0f%% of peak, ", 100 * rate / peak_tflops) + fmt("%.0f%% of cuBLAS", 100 * rate / plain));
    }
    {
      const int64_t n = static_cast<int64_t>(copy_bytes / 4);  // 256 MiB per operand
      Tensor a = on_gpu_randn({n}), b = on_gpu_randn({n}), c = on_gpu_empty({n});
      const double ms = median_ms(
          [&] { gpu.binary(BinaryOp::add, c.view_for_kernels(), a.view_for_kernels(), b.view_for_kernels(), 1.0); });
      const double rate = gbps(3 * copy_bytes, ms);
      row("backend add fp32", "3 x 256 MiB", ms, fmt("%.0f GB/s", rate),
          fmt("%.0f%% of memcpy", 100 * rate / memcpy_gbps));
    }
    {
      const Shape shape{64 * 8 * 32, 32};
      Tensor x = on_gpu_randn(shape), y = on_gpu_empty(shape);
      const double ms = median_ms([&] { gpu.softmax(y.view_for_kernels(), x.view_for_kernels(), 1, false); }, 50);
      const double bytes = 2.0 * static_cast<double>(x.nbytes());
      const double rate = gbps(bytes, ms);
      row("backend softmax fp32", "(16384, 32) dim 1", ms, fmt("%.0f GB/s", rate),
          fmt("%.0f%% of memcpy; per call, launch-bound", 100 * rate / memcpy_gbps));
    }
    // Slow attention's softmax at GPT-2 small's 8 x 1024 tokens (8 x 12 heads x 1024 rows of 1024): plain
    // float32 rows; and the pending chain's one pass (tensor/pending_scores.h): scores * scale, masked
    // causally, softmax, in float32 from float32 scores, and under autocast from bfloat16 scores into a
    // float32 output with its bfloat16 copy. Bytes: every element read once and written once in each output
    // (the mask's 1 MiB and the masked scores, which need not be read, not counted).
    {
      const int64_t B = 8, H = 12, T = 1024;
      const TensorOptions f32 = TensorOptions{}.with_device(kCuda);
      const Tensor causal_mask = eq(tril(ones({T, T}, f32)), 0.0).expand({B, H, T, T});
      const StridedView mask = causal_mask.view_for_kernels();
      {
        const Tensor x = randn({B, H, T, T}, f32), y = empty({B, H, T, T}, f32);
        const double ms = median_ms([&] { gpu.softmax(y.view_for_kernels(), x.view_for_kernels(), 3, false); }, 10);
        const double bytes = 2.0 * static_cast<double>(x.nbytes());
        row("softmax fp32", "(8,12,1024,1024) dim 3", ms, fmt("%.0f GB/s", gbps(bytes, ms)),
            fmt("%.0f%% of memcpy", 100 * gbps(bytes, ms) / memcpy_gbps));
        const double scaled_ms = median_ms(
            [&] {
              gpu.softmax_of_scaled(y.view_for_kernels(), x.view_for_kernels(), ScalarStep{BinaryOp::mul, 0.125}, &mask,
                                    -INFINITY, 3, false, nullptr);
            },
            10);
        row("softmax_of_scaled fp32", "causal (8,12,1024,1024)", scaled_ms, fmt("%.0f GB/s", gbps(bytes, scaled_ms)),
            fmt("%.0f%% of memcpy", 100 * gbps(bytes, scaled_ms) / memcpy_gbps));
        // What the one pass costs beyond softmax: the scale alone, a mask filling a finite value, a mask
        // that is not broadcast (its own bytes read too, not counted).
        const auto variant = [&](const char* what, const StridedView* m, double value) {
          const double ms = median_ms(
              [&] {
                gpu.softmax_of_scaled(y.view_for_kernels(), x.view_for_kernels(), ScalarStep{BinaryOp::mul, 0.125}, m,
                                      value, 3, false, nullptr);
              },
              10);
          row("softmax_of_scaled fp32", what, ms, fmt("%.0f GB/s", gbps(bytes, ms)),
              fmt("%.0f%% of memcpy", 100 * gbps(bytes, ms) / memcpy_gbps));
        };
        variant("scale only, no mask", nullptr, 0.0);
        variant("causal, fills -1e4", &mask, -1e4);
        const Tensor whole_mask = causal_mask.contiguous();
        const StridedView whole = whole_mask.view_for_kernels();
        variant("causal, mask not broadcast", &whole, -INFINITY);
      }
      {
        const TensorOptions bf16 = TensorOptions{}.with_device(kCuda).with_dtype(ScalarType::bfloat16);
        const Tensor x = randn({B, H, T, T}, bf16), y = empty({B, H, T, T}, f32), copy = empty({B, H, T, T}, bf16);
        const StridedView copy_view = copy.view_for_kernels();
        const double ms = median_ms(
            [&] {
              gpu.softmax_of_scaled(y.view_for_kernels(), x.view_for_kernels(), ScalarStep{BinaryOp::mul, 0.125}, &mask,
                                    -INFINITY, 3, false, &copy_view);
            },
            10);
        const double bytes = static_cast<double>(x.nbytes() + y.nbytes() + copy.nbytes());
        row("softmax_of_scaled bf16", "-> fp32 + bf16 copy", ms, fmt("%.0f GB/s", gbps(bytes, ms)),
            fmt("%.0f%% of memcpy", 100 * gbps(bytes, ms) / memcpy_gbps));
      }
    }
    // Slow attention's head copies at GPT-2 small's 8 x 1024 tokens (B 8, T 1024, H 12, hs 64): q (or v) of
    // the packed (B, T, 3, H, hs) projection made contiguous as (B, H, T, hs) (contiguous rows of hs), k
    // transposed for q @ k^T made contiguous as (B, H, hs, T) (a tiled transpose), and their gradients
    // written back into the packed buffer (SplitBackward0).
    for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16}) {
      const int64_t B = 8, T = 1024, H = 12, hs = 64;
      const TensorOptions options = TensorOptions{}.with_device(kCuda).with_dtype(dtype);
      Tensor packed = empty({B, T, 3, H, hs}, options);
      Tensor heads = empty({B, H, T, hs}, options), heads_t = empty({B, H, hs, T}, options);
      const Tensor q = packed.select(2, 0).transpose(1, 2);
      const Tensor k_t = packed.select(2, 1).transpose(1, 2).transpose(-2, -1);
      const double bytes = 2.0 * static_cast<double>(heads.nbytes());
      const std::string name(scalar_type_name(dtype));
      const auto time = [&](const char* what, const Tensor& dst, const Tensor& src) {
        const double ms = median_ms([&] { gpu.copy(dst.view_for_kernels(), src.view_for_kernels()); }, 10);
        row(std::string("head copy ") + name, what, ms, fmt("%.0f GB/s", gbps(bytes, ms)),
            fmt("%.0f%% of memcpy", 100 * gbps(bytes, ms) / memcpy_gbps));
      };
      time("q -> (B,H,T,hs)", heads, q);
      time("k^T -> (B,H,hs,T)", heads_t, k_t);
      time("dq -> packed", q, heads);
      time("dk^T -> packed", k_t, heads_t);
    }
    // LayerNorm's backward at GPT-2 small's 8 x 1024 rows of 768 (float32, as autocast runs it; bfloat16):
    // dx and the weight and bias gradients, with scratch lent (one pass over dy and x, then the partial
    // rows' sum) and without (the input gradient, then the weight and bias kernel reading dy and x again).
    // Bytes: dy and x read, dx written, once each (what the one pass moves).
    for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16}) {
      const int64_t M = 8 * 1024, N = 768;
      const TensorOptions opts = TensorOptions{}.with_dtype(dtype).with_device(kCuda);
      const Tensor x = randn({M, N}, opts), dy = randn({M, N}, opts), w = randn({N}, opts), b = randn({N}, opts);
      const LayerNormResult forward = native_layer_norm(x, {N}, w, b, 1e-5);
      const Tensor dx = empty({M, N}, opts), dw = empty({1, N}, opts), db = empty({1, N}, opts);
      const Tensor scratch = empty({32 * 1024 * 1024}, TensorOptions{ScalarType::uint8, kCuda});
      const StridedView dxv = dx.view_for_kernels(), dwv = dw.view_for_kernels(), dbv = db.view_for_kernels(),
                        wv = w.view_for_kernels();
      const double bytes = 3.0 * static_cast<double>(x.nbytes());
      const std::string name(scalar_type_name(dtype));
      {
        const Tensor y = empty({M, N}, opts);
        const StridedView bv = b.view_for_kernels();
        const double ms = median_ms(
            [&] {
              gpu.layer_norm(y.view_for_kernels(), forward.mean.view_for_kernels(), forward.rstd.view_for_kernels(),
                             x.view_for_kernels(), &wv, &bv, 1e-5);
            },
            10);
        const double moved = 2.0 * static_cast<double>(x.nbytes());  // x read, y written
        row("layer_norm " + name, "8192x768", ms, fmt("%.0f GB/s", gbps(moved, ms)),
            fmt("%.0f%% of memcpy", 100 * gbps(moved, ms) / memcpy_gbps));
      }
      for (bool lend : {true, false}) {
        const DeviceScratch lent = lend ? DeviceScratch{scratch.data_ptr(), scratch.numel()} : DeviceScratch{};
        const double ms = median_ms(
            [&] {
              gpu.layer_norm_backward(&dxv, &dwv, &dbv, dy.view_for_kernels(), x.view_for_kernels(),
                                      forward.mean.view_for_kernels(), forward.rstd.view_for_kernels(), &wv, lent);
            },
            10);
        row("layer_norm_backward " + name, lend ? "8192x768, scratch" : "8192x768, none", ms,
            fmt("%.0f GB/s", gbps(bytes, ms)), fmt("%.0f%% of memcpy", 100 * gbps(bytes, ms) / memcpy_gbps));
      }
    }
    BYTEGRAD_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
