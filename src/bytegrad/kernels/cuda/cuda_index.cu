// Indexing kernels: index_select, index_add, gather, scatter_add. Each walks one shape with a
// StridedIndexer in which the indexed tensor's stride along `dim` is zeroed, then adds index * stride[dim]
// from the index read for that element. Accumulating kernels use atomicAdd, so their float sums may differ
// in the last bits from run to run (as PyTorch's do on CUDA).
//
// Indices must lie in [0, size along dim), as PyTorch requires (its kernels assert on the device); an
// index outside that range is not reported here: selects and gathers write 0 there, adds skip it.
#include <cuda_runtime.h>

#include <array>
#include <string>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

// Adds to one byte through a compare-and-swap on the aligned 32-bit word holding it (allocations are
// 512-byte aligned, so the word never leaves the allocation). bool saturates: true + true == true.
__device__ void atomic_add_byte(uint8_t* address, uint8_t value, bool is_bool) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(address);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & 3) * 8;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const unsigned byte = (assumed >> shift) & 0xffu;
    const unsigned updated = is_bool ? ((byte | value) != 0 ? 1u : 0u) : ((byte + value) & 0xffu);
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (updated << shift));
  } while (assumed != old);
}

template <typename T>
__device__ __forceinline__ void atomic_add(T* address, T value) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    atomic_add_byte(reinterpret_cast<uint8_t*>(address), value ? 1 : 0, true);
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    atomic_add_byte(address, value, false);
  } else {  // float, double, int32, __half (sm_70+), __nv_bfloat16 (sm_80+)
    atomicAdd(address, value);
  }
}

template <typename T, typename I>
struct IndexSelectFunctor {
  T* out;
  const T* in;
  const I* index;
  int64_t in_dim_size, in_dim_stride;
  StridedIndexer<3> idx;  // out, in (dim stride 0), index
  __device__ void operator()(int64_t i) const {
    int64_t o[3];
    idx.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[2]]);
    out[o[0]] = (k >= 0 && k < in_dim_size) ? in[o[1] + k * in_dim_stride] : convert<T>(0);
  }
};

template <typename T, typename I>
struct IndexAddFunctor {
  T* out;
  const T* source;
  const I* index;
  int64_t out_dim_size, out_dim_stride;
  StridedIndexer<3> idx;  // source, out (dim stride 0), index
  __device__ void operator()(int64_t i) const {
    int64_t o[3];
    idx.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[2]]);
    if (k >= 0 && k < out_dim_size) atomic_add(out + o[1] + k * out_dim_stride, source[o[0]]);
  }
};

template <typename T, typename I>
struct GatherFunctor {
  T* out;
  const T* in;
  const I* index;
  int64_t in_dim_size, in_dim_stride;
  StridedIndexer<3> idx;  // out, index, in (dim stride 0)
  __device__ void operator()(int64_t i) const {
    int64_t o[3];
    idx.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[1]]);
    out[o[0]] = (k >= 0 && k < in_dim_size) ? in[o[2] + k * in_dim_stride] : convert<T>(0);
  }
};

template <typename T, typename I>
struct ScatterAddFunctor {
  T* out;
  const T* source;
  const I* index;
  int64_t out_dim_size, out_dim_stride;
  StridedIndexer<3> idx;  // index, source, out (dim stride 0)
  __device__ void operator()(int64_t i) const {
    int64_t o[3];
    idx.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[0]]);
    if (k >= 0 && k < out_dim_size) atomic_add(out + o[2] + k * out_dim_stride, source[o[1]]);
  }
};

template <typename F>
void dispatch_index(ScalarType dtype, const char* op, F&& f) {
  if (dtype == ScalarType::int64) return f(TypeTag<int64_t>{});
  if (dtype == ScalarType::int32) return f(TypeTag<int32_t>{});
  throw std::invalid_argument(std::string("cuda backend: ") + op + ": indices must be int64 (or int32)");
}

// A 0-d view as 1-d of one element, so `dim` 0 exists (PyTorch accepts dim 0 / -1 on scalars).
StridedView at_least_1d(const StridedView& v) {
  if (!v.sizes.empty()) return v;
  StridedView one = v;
  one.sizes = {1};
  one.strides = {1};
  return one;
}

int64_t checked_dim(int64_t dim, const StridedView& v, const char* op) {
  if (dim < 0 || dim >= static_cast<int64_t>(v.sizes.size()))
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": dimension out of range");
  return dim;
}

std::vector<int64_t> with_dim_stride(std::vector<int64_t> strides, int64_t dim, int64_t value) {
  strides[dim] = value;
  return strides;
}

// Strides that read a 1-d index vector along `dim` of a tensor with `rank` dimensions.
std::vector<int64_t> index_vector_strides(const StridedView& index, size_t rank, int64_t dim) {
  std::vector<int64_t> strides(rank, 0);
  strides[dim] = index.strides.empty() ? 0 : index.strides[0];
  return strides;
}

void require_same_rank(const StridedView& a, const StridedView& b, const char* op) {
  if (a.sizes.size() != b.sizes.size())
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": tensors must have the same rank");
}

}  // namespace

void index_select(const StridedView& out_view, const StridedView& in_view, int64_t dim, const StridedView& index) {
  const StridedView out = at_least_1d(out_view), in = at_least_1d(in_view);
  require_same_rank(out, in, "index_select");
  dim = checked_dim(dim, in, "index_select");
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: index_select: dtypes differ");
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index.dtype, "index_select", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_index(out.numel(),
                     IndexSelectFunctor<T, I>{static_cast<T*>(out.data), static_cast<const T*>(in.data),
                                              static_cast<const I*>(index.data), in.sizes[dim], in.strides[dim],
                                              make_indexer<3>(out.sizes, {out.strides, with_dim_stride(in.strides, dim, 0),
                                                                          index_vector_strides(index, out.sizes.size(), dim)})},
                     "index_select kernel");
    });
  });
}

void index_add(const StridedView& out_view, int64_t dim, const StridedView& index, const StridedView& source_view) {
  const StridedView out = at_least_1d(out_view), source = at_least_1d(source_view);
  require_same_rank(out, source, "index_add");
  dim = checked_dim(dim, out, "index_add");
  if (out.dtype != source.dtype) throw std::invalid_argument("cuda backend: index_add: dtypes differ");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index.dtype, "index_add", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_index(source.numel(),
                     IndexAddFunctor<T, I>{static_cast<T*>(out.data), static_cast<const T*>(source.data),
                                           static_cast<const I*>(index.data), out.sizes[dim], out.strides[dim],
                                           make_indexer<3>(source.sizes, {source.strides, with_dim_stride(out.strides, dim, 0),
                                                                          index_vector_strides(index, source.sizes.size(), dim)})},
                     "index_add kernel");
    });
  });
}

void gather(const StridedView& out_view, const StridedView& in_view, int64_t dim, const StridedView& index_view) {
  const StridedView out = at_least_1d(out_view), in = at_least_1d(in_view), index = at_least_1d(index_view);
  require_same_rank(out, in, "gather");
  require_same_rank(out, index, "gather");
  require_same_sizes(out, index, "gather");
  dim = checked_dim(dim, in, "gather");
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: gather: dtypes differ");
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index.dtype, "gather", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_index(out.numel(),
                     GatherFunctor<T, I>{static_cast<T*>(out.data), static_cast<const T*>(in.data),
                                         static_cast<const I*>(index.data), in.sizes[dim], in.strides[dim],
                                         make_indexer<3>(index.sizes, {out.strides, index.strides, with_dim_stride(in.strides, dim, 0)})},
                     "gather kernel");
    });
  });
}

void scatter_add(const StridedView& out_view, int64_t dim, const StridedView& index_view, const StridedView& source_view) {
  const StridedView out = at_least_1d(out_view), index = at_least_1d(index_view), source = at_least_1d(source_view);
  require_same_rank(out, index, "scatter_add");
  require_same_rank(out, source, "scatter_add");
  dim = checked_dim(dim, out, "scatter_add");
  if (out.dtype != source.dtype) throw std::invalid_argument("cuda backend: scatter_add: dtypes differ");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index.dtype, "scatter_add", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_index(index.numel(),
                     ScatterAddFunctor<T, I>{static_cast<T*>(out.data), static_cast<const T*>(source.data),
                                             static_cast<const I*>(index.data), out.sizes[dim], out.strides[dim],
                                             make_indexer<3>(index.sizes, {index.strides, source.strides, with_dim_stride(out.strides, dim, 0)})},
                     "scatter_add kernel");
    });
  });
}

}  // namespace bytegrad::cuda
