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
#include "bytegrad/kernels/operand_checks.h"

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

// One element of an indexing op along `dim`. The indexer yields three offsets: slot kIndex is the index's,
// slot kIndexed the tensor indexed along dim (its dim stride zeroed: k * dim_stride is added instead) and
// the third slot the tensor walked element by element. A read (index_select, gather) copies the indexed
// input into the walked output, 0 for an index out of range; an accumulation (index_add, scatter_add)
// adds the walked source into the indexed output, skipping an index out of range.
template <typename T, typename I, bool kAccumulate, int kIndex, int kIndexed>
struct IndexAlongDimFunctor {
  T* out;
  const T* in;
  const I* index;
  int64_t dim_size, dim_stride;  // of the indexed tensor
  StridedIndexer<3> idx;
  __device__ void operator()(int64_t i) const {
    constexpr int kWalked = 3 - kIndex - kIndexed;
    int64_t o[3];
    idx.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[kIndex]]);
    if constexpr (kAccumulate) {
      if (k >= 0 && k < dim_size) atomic_add(out + o[kIndexed] + k * dim_stride, in[o[kWalked]]);
    } else {
      out[o[kWalked]] = (k >= 0 && k < dim_size) ? in[o[kIndexed] + k * dim_stride] : convert<T>(0);
    }
  }
};

template <typename F>
void dispatch_index(ScalarType dtype, const char* op, F&& f) {
  if (dtype == ScalarType::int64) return f(TypeTag<int64_t>{});
  if (dtype == ScalarType::int32) return f(TypeTag<int32_t>{});
  throw std::invalid_argument(std::string("cuda backend: ") + op + ": indices must be int64 (or int32)");
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

// Runs IndexAlongDimFunctor over `shape`: the indexed tensor is `in` for a read, `out` for an
// accumulation, the walked one the other; `index_strides` read the index in the iteration shape.
template <bool kAccumulate, int kIndex, int kIndexed>
void index_along_dim(const StridedView& out, const StridedView& in, const StridedView& index, int64_t dim,
                     const Shape& shape, const std::vector<int64_t>& index_strides, const char* op,
                     const char* kernel) {
  constexpr int kWalked = 3 - kIndex - kIndexed;
  const StridedView& indexed = kAccumulate ? out : in;
  const StridedView& walked = kAccumulate ? in : out;
  dispatch_dtype(indexed.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(index.dtype, op, [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      std::array<std::vector<int64_t>, 3> strides;
      strides[kIndex] = index_strides;
      strides[kIndexed] = with_dim_stride(indexed.strides, dim, 0);
      strides[kWalked] = walked.strides;
      for_each_index(shape_numel(shape),
                     IndexAlongDimFunctor<T, I, kAccumulate, kIndex, kIndexed>{
                         static_cast<T*>(out.data), static_cast<const T*>(in.data), static_cast<const I*>(index.data),
                         indexed.sizes[dim], indexed.strides[dim], make_indexer<3>(shape, strides)},
                     kernel);
    });
  });
}

}  // namespace

void index_select(const StridedView& out_view, const StridedView& in_view, int64_t dim, const StridedView& index) {
  const StridedView out = at_least_1d(out_view), in = at_least_1d(in_view);
  require_same_rank(out, in, "index_select");
  dim = checked_dim(dim, in, "index_select");
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: index_select: dtypes differ");
  // slots: out, in, index
  index_along_dim<false, 2, 1>(out, in, index, dim, out.sizes, index_vector_strides(index, out.sizes.size(), dim),
                               "index_select", "index_select kernel");
}

void index_add(const StridedView& out_view, int64_t dim, const StridedView& index, const StridedView& source_view) {
  const StridedView out = at_least_1d(out_view), source = at_least_1d(source_view);
  require_same_rank(out, source, "index_add");
  dim = checked_dim(dim, out, "index_add");
  if (out.dtype != source.dtype) throw std::invalid_argument("cuda backend: index_add: dtypes differ");
  // slots: source, out, index
  index_along_dim<true, 2, 1>(out, source, index, dim, source.sizes,
                              index_vector_strides(index, source.sizes.size(), dim), "index_add", "index_add kernel");
}

void gather(const StridedView& out_view, const StridedView& in_view, int64_t dim, const StridedView& index_view) {
  const StridedView out = at_least_1d(out_view), in = at_least_1d(in_view), index = at_least_1d(index_view);
  require_same_rank(out, in, "gather");
  require_same_rank(out, index, "gather");
  require_same_sizes(out, index, "gather");
  dim = checked_dim(dim, in, "gather");
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: gather: dtypes differ");
  // slots: out, index, in
  index_along_dim<false, 1, 2>(out, in, index, dim, index.sizes, index.strides, "gather", "gather kernel");
}

void scatter_add(const StridedView& out_view, int64_t dim, const StridedView& index_view,
                 const StridedView& source_view) {
  const StridedView out = at_least_1d(out_view), index = at_least_1d(index_view), source = at_least_1d(source_view);
  require_same_rank(out, index, "scatter_add");
  require_same_rank(out, source, "scatter_add");
  dim = checked_dim(dim, out, "scatter_add");
  if (out.dtype != source.dtype) throw std::invalid_argument("cuda backend: scatter_add: dtypes differ");
  // slots: index, source, out
  index_along_dim<true, 0, 2>(out, source, index, dim, index.sizes, index.strides, "scatter_add", "scatter_add kernel");
}

}  // namespace bytegrad::cuda
