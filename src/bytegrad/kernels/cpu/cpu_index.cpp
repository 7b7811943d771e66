// Indexing kernels: index_select / index_add (whole slices picked by a 1-d index) and gather /
// scatter_add (one element per index position). Out-of-range indices throw std::out_of_range.
#include <string>

#include "bytegrad/kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

int64_t checked_index(int64_t index, int64_t size, const char* op) {
  if (index < 0 || index >= size)  // negative indices do not wrap (PyTorch: "index out of range in self")
    throw std::out_of_range(std::string(op) + ": index " + std::to_string(index) + " is out of bounds for size " +
                            std::to_string(size));
  return index;
}

int64_t index_at(const StridedView& index, int64_t i) {
  const int64_t stride = index.sizes.empty() ? 0 : index.strides[0];
  return load_index(static_cast<const char*>(index.data) + i * stride * static_cast<int64_t>(element_size(index.dtype)),
                    index.dtype);
}

// The input with its `dim` stride zeroed: walking it alongside index visits the base of each lookup.
StridedView without_stride_at(StridedView v, int64_t dim, const std::vector<int64_t>& sizes) {
  v.sizes = sizes;
  v.strides[static_cast<size_t>(dim)] = 0;
  return v;
}

}  // namespace

void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) {
  if (in.sizes.empty()) {  // 0-d input: index must be [0]
    if (index.numel() > 0) checked_index(index_at(index, 0), 1, "index_select");
    copy(out, in);
    return;
  }
  const int64_t size = in.sizes[static_cast<size_t>(dim)];
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t source = checked_index(index_at(index, i), size, "index_select");
    copy(select_view(out, dim, i), select_view(in, dim, source));
  }
}

void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) {
  const int64_t size = out.sizes.empty() ? 1 : out.sizes[static_cast<size_t>(dim)];
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t target = checked_index(index_at(index, i), size, "index_add");
    if (out.sizes.empty()) {
      binary(BinaryOp::add, out, out, source, 1.0);
    } else {
      const StridedView slot = select_view(out, dim, target);
      binary(BinaryOp::add, slot, slot, select_view(source, dim, i), 1.0);
    }
  }
}

void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) {
  if (in.sizes.empty()) {
    if (index.numel() > 0) checked_index(index_at(index, 0), 1, "gather");
    copy(out, in);
    return;
  }
  const int64_t size = in.sizes[static_cast<size_t>(dim)];
  const int64_t along = in.strides[static_cast<size_t>(dim)];
  const StridedView bases = without_stride_at(in, dim, index.sizes);
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_row<3>({&out, &index, &bases}, [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = checked_index(
            load_index(p[1] + i * s[1] * static_cast<int64_t>(element_size(index.dtype)), index.dtype), size, "gather");
        o[i * s[0]] = x[i * s[2] + at * along];
      }
    });
  });
}

void scatter_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) {
  if (out.sizes.empty()) {
    if (index.numel() > 0) {
      checked_index(index_at(index, 0), 1, "scatter_add");
      binary(BinaryOp::add, out, out, source, 1.0);
    }
    return;
  }
  const int64_t size = out.sizes[static_cast<size_t>(dim)];
  const int64_t along = out.strides[static_cast<size_t>(dim)];
  const StridedView bases = without_stride_at(out, dim, index.sizes);
  StridedView src = source;
  src.sizes = index.sizes;  // source may be larger than index; only index's extent is read
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    for_each_row<3>({&bases, &index, &src}, [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at =
            checked_index(load_index(p[1] + i * s[1] * static_cast<int64_t>(element_size(index.dtype)), index.dtype),
                          size, "scatter_add");
        T& slot = o[i * s[0] + at * along];
        slot = convert<T>(convert<M>(slot) + convert<M>(x[i * s[2]]));
      }
    });
  });
}

}  // namespace bytegrad::cpu
