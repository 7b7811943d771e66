#include "core/strided_view.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>

namespace bytegrad {

int64_t shape_numel(const Shape& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

std::string shape_str(const Shape& sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

bool is_non_overlapping_and_dense(const Shape& sizes, const Shape& strides) {
  const size_t ndim = sizes.size();
  if (ndim == 1) return sizes[0] < 2 || strides[0] == 1;
  std::vector<size_t> perm(ndim);
  std::iota(perm.begin(), perm.end(), size_t{0});
  // Size-0/1 dimensions last, the rest by increasing stride.
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t required = 1;
  for (size_t d : perm) {
    if (sizes[d] < 2) return true;
    if (strides[d] != required) return false;
    required *= sizes[d];
  }
  return true;
}

}  // namespace bytegrad
