// Where a strided view's elements lie in memory: for code that must know whether two views touch the same
// bytes before a kernel reads one and writes the other (tensor/gradient_reader.cpp), or whether they are one
// view (tensor/driver_allocations.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytegrad/core/strided_view.h"

namespace bytegrad {

struct ByteRange {
  uintptr_t begin = 0, end = 0;
};

// The bytes a view's elements span, from its lowest element to the end of its highest (empty: none).
inline ByteRange bytes_spanned(const StridedView& view) {
  if (view.numel() == 0) return {};
  int64_t low = 0, high = 0;
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    const int64_t reach = view.strides[d] * (view.sizes[d] - 1);
    (reach < 0 ? low : high) += reach;
  }
  const auto base = reinterpret_cast<uintptr_t>(view.data);
  const auto size = static_cast<int64_t>(element_size(view.dtype));
  return {base + static_cast<uintptr_t>(low * size), base + static_cast<uintptr_t>((high + 1) * size)};
}

inline bool ranges_overlap(const ByteRange& a, const ByteRange& b) { return a.begin < b.end && b.begin < a.end; }

// The same elements in the same order: one data pointer, dtype, sizes and strides.
inline bool same_view(const StridedView& a, const StridedView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides;
}

}  // namespace bytegrad
