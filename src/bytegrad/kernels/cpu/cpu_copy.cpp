// Filling and copying: fill, arange, strided converting copy, and transfers to and from host buffers.
#include <cstring>

#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

void fill(const StridedView& out, double value) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T typed = convert<T>(value);
    for_each_row<1>({&out}, [typed](std::array<char*, 1> p, const std::array<int64_t, 1>& s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      if (s[0] == 1) {
        for (int64_t i = 0; i < n; ++i) o[i] = typed;
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * s[0]] = typed;
      }
    });
  });
}

void arange(const StridedView& out, double start, double step) {
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t next = 0;  // the loop walks out's elements in row-major order
    for_each_row<1>(
        {&out},
        [&](std::array<char*, 1> p, const std::array<int64_t, 1>& s, int64_t n) {
          T* o = reinterpret_cast<T*>(p[0]);
          for (int64_t i = 0; i < n; ++i, ++next) o[i * s[0]] = convert<T>(start + static_cast<double>(next) * step);
        },
        WalkOrder::row_major);
  });
}

namespace {

template <typename Dst, typename Src>
void copy_typed(const StridedView& dst, const StridedView& src) {
  for_each_row<2>({&dst, &src}, [](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
    Dst* d = reinterpret_cast<Dst*>(p[0]);
    const Src* x = reinterpret_cast<const Src*>(p[1]);
    if (s[0] == 1 && s[1] == 1) {
      if constexpr (std::is_same_v<Dst, Src>) {
        // memmove: a destination whose rows overlap each other (PyTorch's overlap check calls that too hard
        // and allows it) may be written from its own storage, so one row's source and target can overlap.
        if (d != x) std::memmove(static_cast<void*>(d), x, static_cast<size_t>(n) * sizeof(Dst));
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = convert<Dst>(x[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * s[0]] = convert<Dst>(x[i * s[1]]);
    }
  });
}

StridedView contiguous_host_view(void* host, const StridedView& like) {
  StridedView v = like;
  v.data = host;
  v.strides = contiguous_strides(v.sizes);
  return v;
}

}  // namespace

void copy(const StridedView& dst, const StridedView& src) {
  if (dst.sizes != src.sizes) throw std::invalid_argument("cpu copy: source and destination sizes differ");
  dispatch_dtype(dst.dtype, [&](auto dst_tag) {
    dispatch_dtype(src.dtype, [&](auto src_tag) {
      copy_typed<typename decltype(dst_tag)::type, typename decltype(src_tag)::type>(dst, src);
    });
  });
}

void copy_from_host(const StridedView& dst, const void* host) {
  copy(dst, contiguous_host_view(const_cast<void*>(host), dst));
}

void copy_to_host(void* host, const StridedView& src) { copy(contiguous_host_view(host, src), src); }

}  // namespace bytegrad::cpu
