// What every .cu file of the cuda backend shares: the element types behind each ScalarType, conversions
// between them (as PyTorch's c10 casts do), the math type each computes in, a strided indexer passed to
// kernels by value, and the grid-stride launch helper.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/kernels/cuda/cuda_kernels.h"
#include "bytegrad/kernels/dtype_dispatch.h"

namespace bytegrad::cuda {

// ------------------------------------------------------------------------------------------ dtypes

// Calls f(TypeTag<T>{}) with the C++ element type of `dtype`.
template <typename F>
void dispatch_dtype(ScalarType dtype, F&& f) {
  dispatch_element_type<__half, __nv_bfloat16>(dtype, "cuda", std::forward<F>(f));
}

// Like dispatch_dtype for the four floating dtypes only; others throw naming the op.
template <typename F>
void dispatch_floating(ScalarType dtype, const char* op, F&& f) {
  dispatch_floating_type<__half, __nv_bfloat16>(dtype, "cuda", op, std::forward<F>(f));
}

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The type arithmetic happens in (PyTorch's opmath_type): float for the 16-bit floats; int for the small
// integers, so uint8 arithmetic wraps on the conversion back exactly as PyTorch's does.
template <typename T>
using opmath_t =
    std::conditional_t<is_reduced_float_v<T>, float,
                       std::conditional_t<std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>, int32_t, T>>;

// Reduced floats read as float; everything else as itself.
template <typename T>
__device__ __forceinline__ auto widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}

// static_cast between element types with c10's rules: 16-bit floats go through float (so double -> half
// rounds twice, as in PyTorch), bool is "nonzero", and uint8 goes through int64 so negative values wrap.
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return widen(v) != 0;
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(widen(v)));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(widen(v)));
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return static_cast<uint8_t>(static_cast<int64_t>(widen(v)));
  } else {
    return static_cast<To>(widen(v));
  }
}

// Writes an accumulator into an output of any dtype (one store per output element, so a runtime switch
// costs nothing and spares a template parameter).
template <typename Acc>
__device__ __forceinline__ void store_as(void* base, ScalarType dtype, int64_t offset, Acc value) {
  switch (dtype) {
    case ScalarType::float32: static_cast<float*>(base)[offset] = convert<float>(value); break;
    case ScalarType::float64: static_cast<double*>(base)[offset] = convert<double>(value); break;
    case ScalarType::float16: static_cast<__half*>(base)[offset] = convert<__half>(value); break;
    case ScalarType::bfloat16: static_cast<__nv_bfloat16*>(base)[offset] = convert<__nv_bfloat16>(value); break;
    case ScalarType::int64: static_cast<int64_t*>(base)[offset] = convert<int64_t>(value); break;
    case ScalarType::int32: static_cast<int32_t*>(base)[offset] = convert<int32_t>(value); break;
    case ScalarType::uint8: static_cast<uint8_t*>(base)[offset] = convert<uint8_t>(value); break;
    case ScalarType::bool_: static_cast<bool*>(base)[offset] = convert<bool>(value); break;
  }
}

// One element of a runtime dtype, converted to C (as c10::convert inside TensorIterator's dynamic casting).
template <typename C>
__device__ __forceinline__ C load_as(const void* base, ScalarType dtype, int64_t offset) {
  switch (dtype) {
    case ScalarType::float32: return convert<C>(static_cast<const float*>(base)[offset]);
    case ScalarType::float64: return convert<C>(static_cast<const double*>(base)[offset]);
    case ScalarType::float16: return convert<C>(static_cast<const __half*>(base)[offset]);
    case ScalarType::bfloat16: return convert<C>(static_cast<const __nv_bfloat16*>(base)[offset]);
    case ScalarType::int64: return convert<C>(static_cast<const int64_t*>(base)[offset]);
    case ScalarType::int32: return convert<C>(static_cast<const int32_t*>(base)[offset]);
    case ScalarType::uint8: return convert<C>(static_cast<const uint8_t*>(base)[offset]);
    case ScalarType::bool_: return convert<C>(static_cast<const bool*>(base)[offset]);
  }
  return convert<C>(0);
}

// A double from the host (fill values, scalars) in a kernel's type, with the same rules as convert().
template <typename To>
__host__ __device__ inline To from_double(double v) {
  if constexpr (std::is_same_v<To, bool>) return v != 0;
  else if constexpr (std::is_same_v<To, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, uint8_t>) return static_cast<uint8_t>(static_cast<int64_t>(v));
  else return static_cast<To>(v);
}

// ----------------------------------------------------------------------------------------- indexing

// Division by a fixed divisor d in [1, 2^31) of a dividend n in [0, 2^31) as a multiply-high, an add and
// a shift (PyTorch's IntDivider, after Granlund and Montgomery): shift = ceil(log2 d), magic = floor(2^32 *
// (2^shift - d) / d) + 1, n / d = (umulhi(n, magic) + n) >> shift. The sum fits 32 bits because n < 2^31.
struct FastDivider {
  uint32_t divisor = 1;
  uint32_t magic = 0;
  uint32_t shift = 0;

  FastDivider() = default;
  explicit FastDivider(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// Element offsets of N operands walking one shape in row-major order. Passed to kernels by value (a few
// hundred bytes of kernel parameters); built on the host with dimensions merged by coalesce_dims. When
// the shape has fewer than 2^31 elements (`narrow`), coordinates come from FastDivider's 32-bit
// multiply-shift instead of 64-bit division (which costs dozens of instructions per dimension); offsets
// stay 64-bit either way.
template <int N>
struct StridedIndexer {
  bool linear = false;  // every operand contiguous: offset == linear index, no division needed
  bool narrow = false;  // numel < 2^31: 32-bit coordinates through dividers[]
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
  FastDivider dividers[kMaxDims] = {};

  __device__ __forceinline__ void offsets(int64_t linear_index, int64_t (&out)[N]) const {
    if (linear) {
#pragma unroll
      for (int k = 0; k < N; ++k) out[k] = linear_index;
      return;
    }
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = 0;
    if (narrow) {
      uint32_t rest = static_cast<uint32_t>(linear_index);
      for (int d = ndim - 1; d >= 0; --d) {
        const uint32_t next = dividers[d].div(rest);
        const int64_t coord = static_cast<int64_t>(rest - next * dividers[d].divisor);
        rest = next;
#pragma unroll
        for (int k = 0; k < N; ++k) out[k] += coord * strides[k][d];
      }
      return;
    }
    int64_t rest = linear_index;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t size = sizes[d];
      const int64_t coord = rest % size;
      rest /= size;
#pragma unroll
      for (int k = 0; k < N; ++k) out[k] += coord * strides[k][d];
    }
  }
};

// An indexer over `sizes` for operands with the given strides (each as long as sizes).
template <int N>
StridedIndexer<N> make_indexer(std::vector<int64_t> sizes, const std::array<std::vector<int64_t>, N>& operand_strides) {
  std::vector<std::vector<int64_t>> strides(operand_strides.begin(), operand_strides.end());
  for (const auto& s : strides)
    if (s.size() != sizes.size())
      throw std::invalid_argument("cuda backend: operand rank differs from the iteration shape");
  coalesce_dims(sizes, strides);
  if (sizes.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument("cuda backend: views with more than " + std::to_string(kMaxDims) +
                                " dimensions that cannot be merged are not supported");
  StridedIndexer<N> indexer;
  indexer.ndim = static_cast<int>(sizes.size());
  indexer.linear = indexer.ndim == 0;
  if (indexer.ndim == 1) {
    indexer.linear = true;
    for (int k = 0; k < N; ++k) indexer.linear = indexer.linear && strides[k][0] == 1;
  }
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  indexer.narrow = numel < (int64_t{1} << 31);
  for (int d = 0; d < indexer.ndim; ++d) {
    indexer.sizes[d] = sizes[d];
    if (indexer.narrow && sizes[d] > 0) indexer.dividers[d] = FastDivider(static_cast<uint32_t>(sizes[d]));
    for (int k = 0; k < N; ++k) indexer.strides[k][d] = strides[k][d];
  }
  return indexer;
}

inline void require_same_sizes(const StridedView& a, const StridedView& b, const char* op) {
  if (a.sizes != b.sizes)
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": operand sizes differ from the output's");
}

// The optimizers' three-operand update (TernaryOp) of one element in opmath: lerp in PyTorch's two-sided
// form (exact at both ends), addcmul, addcdiv. Shared by the strided kernel, the multi-tensor one and the
// fused optimizer pass. The last product and sum are one fused multiply-add, written out: the compiler
// contracts them anyway, but not necessarily alike in every kernel, and those must agree bit for bit.
template <typename Acc>
__device__ __forceinline__ Acc ternary_value(TernaryOp op, Acc x, Acc y, Acc z, Acc value) {
  switch (op) {
    case TernaryOp::lerp:
      return (value < Acc(0.5) && value > Acc(-0.5)) ? fma(value, y - x, x) : fma(-(y - x), Acc(1) - value, y);
    case TernaryOp::addcmul: return fma(value * y, z, x);
    default: return fma(value, y / z, x);
  }
}

// N elements of T loaded or stored as one aligned vector (16-byte loads for the maps, 4-byte pairs for
// 16-bit column sums).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// ------------------------------------------------------------------------------------------ launching

inline constexpr int kBlockThreads = 256;

// Calls f(i) for i in [0, n) with a grid-stride loop; f is a functor with a __device__ operator().
template <typename F>
__global__ void __launch_bounds__(kBlockThreads) for_each_index_kernel(int64_t n, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) f(i);
}

inline unsigned grid_for(int64_t work_items, int threads = kBlockThreads) {
  // Enough blocks for one item per thread, capped where a grid-stride loop takes over.
  const int64_t blocks = (work_items + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

template <typename F>
void for_each_index(int64_t n, const F& f, const char* name) {
  if (n <= 0) return;
  for_each_index_kernel<<<grid_for(n), kBlockThreads, 0, launch_stream()>>>(n, f);
  check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
}

}  // namespace bytegrad::cuda
