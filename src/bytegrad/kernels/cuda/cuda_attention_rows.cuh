// The strided (B, H, S, D) operand accessor shared by the attention kernels (cuda_attention.cu's SIMT kernels
// and cuda_attention_mma.cu's tensor-core ones): the fused backends need the last dimension contiguous, so
// an operand is its data pointer and the strides of its first three dimensions.
#pragma once

#include <cstdint>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

// A (B, H, S, D) operand: element (b, h, s, d) at data[b * sb + h * sh + s * ss + d].
template <typename T>
struct Rows {
  T* data;
  int64_t sb, sh, ss;
  __device__ __forceinline__ T* at(int64_t b, int64_t h, int64_t s) const { return data + b * sb + h * sh + s * ss; }
};

template <typename T>
Rows<T> rows_of(const StridedView& v) {
  return {static_cast<T*>(v.data), v.strides[0], v.strides[1], v.strides[2]};
}

}  // namespace bytegrad::cuda
