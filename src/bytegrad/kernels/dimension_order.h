// TensorIterator's dimension order (reorder_dimensions), shared by the output-layout rule (tensor/) and the
// reduction launch model (kernels/reduce_scratch): start from the reversed order (last dimension first, so
// perm[0] is the fastest-moving one), then an insertion sort with an ambiguity-aware comparison.
#pragma once

#include <cstddef>
#include <numeric>
#include <utility>
#include <vector>

namespace bytegrad {

// should_swap(dim0, dim1): 1 if dim0 should come after dim1, -1 if before, 0 if the operands do not say
// (an undecided pair keeps looking further back, as PyTorch's loop does).
template <typename ShouldSwap>
std::vector<size_t> iterator_dimension_order(size_t ndim, ShouldSwap should_swap) {
  std::vector<size_t> perm(ndim);
  std::iota(perm.rbegin(), perm.rend(), size_t{0});
  for (size_t i = 1; i < ndim; ++i) {
    size_t dim1 = i;
    for (size_t dim0 = i; dim0-- > 0;) {
      const int comparison = should_swap(perm[dim0], perm[dim1]);
      if (comparison > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (comparison < 0) {
        break;
      }
    }
  }
  return perm;
}

}  // namespace bytegrad
