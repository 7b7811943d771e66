#include "bytegrad/kernels/cuda/cuda_spin.h"

#include "bytegrad/kernels/cuda/cuda_check.h"

namespace bytegrad::cuda {

namespace {

__global__ void spin_kernel(int64_t cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}

}  // namespace

void spin_for_cycles(int device, void* stream, int64_t cycles) {
  // A launch goes to the current device's stream: on another device's default stream (nullptr) it would
  // keep this one busy instead, so the device is made current for the launch and put back after.
  int previous = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) BYTEGRAD_CUDA_CHECK(cudaSetDevice(device));
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(cycles);
  const cudaError_t launched = cudaGetLastError();
  if (previous != device) BYTEGRAD_CUDA_CHECK(cudaSetDevice(previous));
  BYTEGRAD_CUDA_CHECK(launched);
}

}  // namespace bytegrad::cuda
