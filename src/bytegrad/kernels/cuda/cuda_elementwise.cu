// Elementwise kernels: fill, arange, copy (converting between all 8 dtypes), unary, binary, binary with a
// scalar, where, masked_fill. One grid-stride kernel template walks any strided view through a
// StridedIndexer (which degenerates to the linear index when every operand is contiguous). copy, unary
// and the binary ops also have a vectorised path for contiguous, 16-byte-aligned operands: each thread
// loads 16 bytes of every input before it stores, which the strided path cannot (out may alias an input,
// so the compiler keeps each load behind the previous store).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <string>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

namespace {

// ---------------------------------------------------------------------------------------- functors

template <typename T>
struct FillFunctor {
  T* out;
  T value;
  StridedIndexer<1> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[1];
    idx.offsets(i, o);
    out[o[0]] = value;
  }
};

// PyTorch's arange kernel computes start + step * i in acc_type (float for the float types on CUDA,
// int64 for integers).
template <typename T>
using arange_acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;

template <typename T>
struct ArangeFunctor {
  T* out;
  arange_acc_t<T> start, step;
  StridedIndexer<1> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[1];
    idx.offsets(i, o);
    out[o[0]] = convert<T>(start + step * static_cast<arange_acc_t<T>>(i));
  }
};

// ---- element functions: what one output element is, given its inputs (shared by both maps below)

template <typename To, typename From>
struct ConvertFn {
  __device__ To operator()(From x) const { return convert<To>(x); }
};

template <typename T, typename Out>
struct UnaryFn {
  UnaryOp op;
  __device__ Out operator()(T x) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::unary<Acc>(op, convert<Acc>(x)));
  }
};

template <typename T, typename Out>
struct BinaryFn {
  BinaryOp op;
  opmath_t<T> alpha;
  __device__ Out operator()(T a, T b) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::binary<Acc>(op, convert<Acc>(a), convert<Acc>(b), alpha));
  }
};

template <typename T, typename Out>
struct BinaryScalarFn {
  BinaryOp op;
  opmath_t<T> scalar;  // the number in the tensor's math type
  double exact;        // the number itself, for comparisons
  bool scalar_first;
  __device__ Out operator()(T a) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::binary_with_scalar<Acc>(op, convert<Acc>(a), scalar, exact, scalar_first));
  }
};

// ---- maps: apply an element function over strided views, or over contiguous ones in vectors

template <typename Out, typename In, typename Fn>
struct StridedMap1 {
  Out* out;
  const In* in;
  Fn fn;
  StridedIndexer<2> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[2];
    idx.offsets(i, o);
    out[o[0]] = fn(in[o[1]]);
  }
};

template <typename Out, typename A, typename B, typename Fn>
struct StridedMap2 {
  Out* out;
  const A* a;
  const B* b;
  Fn fn;
  StridedIndexer<3> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[3];
    idx.offsets(i, o);
    out[o[0]] = fn(a[o[1]], b[o[2]]);
  }
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per vector: 16 bytes of the widest operand (one 128-bit load per operand and thread), so a
// warp moves 512 contiguous bytes per operand with every load in flight before any store.
template <typename... Ts>
inline constexpr int kVecElements = static_cast<int>(16 / std::max({sizeof(Ts)...}));

// Work item `chunk` covers elements [chunk * N, chunk * N + N); the last may be partial.
template <int N, typename Out, typename In, typename Fn>
struct VectorMap1 {
  Out* out;
  const In* in;
  Fn fn;
  int64_t n;
  __device__ void operator()(int64_t chunk) const {
    const int64_t first = chunk * N;
    if (first + N <= n) {
      const Vec<In, N> x = *reinterpret_cast<const Vec<In, N>*>(in + first);
      Vec<Out, N> y;
#pragma unroll
      for (int k = 0; k < N; ++k) y.v[k] = fn(x.v[k]);
      *reinterpret_cast<Vec<Out, N>*>(out + first) = y;
    } else {
      for (int64_t i = first; i < n; ++i) out[i] = fn(in[i]);
    }
  }
};

template <int N, typename Out, typename A, typename B, typename Fn>
struct VectorMap2 {
  Out* out;
  const A* a;
  const B* b;
  Fn fn;
  int64_t n;
  __device__ void operator()(int64_t chunk) const {
    const int64_t first = chunk * N;
    if (first + N <= n) {
      const Vec<A, N> x = *reinterpret_cast<const Vec<A, N>*>(a + first);
      const Vec<B, N> y = *reinterpret_cast<const Vec<B, N>*>(b + first);
      Vec<Out, N> z;
#pragma unroll
      for (int k = 0; k < N; ++k) z.v[k] = fn(x.v[k], y.v[k]);
      *reinterpret_cast<Vec<Out, N>*>(out + first) = z;
    } else {
      for (int64_t i = first; i < n; ++i) out[i] = fn(a[i], b[i]);
    }
  }
};

template <typename T, int N>
bool vector_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * N) == 0;
}

// out = fn(in) elementwise; vectorised when both views are contiguous and aligned.
template <typename Out, typename In, typename Fn>
void map1(const StridedView& out, const StridedView& in, Fn fn, const char* name) {
  const int64_t n = out.numel();
  const auto idx = make_indexer<2>(out.sizes, {out.strides, in.strides});
  constexpr int N = kVecElements<Out, In>;
  if (idx.linear && vector_aligned<Out, N>(out.data) && vector_aligned<In, N>(in.data)) {
    for_each_index((n + N - 1) / N, VectorMap1<N, Out, In, Fn>{static_cast<Out*>(out.data), static_cast<const In*>(in.data), fn, n}, name);
  } else {
    for_each_index(n, StridedMap1<Out, In, Fn>{static_cast<Out*>(out.data), static_cast<const In*>(in.data), fn, idx}, name);
  }
}

// out = fn(a, b) elementwise; vectorised when all three views are contiguous and aligned.
template <typename Out, typename A, typename B, typename Fn>
void map2(const StridedView& out, const StridedView& a, const StridedView& b, Fn fn, const char* name) {
  const int64_t n = out.numel();
  const auto idx = make_indexer<3>(out.sizes, {out.strides, a.strides, b.strides});
  constexpr int N = kVecElements<Out, A, B>;
  if (idx.linear && vector_aligned<Out, N>(out.data) && vector_aligned<A, N>(a.data) && vector_aligned<B, N>(b.data)) {
    for_each_index((n + N - 1) / N,
                   VectorMap2<N, Out, A, B, Fn>{static_cast<Out*>(out.data), static_cast<const A*>(a.data),
                                                static_cast<const B*>(b.data), fn, n},
                   name);
  } else {
    for_each_index(n,
                   StridedMap2<Out, A, B, Fn>{static_cast<Out*>(out.data), static_cast<const A*>(a.data),
                                              static_cast<const B*>(b.data), fn, idx},
                   name);
  }
}

// ---- the mixed-dtype binary path: operands and output of any dtypes, through runtime dtype switches

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

// out[i] = op(a[i], b[i]) with a and b read in their own dtypes and converted to the common dtype C, the op
// computed in opmath_t<C>, and the result written as bool (comparisons, logical ops) or as C converted to
// out's dtype (an in-place target may be narrower than C: bfloat16 += float32). PyTorch's CUDA
// TensorIterator does the same with no temporaries; each element is read before it is written, so out may
// alias a or b exactly.
template <typename C>
struct MixedBinaryFunctor {
  void* out;
  const void* a;
  const void* b;
  ScalarType out_type, a_type, b_type;
  BinaryOp op;
  bool bool_output;
  opmath_t<C> alpha;
  StridedIndexer<3> idx;
  __device__ void operator()(int64_t i) const {
    using Acc = opmath_t<C>;
    int64_t o[3];
    idx.offsets(i, o);
    const Acc x = convert<Acc>(load_as<C>(a, a_type, o[1]));
    const Acc y = convert<Acc>(load_as<C>(b, b_type, o[2]));
    const Acc r = pointwise::binary<Acc>(op, x, y, alpha);
    if (bool_output) static_cast<bool*>(out)[o[0]] = convert<bool>(r);
    else store_as<C>(out, out_type, o[0], convert<C>(r));
  }
};

template <typename T>
struct WhereFunctor {
  T* out;
  const uint8_t* cond;  // bool (or legacy uint8) mask: nonzero means true
  const T* a;
  const T* b;
  StridedIndexer<4> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[4];
    idx.offsets(i, o);
    out[o[0]] = cond[o[1]] ? a[o[2]] : b[o[3]];
  }
};

template <typename T>
struct MaskedFillFunctor {
  T* out;
  const uint8_t* mask;
  T value;
  StridedIndexer<2> idx;
  __device__ void operator()(int64_t i) const {
    int64_t o[2];
    idx.offsets(i, o);
    if (mask[o[1]]) out[o[0]] = value;
  }
};

void require_mask_dtype(const StridedView& mask, const char* op) {
  if (mask.dtype != ScalarType::bool_ && mask.dtype != ScalarType::uint8)
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": the mask must be bool");
}

// Binary-style ops write either their inputs' dtype or bool (comparisons, logical ops).
template <typename T, typename Launch>
void dispatch_output(const StridedView& out, ScalarType input_dtype, const char* op, Launch&& launch) {
  if (out.dtype == input_dtype) launch(TypeTag<T>{});
  else if (out.dtype == ScalarType::bool_) launch(TypeTag<bool>{});
  else
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": output dtype " +
                                std::string(scalar_type_name(out.dtype)) + " is neither the inputs' (" +
                                std::string(scalar_type_name(input_dtype)) + ") nor bool");
}

}  // namespace

// ------------------------------------------------------------------------------------------ launchers

void fill(const StridedView& out, double value) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(out.numel(), FillFunctor<T>{static_cast<T*>(out.data), from_double<T>(value), make_indexer<1>(out.sizes, {out.strides})},
                   "fill kernel");
  });
}

void arange(const StridedView& out, double start, double step) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = arange_acc_t<T>;
    for_each_index(out.numel(),
                   ArangeFunctor<T>{static_cast<T*>(out.data), static_cast<Acc>(start), static_cast<Acc>(step),
                                    make_indexer<1>(out.sizes, {out.strides})},
                   "arange kernel");
  });
}

void copy(const StridedView& dst, const StridedView& src) {
  require_same_sizes(dst, src, "copy");
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    if (dst.data == src.data && dst.strides == src.strides) return;  // copying a view onto itself
    if (dst.is_contiguous() && src.is_contiguous()) {  // plain bytes: the copy engine is fastest
      BYTEGRAD_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n) * element_size(dst.dtype),
                                          cudaMemcpyDeviceToDevice, 0));
      return;
    }
  }
  dispatch_dtype(dst.dtype, [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype(src.dtype, [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      map1<To, From>(dst, src, ConvertFn<To, From>{}, "copy kernel");
    });
  });
}

void unary(UnaryOp op, const StridedView& out, const StridedView& in) {
  require_same_sizes(out, in, "unary");
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_output<T>(out, in.dtype, "unary", [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      map1<Out, T>(out, in, UnaryFn<T, Out>{op}, "unary kernel");
    });
  });
}

void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha,
            ScalarType common) {
  require_same_sizes(out, a, "binary");
  require_same_sizes(out, b, "binary");
  const bool bool_output = has_bool_output(op);
  if (bool_output && out.dtype != ScalarType::bool_)
    throw std::invalid_argument("cuda backend: binary: comparisons and logical ops write bool");
  const bool same_dtype = a.dtype == b.dtype && common == a.dtype && (bool_output || out.dtype == a.dtype);
  if (!same_dtype) {  // mixed dtypes: a separate kernel, each load and the store through a dtype switch
    dispatch_dtype(common, [&](auto tag) {
      using C = typename decltype(tag)::type;
      for_each_index(out.numel(),
                     MixedBinaryFunctor<C>{out.data, a.data, b.data, out.dtype, a.dtype, b.dtype, op, bool_output,
                                           from_double<opmath_t<C>>(bool_output ? 1.0 : alpha),
                                           make_indexer<3>(out.sizes, {out.strides, a.strides, b.strides})},
                     "binary kernel (mixed dtypes)");
    });
    return;
  }
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_output<T>(out, a.dtype, "binary", [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      map2<Out, T, T>(out, a, b, BinaryFn<T, Out>{op, from_double<opmath_t<T>>(alpha)}, "binary kernel");
    });
  });
}

void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar, bool scalar_first) {
  require_same_sizes(out, a, "binary_scalar");
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_output<T>(out, a.dtype, "binary_scalar", [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      map1<Out, T>(out, a, BinaryScalarFn<T, Out>{op, from_double<opmath_t<T>>(scalar), scalar, scalar_first},
                   "binary_scalar kernel");
    });
  });
}

void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) {
  require_same_sizes(out, cond, "where");
  require_same_sizes(out, a, "where");
  require_same_sizes(out, b, "where");
  require_mask_dtype(cond, "where");
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw std::invalid_argument("cuda backend: where: a and b must have the output's dtype");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(out.numel(),
                   WhereFunctor<T>{static_cast<T*>(out.data), static_cast<const uint8_t*>(cond.data),
                                   static_cast<const T*>(a.data), static_cast<const T*>(b.data),
                                   make_indexer<4>(out.sizes, {out.strides, cond.strides, a.strides, b.strides})},
                   "where kernel");
  });
}

void masked_fill(const StridedView& out, const StridedView& mask, double value) {
  require_same_sizes(out, mask, "masked_fill");
  require_mask_dtype(mask, "masked_fill");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(out.numel(),
                   MaskedFillFunctor<T>{static_cast<T*>(out.data), static_cast<const uint8_t*>(mask.data),
                                        from_double<T>(value), make_indexer<2>(out.sizes, {out.strides, mask.strides})},
                   "masked_fill kernel");
  });
}

}  // namespace bytegrad::cuda
