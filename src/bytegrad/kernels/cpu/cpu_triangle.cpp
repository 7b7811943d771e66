// triu / tril: a copy of the input with the elements outside a triangle of the last two dims zeroed.
#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) {
  const size_t nd = out.sizes.size();
  if (nd < 2) throw std::invalid_argument("cpu backend: triangle needs at least 2 dimensions");
  const int64_t rows = out.sizes[nd - 2], cols = out.sizes[nd - 1];
  // Walk every matrix (the leading dims) as one "row" of the loop with the last two dims dropped.
  StridedView out_batch = drop_dim(drop_dim(out, static_cast<int64_t>(nd) - 1), static_cast<int64_t>(nd) - 2);
  StridedView in_batch = drop_dim(drop_dim(in, static_cast<int64_t>(nd) - 1), static_cast<int64_t>(nd) - 2);
  const int64_t so_r = out.strides[nd - 2], so_c = out.strides[nd - 1];
  const int64_t si_r = in.strides[nd - 2], si_c = in.strides[nd - 1];
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_row<2>(
        {&out_batch, &in_batch},
        [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
          for (int64_t b = 0; b < n; ++b) {
            T* o = reinterpret_cast<T*>(p[0]) + b * s[0];
            const T* x = reinterpret_cast<const T*>(p[1]) + b * s[1];
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = 0; j < cols; ++j) {
                const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
                o[i * so_r + j * so_c] = keep ? x[i * si_r + j * si_c] : T(0);
              }
          }
        },
        WalkOrder::row_major);
  });
}

}  // namespace bytegrad::cpu
