// Internal to the CPU backend: dtype dispatch, value conversion, and the strided loop every kernel is
// built on. Kernels read and write tensors in place through their strides (no hidden copies); the loop
// drops size-1 dimensions and merges dimensions that are contiguous for every operand, so a contiguous
// tensor is walked as one flat run.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bytegrad/kernels/backend.h"
#include "bytegrad/kernels/dtype_dispatch.h"

namespace bytegrad::cpu {

// ------------------------------------------------------------------------------------ element types

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;

template <typename T>
inline constexpr bool is_float_like_v = std::is_floating_point_v<T> || is_reduced_float_v<T>;

// The type arithmetic is done in: float for the 16-bit floats (as PyTorch's opmath), int64 for the narrow
// integers and bool (so bool + bool and uint8 * uint8 do not surprise), the type itself otherwise.
template <typename T>
using opmath_t =
    std::conditional_t<is_reduced_float_v<T>, float,
                       std::conditional_t<std::is_integral_v<T> && !std::is_same_v<T, int64_t>, int64_t, T>>;

// Converts between any two element types (the 16-bit floats go through float; bool is "nonzero").
template <typename To, typename From>
inline To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (is_reduced_float_v<From>) {
    return convert<To>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

// Calls f(TypeTag<T>{}) with T the C++ type of `dtype`.
template <typename F>
decltype(auto) dispatch_dtype(ScalarType dtype, F&& f) {
  return dispatch_element_type<Eigen::half, Eigen::bfloat16>(dtype, "cpu", std::forward<F>(f));
}

// Like dispatch_dtype for the four floating dtypes; the others throw, naming `op`.
template <typename F>
decltype(auto) dispatch_floating(ScalarType dtype, const char* op, F&& f) {
  return dispatch_floating_type<Eigen::half, Eigen::bfloat16>(dtype, "cpu", op, std::forward<F>(f));
}

// One element read as a double / written from a double (for the few places that are not hot).
inline double load_as_double(const void* p, ScalarType dtype) {
  return dispatch_dtype(dtype, [p](auto tag) {
    using T = typename decltype(tag)::type;
    return convert<double>(*static_cast<const T*>(p));
  });
}
inline void store_from_double(void* p, ScalarType dtype, double value) {
  dispatch_dtype(dtype, [p, value](auto tag) {
    using T = typename decltype(tag)::type;
    *static_cast<T*>(p) = convert<T>(value);
  });
}
inline void store_from_int64(void* p, ScalarType dtype, int64_t value) {
  dispatch_dtype(dtype, [p, value](auto tag) {
    using T = typename decltype(tag)::type;
    *static_cast<T*>(p) = convert<T>(value);
  });
}

// An int64 or int32 index element.
inline int64_t load_index(const char* p, ScalarType dtype) {
  if (dtype == ScalarType::int64) return *reinterpret_cast<const int64_t*>(p);
  if (dtype == ScalarType::int32) return *reinterpret_cast<const int32_t*>(p);
  throw std::invalid_argument(std::string("cpu backend: indices must be int64 or int32, got ") +
                              std::string(scalar_type_name(dtype)));
}

// ------------------------------------------------------------------------------------- strided loop

// N operands walked together over one shape. Strides are in elements; sizes and strides are coalesced.
template <size_t N>
struct LoopPlan {
  Shape sizes;  // outermost first; empty for a single element
  std::array<Shape, N> strides;
  bool empty = false;  // some dimension has size 0: nothing to do
};

// order: the dimensions in the order to walk them, outermost first (row-major when empty).
template <size_t N>
LoopPlan<N> plan_loop(const Shape& sizes, const std::array<const Shape*, N>& strides,
                      const std::vector<size_t>& order = {}) {
  LoopPlan<N> plan;
  for (size_t position = 0; position < sizes.size(); ++position) {
    const size_t d = order.empty() ? position : order[position];
    if (sizes[d] == 0) plan.empty = true;
    if (sizes[d] == 1) continue;  // walks nothing
    const bool mergeable = !plan.sizes.empty() && [&] {
      for (size_t k = 0; k < N; ++k)
        if (plan.strides[k].back() != (*strides[k])[d] * sizes[d]) return false;
      return true;
    }();
    if (mergeable) {
      plan.sizes.back() *= sizes[d];
      for (size_t k = 0; k < N; ++k) plan.strides[k].back() = (*strides[k])[d];
    } else {
      plan.sizes.push_back(sizes[d]);
      for (size_t k = 0; k < N; ++k) plan.strides[k].push_back((*strides[k])[d]);
    }
  }
  return plan;
}

// Calls row(ptrs, inner_strides, count) for every innermost run, in row-major order. ptrs[k] points at the
// run's first element of operand k; inner_strides are in elements.
template <size_t N, typename Row>
void for_each_row(const LoopPlan<N>& plan, std::array<char*, N> base, const std::array<size_t, N>& element_sizes,
                  Row&& row) {
  if (plan.empty) return;
  const size_t ndim = plan.sizes.size();
  std::array<int64_t, N> inner{};
  if (ndim == 0) {
    row(base, inner, int64_t{1});
    return;
  }
  for (size_t k = 0; k < N; ++k) inner[k] = plan.strides[k][ndim - 1];
  const int64_t count = plan.sizes[ndim - 1];
  Shape index(ndim, 0);
  std::array<char*, N> ptrs = base;
  while (true) {
    row(ptrs, inner, count);
    // Advance the odometer over the outer dimensions.
    size_t d = ndim - 1;
    while (true) {
      if (d == 0) return;
      --d;
      if (++index[d] < plan.sizes[d]) {
        for (size_t k = 0; k < N; ++k) ptrs[k] += plan.strides[k][d] * static_cast<int64_t>(element_sizes[k]);
        break;
      }
      for (size_t k = 0; k < N; ++k)
        ptrs[k] -= (plan.sizes[d] - 1) * plan.strides[k][d] * static_cast<int64_t>(element_sizes[k]);
      index[d] = 0;
    }
  }
}

// How elements are visited: in row-major order (kernels whose result depends on the order: arange,
// reductions), or in the first operand's memory order (elementwise kernels: a transposed output is then
// written, and its inputs read, along unit strides).
enum class WalkOrder { row_major, memory };

// The dimensions sorted by decreasing stride of `strides` (outermost first; ties keep their order).
inline std::vector<size_t> memory_order(const Shape& sizes, const Shape& strides) {
  std::vector<size_t> order(sizes.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  return order;
}

// Convenience: walk views of one shape (the first view's sizes).
template <size_t N, typename Row>
void for_each_row(const std::array<const StridedView*, N>& views, Row&& row, WalkOrder walk = WalkOrder::memory) {
  std::array<const Shape*, N> strides{};
  std::array<char*, N> base{};
  std::array<size_t, N> element_sizes{};
  for (size_t k = 0; k < N; ++k) {
    if (views[k]->sizes.size() != views[0]->sizes.size())
      throw std::logic_error("cpu backend: operands of one loop must have the same rank");
    strides[k] = &views[k]->strides;
    base[k] = static_cast<char*>(views[k]->data);
    element_sizes[k] = element_size(views[k]->dtype);
  }
  const std::vector<size_t> order =
      walk == WalkOrder::memory ? memory_order(views[0]->sizes, views[0]->strides) : std::vector<size_t>{};
  for_each_row(plan_loop<N>(views[0]->sizes, strides, order), base, element_sizes, std::forward<Row>(row));
}

// A view of one index along a dimension (the dimension removed).
inline StridedView select_view(const StridedView& v, int64_t dim, int64_t index) {
  StridedView out = v;
  out.data = static_cast<char*>(v.data) + index * v.strides[dim] * static_cast<int64_t>(element_size(v.dtype));
  out.sizes.erase(out.sizes.begin() + dim);
  out.strides.erase(out.strides.begin() + dim);
  return out;
}

// The view without dimension `dim` (its first index), used to walk "every position except along dim".
inline StridedView drop_dim(const StridedView& v, int64_t dim) { return select_view(v, dim, 0); }

// ---------------------------------------------------------------------- kernels (one file per idea)

#include "bytegrad/kernels/kernel_functions.h"  // the list both backends share, declared in bytegrad::cpu

void copy_from_host(const StridedView& dst, const void* host);
void copy_to_host(void* host, const StridedView& src);

// binary with PyTorch's common dtype of a and b.
inline void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha) {
  binary(op, out, a, b, alpha, promote_types(a.dtype, b.dtype));
}

void gemm(const GemmArgs& args);

// cpu_layer_norm.cpp (backend.h's layer_norm_backward, without the scratch: cpu sums in one pass anyway)
void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials, const StridedView* dbias_partials,
                         const StridedView& dy, const StridedView& x, const StridedView& mean, const StridedView& rstd,
                         const StridedView* weight);

// cpu_attention.cpp
void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                        const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                        const StridedView& lse, double scale, bool is_causal, const AttentionExtras& extras);

}  // namespace bytegrad::cpu
