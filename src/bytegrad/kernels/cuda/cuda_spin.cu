#include "bytegrad/kernels/cuda/cuda_spin.h"

#include "bytegrad/kernels/cuda/cuda_check.h"

namespace bytegrad::cuda {

namespace {

__global__ void spin_kernel(int64_t cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}

}  // namespace

void spin_for_cycles(void* stream, int64_t cycles) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(cycles);
  BYTEGRAD_CUDA_CHECK_LAUNCH("spin_kernel");
}

}  // namespace bytegrad::cuda
