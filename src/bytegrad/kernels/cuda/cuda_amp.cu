// GradScaler's kernels on the GPU (backend.h's amp_non_finite_check_and_unscale and amp_update_scale): the
// gradients are checked and unscaled where they live and found_inf is written on the device, so nothing is
// read back to the host until GradScaler.step reads found_inf once, as PyTorch's scaler does.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/cuda/cuda_kernels.h"
#include "bytegrad/kernels/cuda/cuda_launch_stream.h"

namespace bytegrad::cuda {

namespace {

// One element: found_inf = 1 when it is inf or NaN (read before the multiply, which could overflow a finite
// value), then value * inv_scale in the element's math type (left as is when inv_scale is 1).
template <typename T>
struct UnscaleFunctor {
  T* grad;
  float* found_inf;
  const float* inv_scale;
  StridedIndexer<1> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[1];
    idx.offsets(i, o);
    using M = opmath_t<T>;
    const M value = static_cast<M>(widen(grad[o[0]]));
    if (!isfinite(value)) *found_inf = 1.0f;
    const M inv = static_cast<M>(*inv_scale);
    grad[o[0]] = convert<T>(inv == M(1) ? value : value * inv);
  }
};

__global__ void update_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                                    double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(static_cast<double>(*scale) * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int64_t successful = static_cast<int64_t>(*growth_tracker) + 1;
  if (successful == growth_interval) {
    const auto grown = static_cast<float>(static_cast<double>(*scale) * growth_factor);
    if (isfinite(grown)) *scale = grown;  // not past float32's range to inf
    *growth_tracker = 0;
  } else {
    *growth_tracker = static_cast<int32_t>(successful);
  }
}

void require_one_element(const StridedView& v, ScalarType dtype, const char* what, const char* op) {
  if (v.numel() != 1 || v.dtype != dtype)
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": " + what + " must be one " +
                                std::string(scalar_type_name(dtype)) + " element");
}

}  // namespace

void amp_non_finite_check_and_unscale(const StridedView& grad, const StridedView& found_inf,
                                      const StridedView& inv_scale) {
  const char* op = "amp_non_finite_check_and_unscale";
  require_one_element(found_inf, ScalarType::float32, "found_inf", op);
  require_one_element(inv_scale, ScalarType::float32, "inv_scale", op);
  dispatch_floating(grad.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(
        grad.numel(),
        UnscaleFunctor<T>{static_cast<T*>(grad.data), static_cast<float*>(found_inf.data),
                          static_cast<const float*>(inv_scale.data), make_indexer<1>(grad.sizes, {grad.strides})},
        "amp_non_finite_check_and_unscale kernel");
  });
}

void amp_update_scale(const StridedView& scale, const StridedView& growth_tracker, const StridedView& found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* op = "amp_update_scale";
  require_one_element(scale, ScalarType::float32, "scale", op);
  require_one_element(growth_tracker, ScalarType::int32, "growth_tracker", op);
  require_one_element(found_inf, ScalarType::float32, "found_inf", op);
  update_scale_kernel<<<1, 1, 0, launch_stream()>>>(
      static_cast<float*>(scale.data), static_cast<int32_t*>(growth_tracker.data),
      static_cast<const float*>(found_inf.data), growth_factor, backoff_factor, growth_interval);
  check_cuda(cudaGetLastError(), "update_scale_kernel", __FILE__, __LINE__);
}

}  // namespace bytegrad::cuda
