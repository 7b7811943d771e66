// Kernels along one dimension: cumsum (one thread per slice, a running sum in the math type), sort and
// topk (one thread per element: its rank in its slice, counting the elements ordered before it, is where it
// goes; ties are ranked by position, so the sort is stable) and scatter_fill (one thread per index). Simple
// rather than fast: PyTorch's scans and radix sorts are faster; these give the same values.
#include <cuda_runtime.h>

#include <array>
#include <string>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/operand_checks.h"
#include "bytegrad/kernels/sort_order.h"

namespace bytegrad::cuda {

namespace {

std::vector<int64_t> with_size_one_at(std::vector<int64_t> sizes, int64_t dim) {
  sizes[static_cast<size_t>(dim)] = 1;
  return sizes;
}

template <typename T>
struct CumsumFunctor {
  T* out;
  const T* in;
  int64_t length, out_step, in_step;
  StridedIndexer<2> idx;  // slice bases: out, in
  __device__ void operator()(int64_t slice) const {
    using M = opmath_t<T>;
    int64_t o[2];
    idx.offsets(slice, o);
    M running = M(0);
    for (int64_t j = 0; j < length; ++j) {
      running = running + convert<M>(in[o[1] + j * in_step]);
      out[o[0] + j * out_step] = convert<T>(running);
    }
  }
};

template <typename T>
struct SortRankFunctor {
  T* values;
  int64_t* indices;
  const T* in;
  int64_t length, keep, value_step, index_step, in_step;
  bool descending;
  StridedIndexer<3> idx;  // slice bases: values, indices, in
  __device__ void operator()(int64_t i) const {
    using M = opmath_t<T>;
    const int64_t slice = i / length, position = i % length;
    int64_t o[3];
    idx.offsets(slice, o);
    const M mine = convert<M>(in[o[2] + position * in_step]);
    int64_t rank = 0;
    for (int64_t j = 0; j < length; ++j) {
      const M other = convert<M>(in[o[2] + j * in_step]);
      const bool other_first = pointwise::ordered_before(other, mine, descending) ||
                               (j < position && !pointwise::ordered_before(mine, other, descending));
      rank += other_first ? 1 : 0;
    }
    if (rank < keep) {
      values[o[0] + rank * value_step] = in[o[2] + position * in_step];
      indices[o[1] + rank * index_step] = position;
    }
  }
};

template <typename T, typename I>
struct ScatterFillFunctor {
  T* out;
  const I* index;
  T value;
  int64_t dim_size, dim_stride;
  StridedIndexer<2> idx;  // index, out (its dim stride zeroed)
  __device__ void operator()(int64_t i) const {
    int64_t o[2];
    idx.offsets(i, o);
    const int64_t k = static_cast<int64_t>(index[o[0]]);
    if (k >= 0 && k < dim_size) out[o[1] + k * dim_stride] = value;  // PyTorch asserts; the op checked first
  }
};

}  // namespace

void cumsum(const StridedView& out_view, const StridedView& in_view, int64_t dim) {
  const StridedView out = at_least_1d(out_view), in = at_least_1d(in_view);
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: cumsum: out and in must share a dtype");
  const auto d = static_cast<size_t>(dim);
  const std::vector<int64_t> bases = with_size_one_at(out.sizes, dim);
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(shape_numel(bases),
                   CumsumFunctor<T>{static_cast<T*>(out.data), static_cast<const T*>(in.data), out.sizes[d],
                                    out.strides[d], in.strides[d], make_indexer<2>(bases, {out.strides, in.strides})},
                   "cumsum kernel");
  });
}

void sort(const StridedView& values_view, const StridedView& indices_view, const StridedView& in_view, int64_t dim,
          bool descending) {
  const StridedView values = at_least_1d(values_view), indices = at_least_1d(indices_view), in = at_least_1d(in_view);
  check_sort_outputs(values, indices, in, "cuda");
  const auto d = static_cast<size_t>(dim);
  const int64_t length = in.sizes[d];
  const std::vector<int64_t> bases = with_size_one_at(in.sizes, dim);
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(shape_numel(bases) * length,
                   SortRankFunctor<T>{static_cast<T*>(values.data), static_cast<int64_t*>(indices.data),
                                      static_cast<const T*>(in.data), length, values.sizes[d], values.strides[d],
                                      indices.strides[d], in.strides[d], descending,
                                      make_indexer<3>(bases, {values.strides, indices.strides, in.strides})},
                   "sort kernel");
  });
}

void scatter_fill(const StridedView& out_view, int64_t dim, const StridedView& index_view, double value) {
  const StridedView out = at_least_1d(out_view), index = at_least_1d(index_view);
  const auto d = static_cast<size_t>(dim);
  std::vector<int64_t> out_strides = out.strides;
  out_strides[d] = 0;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto launch = [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      for_each_index(shape_numel(index.sizes),
                     ScatterFillFunctor<T, I>{static_cast<T*>(out.data), static_cast<const I*>(index.data),
                                              from_double<T>(value), out.sizes[d], out.strides[d],
                                              make_indexer<2>(index.sizes, {index.strides, out_strides})},
                     "scatter_fill kernel");
    };
    if (index.dtype == ScalarType::int64) launch(TypeTag<int64_t>{});
    else if (index.dtype == ScalarType::int32) launch(TypeTag<int32_t>{});
    else throw std::invalid_argument("cuda backend: scatter_fill: indices must be int64 (or int32)");
  });
}

}  // namespace bytegrad::cuda
