// masked_select and masked_scatter: one block of threads, each owning a contiguous run of the row-major
// element order; a count per thread, an exclusive scan of the counts in shared memory, then each thread
// moves its selected elements to or from their places in the flat tensor. Simple rather than fast
// (PyTorch's nonzero and CUB scans spread the work over the whole GPU); the values are the same, and it
// needs no scratch memory.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

constexpr int kMaskedThreads = 256;

// gather: flat[k] = strided[i] for the k-th selected i (masked_select); otherwise strided[i] = flat[k]
// (masked_scatter). Operand 0 of the indexer is `strided`, operand 1 the mask.
template <typename T>
__global__ void __launch_bounds__(kMaskedThreads)
    masked_move_kernel(T* strided, const uint8_t* mask, T* flat, int64_t flat_step, int64_t flat_count, int64_t n,
                       bool gather, StridedIndexer<2> idx) {
  __shared__ int64_t starts[kMaskedThreads];
  const int64_t run = (n + kMaskedThreads - 1) / kMaskedThreads;
  const int64_t begin = min(n, static_cast<int64_t>(threadIdx.x) * run), end = min(n, begin + run);
  int64_t o[2];
  int64_t count = 0;
  for (int64_t i = begin; i < end; ++i) {
    idx.offsets(i, o);
    count += mask[o[1]] != 0 ? 1 : 0;
  }
  starts[threadIdx.x] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t running = 0;
    for (int t = 0; t < kMaskedThreads; ++t) {
      const int64_t c = starts[t];
      starts[t] = running;
      running += c;
    }
  }
  __syncthreads();
  int64_t at = starts[threadIdx.x];
  for (int64_t i = begin; i < end; ++i) {
    idx.offsets(i, o);
    if (mask[o[1]] == 0) continue;
    if (at < flat_count) {  // the op checked the count; never write past the flat tensor
      if (gather) flat[at * flat_step] = strided[o[0]];
      else strided[o[0]] = flat[at * flat_step];
    }
    ++at;
  }
}

void masked_move(const StridedView& strided, const StridedView& mask, const StridedView& flat, bool gather,
                 const char* name) {
  if (mask.dtype != ScalarType::bool_)
    throw std::invalid_argument(std::string("cuda backend: ") + name + ": mask must be bool");
  require_same_sizes(strided, mask, name);
  if (strided.dtype != flat.dtype)
    throw std::invalid_argument(std::string("cuda backend: ") + name + ": operand dtypes differ");
  const int64_t n = shape_numel(strided.sizes);
  if (n == 0) return;
  const int64_t flat_count = shape_numel(flat.sizes);
  const int64_t flat_step = flat.sizes.empty() ? 1 : flat.strides[0];
  dispatch_dtype(strided.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    masked_move_kernel<T><<<1, kMaskedThreads, 0, launch_stream()>>>(
        static_cast<T*>(strided.data), static_cast<const uint8_t*>(mask.data), static_cast<T*>(flat.data), flat_step,
        flat_count, n, gather, make_indexer<2>(strided.sizes, {strided.strides, mask.strides}));
    check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
  });
}

}  // namespace

void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask) {
  masked_move(in, mask, out, true, "masked_select");
}

void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source) {
  masked_move(out, mask, source, false, "masked_scatter");
}

}  // namespace bytegrad::cuda
