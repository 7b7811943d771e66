// The cuda backend's side of kernels/kernel_profile.h: CudaCallTimer brackets one backend call with two
// CUDA events on the launch stream when BYTEGRAD_PROFILE_KERNELS is set, and does nothing (one branch)
// when it is not. Events come from a pool and are resolved in batches (cuda_profile.cpp).
#pragma once

#include <string>
#include <string_view>

#include "bytegrad/core/scalar_type.h"
#include "bytegrad/kernels/kernel_profile.h"

namespace bytegrad::cuda {

class CudaCallTimer {
 public:
  // key: "method op dtype" (what the by-key table sums over); built only when profiling.
  CudaCallTimer(const char* method, std::string_view op, ScalarType dtype) {
    if (kernel_profiling_enabled()) start(method, op, dtype);
  }
  // For calls whose key needs more than a name (gemm's shape): `make_key()` runs only when profiling.
  template <typename F>
  explicit CudaCallTimer(F&& make_key) {
    if (kernel_profiling_enabled()) start(make_key());
  }
  ~CudaCallTimer() {
    if (slot_ >= 0) stop();
  }
  CudaCallTimer(const CudaCallTimer&) = delete;
  CudaCallTimer& operator=(const CudaCallTimer&) = delete;

 private:
  void start(const char* method, std::string_view op, ScalarType dtype);
  void start(std::string key);
  void stop() noexcept;
  long slot_ = -1;
  long generation_ = 0;
};

}  // namespace bytegrad::cuda
