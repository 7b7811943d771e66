// Elementwise kernels: fill, arange, copy (converting between all 8 dtypes), unary, binary, binary with a
// scalar, where, masked_fill. One grid-stride kernel template walks any strided view through a
// StridedIndexer (which degenerates to the linear index when every operand is contiguous). copy, unary
// and the binary ops also have a vectorised path for contiguous, 16-byte-aligned operands: each thread
// loads 16 bytes of every input before it stores, which the strided path cannot (out may alias an input,
// so the compiler keeps each load behind the previous store).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_foreach.cuh"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/cuda/cuda_profile.h"
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

// The same with the op fixed at compile time, for the activations whose row says cuda `fixed` (and add): in
// GPT-2's activation and its backward the runtime switch over every op inside the per-element loop cost a
// quarter of the kernel's time.
template <typename T, typename Out, UnaryOp kOp>
struct FixedUnaryFn {
  __device__ Out operator()(T x) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::unary<Acc>(kOp, convert<Acc>(x)));
  }
};

template <typename T, typename Out, BinaryOp kOp>
struct FixedBinaryFn {
  opmath_t<T> alpha;
  __device__ Out operator()(T a, T b) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::binary<Acc>(kOp, convert<Acc>(a), convert<Acc>(b), alpha));
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

// float32 out = op(a, b) with a and b of their own floating dtypes, computed in float32.
template <typename A, typename B, bool kAdd>
struct MixedFloatFn {
  BinaryOp op;
  float alpha;
  __device__ float operator()(A a, B b) const {
    return pointwise::binary<float>(kAdd ? BinaryOp::add : op, convert<float>(a), convert<float>(b), alpha);
  }
};

// ---- maps: apply an element function over strided views, or over contiguous ones in vectors. One
// template serves every arity: the inputs' data pointers are typed by the pack Ins, in order.

// Elements per vector: 16 bytes of the widest operand (one 128-bit load per operand and thread), so a
// warp moves 512 contiguous bytes per operand with every load in flight before any store.
template <typename... Ts>
inline constexpr int kVecElements = static_cast<int>(16 / std::max({sizeof(Ts)...}));

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vector(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

// out[0, N) = fn(x[0, N)...) for inputs already loaded (as arguments, so every load precedes the store).
template <int N, typename Out, typename Fn, typename... Ins>
__device__ __forceinline__ void store_mapped(Out* out, const Fn& fn, const Vec<Ins, N>&... x) {
  Vec<Out, N> y;
#pragma unroll
  for (int k = 0; k < N; ++k) y.v[k] = fn(x.v[k]...);
  *reinterpret_cast<Vec<Out, N>*>(out) = y;
}

// Work item `chunk` covers elements [chunk * N, chunk * N + N); the last may be partial.
template <int N, typename Out, typename Fn, typename... Ins>
struct VectorMap {
  Out* out;
  const void* in[sizeof...(Ins)];
  Fn fn;
  int64_t n;
  __device__ void operator()(int64_t chunk) const { apply(chunk * N, std::index_sequence_for<Ins...>{}); }
  template <size_t... J>
  __device__ void apply(int64_t first, std::index_sequence<J...> /*inputs*/) const {
    if (first + N <= n) {
      store_mapped<N>(out + first, fn, load_vector<N>(static_cast<const Ins*>(in[J]) + first)...);
    } else {
      for (int64_t i = first; i < n; ++i) out[i] = fn(static_cast<const Ins*>(in[J])[i]...);
    }
  }
};

template <typename T, int N>
bool vector_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * N) == 0;
}

// Strided operands, N elements per work item: item `chunk` covers elements [chunk * N, chunk * N + N) of
// one innermost row, read and written as one vector per operand. N = 1 is the general strided path; N > 1
// needs a row contiguous in every operand whose length is a multiple of N (inner_vectorizable), so one
// index computation serves N elements and every access is a 16-byte vector.
template <int N, typename Out, typename Fn, typename... Ins>
struct StridedMap {
  static constexpr int kOperands = 1 + sizeof...(Ins);
  Out* out;
  const void* in[sizeof...(Ins)];
  Fn fn;
  StridedIndexer<kOperands> idx;
  __device__ void operator()(int64_t chunk) const { apply(chunk * N, std::index_sequence_for<Ins...>{}); }
  template <size_t... J>
  __device__ void apply(int64_t first, std::index_sequence<J...> /*inputs*/) const {
    int64_t o[kOperands];
    idx.offsets(first, o);
    store_mapped<N>(out + o[0], fn, load_vector<N>(static_cast<const Ins*>(in[J]) + o[J + 1])...);
  }
};

// Whether StridedMap with N > 1 applies: the innermost merged dimension has unit stride in every operand and a
// length divisible by N, every other stride is a multiple of N, and every base is N-element aligned (so
// each chunk starts on a vector boundary).
template <int N, int K>
bool inner_vectorizable(const StridedIndexer<K>& idx, const std::array<const void*, K>& bases,
                        const std::array<size_t, K>& element_sizes) {
  if (idx.ndim < 2 || idx.sizes[idx.ndim - 1] % N != 0) return false;
  for (int k = 0; k < K; ++k) {
    if (idx.strides[k][idx.ndim - 1] != 1) return false;
    if (reinterpret_cast<uintptr_t>(bases[k]) % (element_sizes[k] * N) != 0) return false;
    for (int d = 0; d < idx.ndim - 1; ++d)
      if (idx.strides[k][d] % N != 0) return false;
  }
  return true;
}

// out = fn(in) elementwise; vectorised when both views are contiguous and aligned.
template <typename Out, typename In, typename Fn>
void map1(const StridedView& out, const StridedView& in, Fn fn, const char* name) {
  const int64_t n = out.numel();
  const auto idx = make_indexer<2>(out.sizes, {out.strides, in.strides});
  constexpr int N = kVecElements<Out, In>;
  if (idx.linear && vector_aligned<Out, N>(out.data) && vector_aligned<In, N>(in.data)) {
    for_each_index((n + N - 1) / N, VectorMap<N, Out, Fn, In>{static_cast<Out*>(out.data), {in.data}, fn, n}, name);
  } else if (N > 1 && inner_vectorizable<N, 2>(idx, {out.data, in.data}, {sizeof(Out), sizeof(In)})) {
    for_each_index(n / N, StridedMap<N, Out, Fn, In>{static_cast<Out*>(out.data), {in.data}, fn, idx}, name);
  } else {
    for_each_index(n, StridedMap<1, Out, Fn, In>{static_cast<Out*>(out.data), {in.data}, fn, idx}, name);
  }
}

// out = fn(a, b) elementwise; vectorised when all three views are contiguous and aligned.
template <typename Out, typename A, typename B, typename Fn>
void map2(const StridedView& out, const StridedView& a, const StridedView& b, Fn fn, const char* name) {
  const int64_t n = out.numel();
  const auto idx = make_indexer<3>(out.sizes, {out.strides, a.strides, b.strides});
  constexpr int N = kVecElements<Out, A, B>;
  if (idx.linear && vector_aligned<Out, N>(out.data) && vector_aligned<A, N>(a.data) && vector_aligned<B, N>(b.data)) {
    for_each_index((n + N - 1) / N, VectorMap<N, Out, Fn, A, B>{static_cast<Out*>(out.data), {a.data, b.data}, fn, n},
                   name);
  } else {
    for_each_index(n, StridedMap<1, Out, Fn, A, B>{static_cast<Out*>(out.data), {a.data, b.data}, fn, idx}, name);
  }
}

// ---- the mixed-dtype binary path: operands and output of any dtypes, through runtime dtype switches

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

// masked_fill's select, then `post` on each element (masked_fill_then_scalar's op; nothing for masked_fill).
// out and src contiguous, N elements at a time within one innermost row (a multiple of N long); the mask
// read byte by byte at its own stride.
template <typename T, int N, typename Post>
struct MaskedFillVectorFunctor {
  T* out;
  const T* src;
  const uint8_t* mask;
  T value;
  int64_t mask_inner_stride;
  StridedIndexer<3> idx;
  Post post;
  __device__ void operator()(int64_t chunk) const {
    int64_t o[3];
    idx.offsets(chunk * N, o);
    Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(src + o[1]);
#pragma unroll
    for (int k = 0; k < N; ++k) v.v[k] = post(mask[o[2] + k * mask_inner_stride] ? value : v.v[k]);
    *reinterpret_cast<Vec<T, N>*>(out + o[0]) = v;
  }
};

template <typename T, typename Post>
struct MaskedFillFunctor {
  T* out;
  const T* src;
  const uint8_t* mask;
  T value;
  StridedIndexer<3> idx;
  Post post;
  __device__ void operator()(int64_t i) const {
    int64_t o[3];
    idx.offsets(i, o);
    out[o[0]] = post(mask[o[2]] ? value : src[o[1]]);
  }
};

struct NoPost {
  template <typename T>
  __device__ T operator()(T x) const {
    return x;
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

// fill of a contiguous, 16-byte-aligned view: one vector store per 16 bytes (the tail element by element).
template <typename T, int N>
struct FillVectorFunctor {
  T* out;
  T value;
  int64_t n;
  __device__ void operator()(int64_t chunk) const {
    const int64_t first = chunk * N;
    if (first + N <= n) {
      Vec<T, N> v;
#pragma unroll
      for (int k = 0; k < N; ++k) v.v[k] = value;
      *reinterpret_cast<Vec<T, N>*>(out + first) = v;
    } else {
      for (int64_t i = first; i < n; ++i) out[i] = value;
    }
  }
};

void fill(const StridedView& out, double value) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int N = static_cast<int>(16 / sizeof(T));
    if (out.is_contiguous() && vector_aligned<T, N>(out.data)) {
      const int64_t n = out.numel();
      for_each_index((n + N - 1) / N, FillVectorFunctor<T, N>{static_cast<T*>(out.data), from_double<T>(value), n},
                     "fill kernel");
      return;
    }
    for_each_index(
        out.numel(),
        FillFunctor<T>{static_cast<T*>(out.data), from_double<T>(value), make_indexer<1>(out.sizes, {out.strides})},
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

namespace {

// A copy between operands contiguous along different dimensions (a transpose: k.transpose(-2, -1) made
// contiguous for a product, or a gradient written back into a packed q/k/v buffer): one element per thread
// would read or write 2-4 bytes out of every 32-byte sector. Square tiles go through shared memory instead,
// read along the source's unit-stride dimension and written along the destination's, so both sides move
// whole sectors. Dimension `a` has unit stride in the destination, `b` in the source; the other dimensions
// are batches, walked by an indexer. 64 x 64 tiles (32 x 32 for 8-byte elements): a warp's row of a tile is 128 bytes
// or more on either side, and each thread moves 16 elements per tile.
constexpr int kTransposeWarp = 32;
constexpr int kTransposeRows = 8;  // a block is kTransposeWarp x kTransposeRows threads

template <typename To, typename From>
inline constexpr int kTransposeTile = std::max(sizeof(To), sizeof(From)) > 4 ? 32 : 64;

struct TransposePlan {
  int64_t size_a = 0, size_b = 0;
  int64_t src_stride_a = 0, dst_stride_b = 0;
  int64_t batches = 1;
  StridedIndexer<2> batch{};  // operand 0: the destination's batch offsets, 1: the source's
};

template <typename To, typename From>
__global__ void __launch_bounds__(kTransposeWarp* kTransposeRows)
    transpose_copy_kernel(To* out, const From* in, TransposePlan plan) {
  constexpr int kTile = kTransposeTile<To, From>;
  __shared__ From tile[kTile][kTile + 1];  // [a][b]; the pad spreads a column over the banks
  const int64_t a0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t b0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int64_t z = blockIdx.z; z < plan.batches; z += gridDim.z) {
    int64_t base[2];
    plan.batch.offsets(z, base);
    for (int r = static_cast<int>(threadIdx.y); r < kTile; r += kTransposeRows) {
      const int64_t a = a0 + r;
#pragma unroll
      for (int c = static_cast<int>(threadIdx.x); c < kTile; c += kTransposeWarp) {
        const int64_t b = b0 + c;
        if (a < plan.size_a && b < plan.size_b) tile[r][c] = in[base[1] + a * plan.src_stride_a + b];
      }
    }
    __syncthreads();
    for (int r = static_cast<int>(threadIdx.y); r < kTile; r += kTransposeRows) {
      const int64_t b = b0 + r;
#pragma unroll
      for (int c = static_cast<int>(threadIdx.x); c < kTile; c += kTransposeWarp) {
        const int64_t a = a0 + c;
        if (a < plan.size_a && b < plan.size_b) out[base[0] + a + b * plan.dst_stride_b] = convert<To>(tile[c][r]);
      }
    }
    __syncthreads();  // the next batch overwrites the tile
  }
}

// The plan where the destination's and the source's unit strides lie on different merged dimensions, both
// long enough for tiles to pay; nullopt otherwise.
std::optional<TransposePlan> transpose_plan(const StridedView& dst, const StridedView& src) {
  std::vector<int64_t> sizes = dst.sizes;
  std::vector<std::vector<int64_t>> strides{dst.strides, src.strides};
  coalesce_dims(sizes, strides);
  const int ndim = static_cast<int>(sizes.size());
  int a = -1, b = -1;
  for (int d = 0; d < ndim; ++d) {
    if (strides[0][d] == 1) a = d;
    if (strides[1][d] == 1) b = d;
  }
  constexpr int64_t kShortest = 16;
  if (a < 0 || b < 0 || a == b || sizes[a] < kShortest || sizes[b] < kShortest) return std::nullopt;
  TransposePlan plan;
  plan.size_a = sizes[a];
  plan.size_b = sizes[b];
  plan.src_stride_a = strides[1][a];
  plan.dst_stride_b = strides[0][b];
  std::vector<int64_t> batch_sizes;
  std::array<std::vector<int64_t>, 2> batch_strides;
  for (int d = 0; d < ndim; ++d) {
    if (d == a || d == b) continue;
    batch_sizes.push_back(sizes[d]);
    batch_strides[0].push_back(strides[0][d]);
    batch_strides[1].push_back(strides[1][d]);
    plan.batches *= sizes[d];
  }
  plan.batch = make_indexer<2>(batch_sizes, batch_strides);
  return plan;
}

template <typename To, typename From>
void launch_transpose_copy(const StridedView& dst, const StridedView& src, const TransposePlan& plan) {
  constexpr int kTile = kTransposeTile<To, From>;
  const dim3 grid(static_cast<unsigned>((plan.size_a + kTile - 1) / kTile),
                  static_cast<unsigned>((plan.size_b + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(plan.batches, 65535)));
  transpose_copy_kernel<To, From><<<grid, dim3(kTransposeWarp, kTransposeRows), 0, launch_stream()>>>(
      static_cast<To*>(dst.data), static_cast<const From*>(src.data), plan);
  BYTEGRAD_CUDA_CHECK_LAUNCH("transpose_copy_kernel");
}

}  // namespace

void copy(const StridedView& dst, const StridedView& src) {
  require_same_sizes(dst, src, "copy");
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    if (dst.data == src.data && dst.strides == src.strides) return;  // copying a view onto itself
    if (dst.is_contiguous() && src.is_contiguous()) {                // plain bytes: the copy engine is fastest
      BYTEGRAD_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n) * element_size(dst.dtype),
                                          cudaMemcpyDeviceToDevice, launch_stream()));
      return;
    }
  }
  const std::optional<TransposePlan> transpose = transpose_plan(dst, src);
  dispatch_dtype(dst.dtype, [&](auto dst_tag) {
    using To = typename decltype(dst_tag)::type;
    dispatch_dtype(src.dtype, [&](auto src_tag) {
      using From = typename decltype(src_tag)::type;
      if (transpose) launch_transpose_copy<To, From>(dst, src, *transpose);
      else map1<To, From>(dst, src, ConvertFn<To, From>{}, "copy kernel");
    });
  });
}

void unary(UnaryOp op, const StridedView& out, const StridedView& in) {
  require_same_sizes(out, in, "unary");
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_output<T>(out, in.dtype, "unary", [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      switch (op) {
#define BYTEGRAD_FIXED_UNARY_fixed(name) \
  case UnaryOp::name:                    \
    return map1<Out, T>(out, in, FixedUnaryFn<T, Out, UnaryOp::name>{}, "unary kernel");
#define BYTEGRAD_FIXED_UNARY_switch(name)
#define BYTEGRAD_FIXED_UNARY(name, dtypes, saves, node, autocast, cuda, ...) BYTEGRAD_FIXED_UNARY_##cuda(name)
        BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_FIXED_UNARY)
#undef BYTEGRAD_FIXED_UNARY
#undef BYTEGRAD_FIXED_UNARY_fixed
#undef BYTEGRAD_FIXED_UNARY_switch
        default: return map1<Out, T>(out, in, UnaryFn<T, Out>{op}, "unary kernel");
      }
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
  auto float_or_16 = [](ScalarType t) {
    return t == ScalarType::float32 || t == ScalarType::bfloat16 || t == ScalarType::float16;
  };
  if (!same_dtype && !bool_output && common == ScalarType::float32 && out.dtype == ScalarType::float32 &&
      float_or_16(a.dtype) && float_or_16(b.dtype)) {
    // autocast's float32 + 16-bit operands (the residual stream plus a projection's output): typed loads,
    // vectorised when contiguous; the same arithmetic as the runtime-switch kernel below.
    dispatch_floating(a.dtype, "binary", [&](auto a_tag) {
      using A = typename decltype(a_tag)::type;
      dispatch_floating(b.dtype, "binary", [&](auto b_tag) {
        using B = typename decltype(b_tag)::type;
        if constexpr (!std::is_same_v<A, double> && !std::is_same_v<B, double>) {
          if (op == BinaryOp::add)
            map2<float, A, B>(out, a, b, MixedFloatFn<A, B, true>{op, static_cast<float>(alpha)},
                              "binary kernel (mixed dtypes)");
          else
            map2<float, A, B>(out, a, b, MixedFloatFn<A, B, false>{op, static_cast<float>(alpha)},
                              "binary kernel (mixed dtypes)");
        }
      });
    });
    return;
  }
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
      const opmath_t<T> alpha_m = from_double<opmath_t<T>>(alpha);
      switch (op) {
#define BYTEGRAD_FIXED_BINARY_fixed(name) \
  case BinaryOp::name##_backward:         \
    return map2<Out, T, T>(out, a, b, FixedBinaryFn<T, Out, BinaryOp::name##_backward>{alpha_m}, "binary kernel");
#define BYTEGRAD_FIXED_BINARY_switch(name)
#define BYTEGRAD_FIXED_BINARY(name, dtypes, saves, node, autocast, cuda, ...) BYTEGRAD_FIXED_BINARY_##cuda(name)
        BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_FIXED_BINARY)
#undef BYTEGRAD_FIXED_BINARY
#undef BYTEGRAD_FIXED_BINARY_fixed
#undef BYTEGRAD_FIXED_BINARY_switch
        case BinaryOp::add:  // the residual stream
          return map2<Out, T, T>(out, a, b, FixedBinaryFn<T, Out, BinaryOp::add>{alpha_m}, "binary kernel");
        default: return map2<Out, T, T>(out, a, b, BinaryFn<T, Out>{op, alpha_m}, "binary kernel");
      }
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

namespace {

template <typename Post>
void masked_fill_then(const StridedView& out, const StridedView& src, const StridedView& mask, double value,
                      const Post& make_post) {
  require_same_sizes(out, mask, "masked_fill");
  require_same_sizes(out, src, "masked_fill");
  require_mask_dtype(mask, "masked_fill");
  if (src.dtype != out.dtype)
    throw std::invalid_argument("cuda backend: masked_fill: the source must have the output's dtype");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto post = make_post(tag);
    constexpr int N = static_cast<int>(16 / sizeof(T));
    const auto idx = make_indexer<3>(out.sizes, {out.strides, src.strides, mask.strides});
    const int64_t n = out.numel();
    const int64_t inner = idx.ndim > 0 ? idx.sizes[idx.ndim - 1] : 1;
    if (n > 0 && out.is_contiguous() && src.is_contiguous() && vector_aligned<T, N>(out.data) &&
        vector_aligned<T, N>(src.data) && idx.ndim > 0 && inner % N == 0) {
      for_each_index(
          n / N,
          MaskedFillVectorFunctor<T, N, decltype(post)>{static_cast<T*>(out.data), static_cast<const T*>(src.data),
                                                        static_cast<const uint8_t*>(mask.data), from_double<T>(value),
                                                        idx.strides[2][idx.ndim - 1], idx, post},
          "masked_fill kernel");
      return;
    }
    for_each_index(
        out.numel(),
        MaskedFillFunctor<T, decltype(post)>{static_cast<T*>(out.data), static_cast<const T*>(src.data),
                                             static_cast<const uint8_t*>(mask.data), from_double<T>(value), idx, post},
        "masked_fill kernel");
  });
}

}  // namespace

void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value) {
  masked_fill_then(out, src, mask, value, [](auto) { return NoPost{}; });
}

// binary_scalar on masked_fill's result (the same functor, so the same bits as the two launches).
void masked_fill_then_scalar(BinaryOp op, const StridedView& out, const StridedView& src, const StridedView& mask,
                             double value, double scalar) {
  masked_fill_then(out, src, mask, value, [op, scalar](auto tag) {
    using T = typename decltype(tag)::type;
    return BinaryScalarFn<T, T>{op, from_double<opmath_t<T>>(scalar), scalar, false};
  });
}

// ------------------------------------------------------------------------------ multi-tensor launches

namespace {

struct ForeachCall {
  ForeachKind kind;
  int op;  // the UnaryOp / BinaryOp / TernaryOp
  ScalarType dtype;
  int device;
  bool scalar_first;
  void* out;
  const void* in[3];  // unary / binary_scalar: in[0]; ternary: self, a, b
  int64_t numel;
  double scalar;
};

struct ForeachQueue {
  int depth = 0;
  std::vector<ForeachCall> calls;
};

ForeachQueue& foreach_queue() {
  thread_local ForeachQueue queue;
  return queue;
}

// Kernel parameters: up to kForeachTensors tensors and the first block of each (a prefix sum).
struct ForeachTable {
  int count;
  int block_start[kForeachTensors + 1];
  int64_t numel[kForeachTensors];
  void* out[kForeachTensors];
  const void* in[3][kForeachTensors];
  double scalar[kForeachTensors];
};

template <typename T, ForeachKind kKind>
__global__ void __launch_bounds__(kBlockThreads) foreach_kernel(ForeachTable table, int op, bool scalar_first) {
  constexpr int N = static_cast<int>(16 / sizeof(T));
  const ForeachBlock block = foreach_block(table.block_start, table.numel, table.count);
  const int t = block.tensor;
  const int64_t begin = block.begin, end = block.end;
  T* out = static_cast<T*>(table.out[t]);
  const T* x = static_cast<const T*>(table.in[0][t]);
  const T* y = kKind == ForeachKind::ternary ? static_cast<const T*>(table.in[1][t]) : x;
  const T* z = kKind == ForeachKind::ternary ? static_cast<const T*>(table.in[2][t]) : x;
  const double scalar = table.scalar[t];
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  int64_t i = begin + static_cast<int64_t>(threadIdx.x) * N;
  if (aligned(out) && aligned(x) && aligned(y) && aligned(z)) {
    for (; i + N <= end; i += static_cast<int64_t>(blockDim.x) * N) {
      const Vec<T, N> xv = *reinterpret_cast<const Vec<T, N>*>(x + i);
      Vec<T, N> yv = xv, zv = xv;
      if constexpr (kKind == ForeachKind::ternary) {
        yv = *reinterpret_cast<const Vec<T, N>*>(y + i);
        zv = *reinterpret_cast<const Vec<T, N>*>(z + i);
      }
      Vec<T, N> r;
#pragma unroll
      for (int k = 0; k < N; ++k)
        r.v[k] = foreach_element<T>(kKind, op, scalar_first, xv.v[k], yv.v[k], zv.v[k], scalar);
      *reinterpret_cast<Vec<T, N>*>(out + i) = r;
    }
    // The chunk's last partial vector (only at the tensor's end), element by element.
    if (i < end)
      for (int64_t j = i; j < end && j < i + N; ++j)
        out[j] = foreach_element<T>(kKind, op, scalar_first, x[j], y[j], z[j], scalar);
  } else {
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x)
      out[j] = foreach_element<T>(kKind, op, scalar_first, x[j], y[j], z[j], scalar);
  }
}

const char* foreach_key_kind(ForeachKind kind) {
  switch (kind) {
    case ForeachKind::unary: return "foreach unary";
    case ForeachKind::binary_scalar: return "foreach binary_scalar";
    default: return "foreach ternary";
  }
}

std::string_view foreach_op_name(ForeachKind kind, int op) {
  switch (kind) {
    case ForeachKind::unary: return op_name(op_id(static_cast<UnaryOp>(op)));
    case ForeachKind::binary_scalar: return op_name(op_id(static_cast<BinaryOp>(op)));
    default: {
      switch (static_cast<TernaryOp>(op)) {
        case TernaryOp::lerp: return "lerp";
        case TernaryOp::addcmul: return "addcmul";
        case TernaryOp::addcdiv: return "addcdiv";
      }
      return "?";
    }
  }
}

bool same_launch(const ForeachCall& a, const ForeachCall& b) {
  return a.kind == b.kind && a.op == b.op && a.dtype == b.dtype && a.device == b.device &&
         a.scalar_first == b.scalar_first;
}

// Launches calls[first, last) (one kind, op, dtype and device) in tables of up to kForeachTensors.
void launch_foreach(const std::vector<ForeachCall>& calls, size_t first, size_t last) {
  const ForeachCall& head = calls[first];
  int previous_device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&previous_device));
  if (previous_device != head.device) BYTEGRAD_CUDA_CHECK(cudaSetDevice(head.device));
  CudaCallTimer timer(foreach_key_kind(head.kind), foreach_op_name(head.kind, head.op), head.dtype);
  for (size_t begin = first; begin < last;) {
    ForeachTable table{};
    int blocks = 0;
    size_t k = begin;
    for (; k < last && table.count < kForeachTensors; ++k) {
      const ForeachCall& c = calls[k];
      const int64_t chunks = (c.numel + kForeachChunk - 1) / kForeachChunk;
      if (table.count > 0 && blocks + chunks > (int64_t{1} << 30)) break;
      const int t = table.count++;
      table.block_start[t] = blocks;
      table.numel[t] = c.numel;
      table.out[t] = c.out;
      for (int j = 0; j < 3; ++j) table.in[j][t] = c.in[j];
      table.scalar[t] = c.scalar;
      blocks += static_cast<int>(chunks);
    }
    table.block_start[table.count] = blocks;
    begin = k;
    if (blocks == 0) continue;
    dispatch_floating(head.dtype, "foreach", [&](auto tag) {
      using T = typename decltype(tag)::type;
      switch (head.kind) {
        case ForeachKind::unary:
          foreach_kernel<T, ForeachKind::unary>
              <<<blocks, kBlockThreads, 0, launch_stream()>>>(table, head.op, head.scalar_first);
          break;
        case ForeachKind::binary_scalar:
          foreach_kernel<T, ForeachKind::binary_scalar>
              <<<blocks, kBlockThreads, 0, launch_stream()>>>(table, head.op, head.scalar_first);
          break;
        case ForeachKind::ternary:
          foreach_kernel<T, ForeachKind::ternary>
              <<<blocks, kBlockThreads, 0, launch_stream()>>>(table, head.op, head.scalar_first);
          break;
      }
      BYTEGRAD_CUDA_CHECK_LAUNCH("foreach_kernel");
    });
  }
  if (previous_device != head.device) BYTEGRAD_CUDA_CHECK(cudaSetDevice(previous_device));
}

struct Run {  // consecutive queued calls of one launch: calls[first, last)
  size_t first, last;
};

// ---- several foreach ops over the same tensors, one pass: an optimizer's update (lerp_, mul_, addcmul_,
// sqrt, div_, add_, addcdiv_ over one parameter list) is several launches ("stages") over equally long lists
// whose k-th tensors have one size. Where the stages are one of the programs below, they run as one kernel:
// each element of the k-th tensors is loaded once, every stage's op applied in order in registers, and each
// tensor written once. Each op is the same function of the same values as in its own launch, rounded to the
// dtype after every op (no product and sum of two ops fused into one rounding), so the results are the same
// bit for bit. Only where that order cannot be told apart from stage-by-stage order: the tensors of one
// list position are the same tensor or disjoint, and no memory is shared between positions.

// The slots of position k (each distinct pointer, in order of first use) and the stages over them, as a
// program; false when more than kFusedSlots pointers.
bool position_program(const std::vector<ForeachCall>& calls, const std::vector<Run>& runs, size_t first_run,
                      size_t stages, size_t k, std::vector<const void*>& slots, FusedProgram& program) {
  slots.clear();
  program = FusedProgram{"", static_cast<int>(stages), {}, 0u, 0u};
  auto slot_of = [&](const void* p, bool write) -> int {
    size_t i = 0;
    while (i < slots.size() && slots[i] != p) ++i;
    if (i == slots.size()) {
      if (slots.size() == kFusedSlots) return -1;
      slots.push_back(p);
      if (!write) program.load_mask |= 1u << i;
    }
    if (write) program.store_mask |= 1u << i;
    return static_cast<int>(i);
  };
  for (size_t s = 0; s < stages; ++s) {
    const ForeachCall& c = calls[runs[first_run + s].first + k];
    FusedStage& st = program.stage[s];
    st = FusedStage{c.kind, c.op, c.scalar_first, 0, {0, 0, 0}};
    const int inputs = c.kind == ForeachKind::ternary ? 3 : 1;
    for (int j = 0; j < 3; ++j) {
      st.in[j] = j < inputs ? slot_of(c.in[j], false) : st.in[0];
      if (st.in[j] < 0) return false;
    }
    st.out = slot_of(c.out, true);
    if (st.out < 0) return false;
  }
  return true;
}

bool same_program(const FusedProgram& a, const FusedProgram& b) {
  if (a.stages != b.stages || a.load_mask != b.load_mask || a.store_mask != b.store_mask) return false;
  for (int s = 0; s < a.stages; ++s) {
    const FusedStage &x = a.stage[s], &y = b.stage[s];
    if (x.kind != y.kind || x.op != y.op || x.scalar_first != y.scalar_first || x.out != y.out || x.in[0] != y.in[0] ||
        x.in[1] != y.in[1] || x.in[2] != y.in[2])
      return false;
  }
  return true;
}

// Which of kFusedPrograms runs[first_run, first_run + stages) are at every position, with memory shared only
// by the same tensor at the same position; -1: none.
int fused_program(const std::vector<ForeachCall>& calls, const std::vector<Run>& runs, size_t first_run,
                  size_t stages) {
  const size_t positions = runs[first_run].last - runs[first_run].first;
  std::vector<const void*> slots;
  FusedProgram program{};
  int found = -1;
  struct Range {
    uintptr_t begin, end;
  };
  std::vector<Range> ranges;
  for (size_t k = 0; k < positions; ++k) {
    if (!position_program(calls, runs, first_run, stages, k, slots, program)) return -1;
    if (k == 0) {
      for (int i = 0; i < static_cast<int>(std::size(kFusedPrograms)) && found < 0; ++i)
        if (same_program(program, *kFusedPrograms[i])) found = i;
      if (found < 0) return -1;
    } else if (!same_program(program, *kFusedPrograms[found])) {
      return -1;
    }
    const ForeachCall& c = calls[runs[first_run].first + k];
    const auto bytes = static_cast<uintptr_t>(c.numel) * element_size(c.dtype);
    for (const void* p : slots)
      ranges.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end) return -1;  // a position's slots are distinct: overlap is sharing
  return found;
}

struct FusedRuns {
  size_t stages = 0;
  int program = -1;
};

// The longest stretch of runs from runs[r] on that is one of the programs (stages 0: none).
FusedRuns fusable_runs(const std::vector<ForeachCall>& calls, const std::vector<Run>& runs, size_t r) {
  const ForeachCall& head = calls[runs[r].first];
  const size_t positions = runs[r].last - runs[r].first;
  size_t stages = 1;
  while (r + stages < runs.size() && stages < static_cast<size_t>(kFusedStages)) {
    const Run& next = runs[r + stages];
    if (next.last - next.first != positions) break;
    const ForeachCall& c = calls[next.first];
    if (c.dtype != head.dtype || c.device != head.device) break;
    bool sizes_match = true;
    for (size_t k = 0; k < positions && sizes_match; ++k)
      sizes_match = calls[next.first + k].numel == calls[runs[r].first + k].numel;
    if (!sizes_match) break;
    ++stages;
  }
  for (; stages >= 2; --stages)
    if (const int program = fused_program(calls, runs, r, stages); program >= 0) return {stages, program};
  return {};
}

// Launches runs[r, r + fused.stages) as passes of `fused.program` over up to kFusedTensors positions each.
void launch_fused(const std::vector<ForeachCall>& calls, const std::vector<Run>& runs, size_t r, FusedRuns fused) {
  const ForeachCall& head = calls[runs[r].first];
  int previous_device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&previous_device));
  if (previous_device != head.device) BYTEGRAD_CUDA_CHECK(cudaSetDevice(head.device));
  CudaCallTimer timer("foreach fused", kFusedPrograms[fused.program]->name, head.dtype);
  const size_t positions = runs[r].last - runs[r].first;
  std::vector<const void*> slots;
  FusedProgram program{};
  for (size_t begin = 0; begin < positions;) {
    FusedTable table{};
    int blocks = 0;
    size_t k = begin;
    for (; k < positions && table.count < kFusedTensors; ++k) {
      const ForeachCall& c = calls[runs[r].first + k];
      const int64_t chunks = (c.numel + kForeachChunk - 1) / kForeachChunk;
      if (table.count > 0 && blocks + chunks > (int64_t{1} << 30)) break;
      const int t = table.count++;
      position_program(calls, runs, r, fused.stages, k, slots, program);
      table.block_start[t] = blocks;
      table.numel[t] = c.numel;
      for (size_t q = 0; q < slots.size(); ++q) table.slot[t][q] = const_cast<void*>(slots[q]);
      for (size_t s = 0; s < fused.stages; ++s) table.scalar[t][s] = calls[runs[r + s].first + k].scalar;
      blocks += static_cast<int>(chunks);
    }
    table.block_start[table.count] = blocks;
    begin = k;
    if (blocks == 0) continue;
    launch_fused_pass(fused.program, head.dtype, blocks, table);
  }
  if (previous_device != head.device) BYTEGRAD_CUDA_CHECK(cudaSetDevice(previous_device));
}

bool foreach_dtype(ScalarType dtype) {
  return dtype == ScalarType::float32 || dtype == ScalarType::float64 || dtype == ScalarType::float16 ||
         dtype == ScalarType::bfloat16;
}

// A call may be queued when a batch is open, every view is contiguous with the output's sizes and dtype
// (a floating one), and the output either is an input exactly or overlaps none (the op layer's fresh
// outputs and in-place updates).
bool queueable(const StridedView& out, std::initializer_list<const StridedView*> inputs) {
  if (foreach_queue().depth == 0 || !foreach_dtype(out.dtype) || !out.is_contiguous() || out.numel() == 0) return false;
  for (const StridedView* v : inputs)
    if (v->dtype != out.dtype || v->sizes != out.sizes || !v->is_contiguous()) return false;
  return true;
}

// Queues out = op(in..., scalar) on the current device; in: in[0] (unary, binary_scalar) or self, a, b (ternary).
void enqueue(ForeachKind kind, int op, const StridedView& out, std::array<const void*, 3> in, bool scalar_first,
             double scalar) {
  ForeachCall call{kind, op, out.dtype, 0, scalar_first, out.data, {in[0], in[1], in[2]}, out.numel(), scalar};
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&call.device));
  foreach_queue().calls.push_back(call);
}

}  // namespace

void foreach_begin() { ++foreach_queue().depth; }

void foreach_end() {
  ForeachQueue& q = foreach_queue();
  if (q.depth > 0 && --q.depth == 0) foreach_flush();
}

bool foreach_pending() { return !foreach_queue().calls.empty(); }

void foreach_flush() {
  ForeachQueue& q = foreach_queue();
  if (q.calls.empty()) return;
  std::vector<ForeachCall> calls;
  calls.swap(q.calls);  // a launch error leaves an empty queue behind
  std::vector<Run> runs;
  for (size_t first = 0; first < calls.size();) {
    size_t last = first + 1;
    while (last < calls.size() && same_launch(calls[first], calls[last])) ++last;
    runs.push_back({first, last});
    first = last;
  }
  for (size_t r = 0; r < runs.size();) {
    if (const FusedRuns fused = fusable_runs(calls, runs, r); fused.stages >= 2) {
      launch_fused(calls, runs, r, fused);
      r += fused.stages;
    } else {
      launch_foreach(calls, runs[r].first, runs[r].last);
      ++r;
    }
  }
}

bool foreach_enqueue_unary(UnaryOp op, const StridedView& out, const StridedView& in) {
  if (!queueable(out, {&in})) return false;
  if (dtype_rule(op) == DtypeRule::to_bool) return false;
  enqueue(ForeachKind::unary, static_cast<int>(op), out, {in.data}, false, 0.0);
  return true;
}

bool foreach_enqueue_binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                                   bool scalar_first) {
  if (!queueable(out, {&a})) return false;
  if (has_bool_output(op)) return false;
  enqueue(ForeachKind::binary_scalar, static_cast<int>(op), out, {a.data}, scalar_first, scalar);
  return true;
}

bool foreach_enqueue_ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
                             const StridedView& b, double value) {
  if (!queueable(out, {&self, &a, &b})) return false;
  enqueue(ForeachKind::ternary, static_cast<int>(op), out, {self.data, a.data, b.data}, false, value);
  return true;
}

}  // namespace bytegrad::cuda
