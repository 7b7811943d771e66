// Helpers of the GPU tests: every backend method runs on cuda and on cpu over the same values, and
// the results are compared element by element.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/tensor.h"
#include "tests/support/devices.h"

namespace bytegrad::testing {

inline constexpr int kSkipExitCode = 77;  // ctest's SKIP_RETURN_CODE

// First thing in every test (main checks too): without a GPU the whole program skips.
inline void require_gpu() {
  if (!cuda_is_available()) {
    std::puts("no CUDA GPU: skipping GPU tests");
    std::exit(kSkipExitCode);
  }
}

inline KernelBackend& cpu() { return backend_for(kCpu); }
inline KernelBackend& gpu() { return backend_for(kCuda); }

inline const std::vector<ScalarType> kAllDtypes = {ScalarType::float32,  ScalarType::float64, ScalarType::float16,
                                                   ScalarType::bfloat16, ScalarType::int64,   ScalarType::int32,
                                                   ScalarType::uint8,    ScalarType::bool_};
inline const std::vector<ScalarType> kFloatDtypes = {ScalarType::float32, ScalarType::float64, ScalarType::float16,
                                                     ScalarType::bfloat16};

// The same tensor on cpu and on cuda (equal values), and views of both taken alike.
struct Pair {
  Tensor cpu;
  Tensor gpu;
  Pair map(const std::function<Tensor(const Tensor&)>& view) const { return {view(cpu), view(gpu)}; }
  StridedView cpu_view() const { return cpu.view_for_kernels(); }
  StridedView gpu_view() const { return gpu.view_for_kernels(); }
};

inline Pair on_both(const Tensor& host) { return {host, host.to(kCuda)}; }

// Standard normal values (drawn in float32 on cpu, then converted), scaled.
inline Pair random_pair(const Shape& shape, ScalarType dtype = ScalarType::float32, double scale = 1.0) {
  Tensor values = randn(shape, TensorOptions{}.with_device(kCpu));
  std::vector<double> v = values.tolist();
  for (double& x : v) x *= scale;
  return on_both(from_vector(v, shape, TensorOptions{}.with_dtype(dtype).with_device(kCpu)));
}

inline Pair from_values(const std::vector<double>& values, const Shape& shape, ScalarType dtype) {
  return on_both(from_vector(values, shape, TensorOptions{}.with_dtype(dtype).with_device(kCpu)));
}

// Uninitialised outputs on both devices (filled with the same garbage-free value for in-place ops).
inline Pair empty_pair(const Shape& shape, ScalarType dtype, double fill_value = 0.0) {
  return on_both(full(shape, fill_value, TensorOptions{}.with_dtype(dtype).with_device(kCpu)));
}

inline double default_rtol(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float32: return 1e-5;
    case ScalarType::float64: return 1e-12;
    case ScalarType::float16: return 1e-3;
    case ScalarType::bfloat16: return 8e-3;  // 8 significant bits: one rounding step is 2^-8
    default: return 0.0;                     // integers and bool must match exactly
  }
}

// Element-wise |gpu - cpu| <= atol + rtol * |cpu|, NaN matching NaN. Reports the first mismatch.
inline void check_close(const Tensor& gpu_result, const Tensor& cpu_result, double rtol = -1.0, double atol = -1.0,
                        const std::string& what = "") {
  REQUIRE(gpu_result.sizes() == cpu_result.sizes());
  REQUIRE(gpu_result.dtype() == cpu_result.dtype());
  if (rtol < 0) rtol = default_rtol(gpu_result.dtype());
  if (atol < 0) atol = rtol * 1e-1;
  const std::vector<double> g = gpu_result.tolist();
  const std::vector<double> c = cpu_result.tolist();
  REQUIRE(g.size() == c.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(c[i]);
    const bool close = both_nan || g[i] == c[i] || std::abs(g[i] - c[i]) <= atol + rtol * std::abs(c[i]);
    if (!close) {
      INFO(what << " dtype " << scalar_type_name(gpu_result.dtype()) << " element " << i << ": cuda " << g[i]
                << " vs cpu " << c[i]);
      CHECK(close);
      return;
    }
  }
}

inline void check_close(const Pair& results, double rtol = -1.0, double atol = -1.0, const std::string& what = "") {
  check_close(results.gpu, results.cpu, rtol, atol, what);
}

// Largest |value|, for tolerances of sums and products that scale with the operands.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.tolist()) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace bytegrad::testing
