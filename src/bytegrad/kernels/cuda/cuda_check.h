// Error checking for every CUDA runtime and cuBLAS call: a failure throws std::runtime_error naming the
// call, the error string and the source line, so a bad launch or a cuBLAS misuse is reported where it
// happens rather than at some later synchronising call.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace bytegrad::cuda {

[[noreturn]] inline void throw_cuda_error(const char* call, const char* error, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + call + ": " + error + " (" + file + ":" +
                           std::to_string(line) + ")");
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(call, cudaGetErrorString(status), file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cuda_error(call, cublasGetStatusString(status), file, line);
}

}  // namespace bytegrad::cuda

#define BYTEGRAD_CUDA_CHECK(call) ::bytegrad::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define BYTEGRAD_CUBLAS_CHECK(call) ::bytegrad::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: reports bad launch configurations (launches themselves return nothing).
#define BYTEGRAD_CUDA_CHECK_LAUNCH(kernel_name) \
  ::bytegrad::cuda::check_cuda(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
