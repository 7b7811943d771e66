// triu / tril: one thread per output element (grid-stride); the element's row and column within its matrix
// come from the row-major linear index, its offsets in out and in from a strided indexer.
#include <cuda_runtime.h>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

template <typename T>
struct TriangleFunctor {
  T* out;
  const T* in;
  StridedIndexer<2> indexer;
  int64_t rows, cols, diagonal;
  bool upper;
  __device__ void operator()(int64_t i) const {
    int64_t off[2];
    indexer.offsets(i, off);
    const int64_t col = i % cols;
    const int64_t row = (i / cols) % rows;
    const bool keep = upper ? col - row >= diagonal : col - row <= diagonal;
    out[off[0]] = keep ? in[off[1]] : from_double<T>(0.0);
  }
};

}  // namespace

void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) {
  require_same_sizes(out, in, "triangle");
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: triangle: dtypes differ");
  const size_t nd = out.sizes.size();
  if (nd < 2) throw std::invalid_argument("cuda backend: triangle needs at least 2 dimensions");
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    TriangleFunctor<T> f{static_cast<T*>(out.data),
                         static_cast<const T*>(in.data),
                         make_indexer<2>(out.sizes, {out.strides, in.strides}),
                         out.sizes[nd - 2],
                         out.sizes[nd - 1],
                         diagonal,
                         upper};
    for_each_index(n, f, "triangle");
  });
}

}  // namespace bytegrad::cuda
