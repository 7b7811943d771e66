// Kernels along one dimension: cumsum (a running sum per slice), sort (a stable sort per slice, also
// topk's: only the first values.sizes[dim] are written) and scatter_fill (one_hot's scatter_ of a number).
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/kernels/cpu/cpu_kernels.h"
#include "bytegrad/kernels/operand_checks.h"
#include "bytegrad/kernels/sort_order.h"

namespace bytegrad::cpu {

void cumsum(const StridedView& out_view, const StridedView& in_view, int64_t dim) {
  const StridedView out = at_least_1d(out_view), in = at_least_1d(in_view);
  if (out.dtype != in.dtype) throw std::invalid_argument("cpu backend: cumsum: out and in must share a dtype");
  const int64_t length = out.sizes[static_cast<size_t>(dim)];
  const int64_t out_step = out.strides[static_cast<size_t>(dim)], in_step = in.strides[static_cast<size_t>(dim)];
  const StridedView out_bases = drop_dim(out, dim), in_bases = drop_dim(in, dim);
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    for_each_row<2>({&out_bases, &in_bases}, [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        T* o = reinterpret_cast<T*>(p[0]) + i * s[0];
        const T* x = reinterpret_cast<const T*>(p[1]) + i * s[1];
        M running = M(0);
        for (int64_t j = 0; j < length; ++j) {
          running = running + convert<M>(x[j * in_step]);
          o[j * out_step] = convert<T>(running);
        }
      }
    });
  });
}

void sort(const StridedView& values_view, const StridedView& indices_view, const StridedView& in_view, int64_t dim,
          bool descending) {
  const StridedView values = at_least_1d(values_view), indices = at_least_1d(indices_view), in = at_least_1d(in_view);
  check_sort_outputs(values, indices, in, "cpu");
  const auto d = static_cast<size_t>(dim);
  const int64_t length = in.sizes[d], keep = values.sizes[d];
  if (keep > length) throw std::invalid_argument("cpu backend: sort: more outputs than elements in a slice");
  const StridedView value_bases = drop_dim(values, dim), index_bases = drop_dim(indices, dim),
                    in_bases = drop_dim(in, dim);
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    std::vector<int64_t> order(static_cast<size_t>(length));
    std::vector<M> slice(static_cast<size_t>(length));
    // A stable sort keeps equal elements in their input order.
    const auto before = [&](int64_t a, int64_t b) {
      return pointwise::ordered_before(slice[static_cast<size_t>(a)], slice[static_cast<size_t>(b)], descending);
    };
    for_each_row<3>({&value_bases, &index_bases, &in_bases},
                    [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) {
                        T* v = reinterpret_cast<T*>(p[0]) + i * s[0];
                        auto* ix = reinterpret_cast<int64_t*>(p[1]) + i * s[1];
                        const T* x = reinterpret_cast<const T*>(p[2]) + i * s[2];
                        for (int64_t j = 0; j < length; ++j)
                          slice[static_cast<size_t>(j)] = convert<M>(x[j * in.strides[d]]);
                        std::iota(order.begin(), order.end(), int64_t{0});
                        std::stable_sort(order.begin(), order.end(), before);
                        for (int64_t j = 0; j < keep; ++j) {
                          const int64_t from = order[static_cast<size_t>(j)];
                          v[j * values.strides[d]] = x[from * in.strides[d]];
                          ix[j * indices.strides[d]] = from;
                        }
                      }
                    });
  });
}

void scatter_fill(const StridedView& out_view, int64_t dim, const StridedView& index_view, double value) {
  const StridedView out = at_least_1d(out_view), index = at_least_1d(index_view);
  const auto d = static_cast<size_t>(dim);
  const int64_t size = out.sizes[d], along = out.strides[d];
  StridedView bases = out;  // out walked in index's shape, its dim stride zeroed: each index picks the slot
  bases.sizes = index.sizes;
  bases.strides[d] = 0;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T filler = convert<T>(value);
    for_each_row<2>({&bases, &index}, [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = load_index(p[1] + i * s[1] * static_cast<int64_t>(element_size(index.dtype)), index.dtype);
        if (at < 0 || at >= size)
          throw std::out_of_range("scatter_fill: index " + std::to_string(at) + " is out of bounds for size " +
                                  std::to_string(size));
        reinterpret_cast<T*>(p[0])[i * s[0] + at * along] = filler;
      }
    });
  });
}

}  // namespace bytegrad::cpu
