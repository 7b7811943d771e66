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

// The backward's operands, the first members of both backends' parameters: the gradients it writes and the
// tensors it reads.
template <typename T>
struct BackwardOperands {
  Rows<T> dq, dk, dv;
  Rows<const T> dout, q, k, v, out;
};

template <typename T>
BackwardOperands<T> backward_operands_of(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                                         const StridedView& dout, const StridedView& q, const StridedView& k,
                                         const StridedView& v, const StridedView& out) {
  return {rows_of<T>(dq),      rows_of<T>(dk),      rows_of<T>(dv),      rows_of<const T>(dout),
          rows_of<const T>(q), rows_of<const T>(k), rows_of<const T>(v), rows_of<const T>(out)};
}

}  // namespace bytegrad::cuda
