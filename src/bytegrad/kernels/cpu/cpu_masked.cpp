// masked_select and masked_scatter: the elements where a bool mask is true, in row-major order, gathered
// into (select) or written from (scatter) a flat contiguous tensor.
#include <stdexcept>

#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

// Calls visit(element, next) for every element of `strided` whose mask is true, row-major, with
// next = 0, 1, 2, ... (its position in the flat tensor).
template <typename T, typename Visit>
void walk_selected(const StridedView& strided, const StridedView& mask, Visit&& visit) {
  if (mask.dtype != ScalarType::bool_) throw std::invalid_argument("cpu backend: masked ops: mask must be bool");
  if (mask.sizes != strided.sizes) throw std::invalid_argument("cpu backend: masked ops: mask and tensor sizes differ");
  int64_t next = 0;
  for_each_row<2>(
      {&strided, &mask},
      [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
        T* x = reinterpret_cast<T*>(p[0]);
        const bool* m = reinterpret_cast<const bool*>(p[1]);
        for (int64_t i = 0; i < n; ++i)
          if (m[i * s[1]]) visit(x[i * s[0]], next++);
      },
      WalkOrder::row_major);
}

}  // namespace

void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask) {
  if (out.dtype != in.dtype) throw std::invalid_argument("cpu backend: masked_select: out and in dtypes differ");
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* flat = static_cast<T*>(out.data);
    const int64_t step = out.sizes.empty() ? 1 : out.strides[0];
    const int64_t capacity = out.sizes.empty() ? 1 : out.sizes[0];
    walk_selected<T>(in, mask, [&](T& element, int64_t at) {
      if (at >= capacity) throw std::invalid_argument("cpu backend: masked_select: out is too small");
      flat[at * step] = element;
    });
  });
}

void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source) {
  if (out.dtype != source.dtype)
    throw std::invalid_argument("cpu backend: masked_scatter: out and source dtypes differ");
  int64_t available = 1;
  for (int64_t s : source.sizes) available *= s;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* flat = static_cast<const T*>(source.data);  // contiguous: the op made it so
    walk_selected<T>(out, mask, [&](T& element, int64_t at) {
      if (at >= available)
        throw std::invalid_argument("masked_scatter: the mask has more true values than source has elements");
      element = flat[at];
    });
  });
}

}  // namespace bytegrad::cpu
