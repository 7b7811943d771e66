// CUDA runtime calls in the memory layer (cuda builds only): a failure throws std::runtime_error naming
// the call. The kernels layer has its own, with source lines (kernels/cuda/cuda_check.h).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace bytegrad::cuda_runtime {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status));
}

// For cudaEventQuery and cudaStreamQuery: false while the work is still running, true once it is done.
inline bool is_done(cudaError_t status, const char* what) {
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // clears the sticky "not ready" for later calls
    return false;
  }
  check(status, what);
  return true;
}

}  // namespace bytegrad::cuda_runtime
