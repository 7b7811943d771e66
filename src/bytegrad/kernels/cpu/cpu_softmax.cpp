// Softmax and log-softmax along one dimension, forward and backward. Each slice along `dim` is processed
// in double (max-subtracted, so large inputs do not overflow).
#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/kernels/cpu/cpu_kernels.h"
#include "bytegrad/kernels/operand_checks.h"

namespace bytegrad::cpu {

namespace {

// Calls slice(ptrs, strides_along_dim) for every position of the other dimensions. Views share sizes.
template <size_t N, typename Slice>
void for_each_slice(const std::array<const StridedView*, N>& views, int64_t dim, Slice&& slice) {
  std::array<StridedView, N> rest;
  std::array<const StridedView*, N> rest_ptrs{};
  std::array<int64_t, N> along{};
  for (size_t k = 0; k < N; ++k) {
    rest[k] = drop_dim(*views[k], dim);
    rest_ptrs[k] = &rest[k];
    along[k] = views[k]->strides[static_cast<size_t>(dim)];
  }
  for_each_row<N>(rest_ptrs, [&](std::array<char*, N> p, const std::array<int64_t, N>& s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      std::array<char*, N> at{};
      for (size_t k = 0; k < N; ++k) at[k] = p[k] + i * s[k] * static_cast<int64_t>(element_size(views[k]->dtype));
      slice(at, along);
    }
  });
}

}  // namespace

namespace {

// T: the output's element type; In: the input's (T's, or a 16-bit float into a float32 output).
template <typename T, typename In>
void softmax_typed(const StridedView& out, const StridedView& in, int64_t dim, bool log) {
  const int64_t length = in.sizes[static_cast<size_t>(dim)];
  for_each_slice<2>({&out, &in}, dim, [&](std::array<char*, 2> p, const std::array<int64_t, 2>& s) {
    T* o = reinterpret_cast<T*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    double max_value = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < length; ++i) max_value = std::max(max_value, convert<double>(x[i * s[1]]));
    double total = 0;
    for (int64_t i = 0; i < length; ++i) total += std::exp(convert<double>(x[i * s[1]]) - max_value);
    if (log) {
      const double shift = max_value + std::log(total);
      for (int64_t i = 0; i < length; ++i) o[i * s[0]] = convert<T>(convert<double>(x[i * s[1]]) - shift);
    } else {
      for (int64_t i = 0; i < length; ++i)
        o[i * s[0]] = convert<T>(std::exp(convert<double>(x[i * s[1]]) - max_value) / total);
    }
  });
}

}  // namespace

void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) {
  const bool widening = softmax_reads_16_bit_input(out, in, "cpu");
  if (in.sizes.empty()) {
    // One slice of one element, as PyTorch's kernel runs it: x - max(x) is 0, or NaN for an infinite or NaN
    // x, so the softmax is 1 (log: 0) or NaN.
    const double shifted = load_as_double(in.data, in.dtype) - load_as_double(in.data, in.dtype);
    store_from_double(out.data, out.dtype,
                      log ? shifted - std::log(std::exp(shifted)) : std::exp(shifted) / std::exp(shifted));
    return;
  }
  if (in.sizes[static_cast<size_t>(dim)] == 0) return;
  dispatch_dtype(in.dtype, [&](auto tag) {
    using In = typename decltype(tag)::type;
    if constexpr (is_reduced_float_v<In>) {
      if (widening) return softmax_typed<float, In>(out, in, dim, log);
    }
    softmax_typed<In, In>(out, in, dim, log);
  });
}

namespace {

// float32, float16 or bfloat16 (softmax_backward_dtypes has checked), as its element type's tag.
template <typename F>
void dispatch_float_or_half(ScalarType dtype, F&& f) {
  if (dtype == ScalarType::float16) f(TypeTag<Eigen::half>{});
  else if (dtype == ScalarType::bfloat16) f(TypeTag<Eigen::bfloat16>{});
  else f(TypeTag<float>{});
}

// Gi: grad_in's element type; Go: grad_out's; T: output's.
template <typename Gi, typename Go, typename T>
void softmax_backward_typed(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output,
                            int64_t dim, bool log) {
  const int64_t length = grad_in.sizes[static_cast<size_t>(dim)];
  for_each_slice<3>({&grad_in, &grad_out, &output}, dim, [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s) {
    Gi* gi = reinterpret_cast<Gi*>(p[0]);
    const Go* g = reinterpret_cast<const Go*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    double total = 0;
    if (log) {
      // d/dx log_softmax: g - exp(y) * sum(g)
      for (int64_t i = 0; i < length; ++i) total += convert<double>(g[i * s[1]]);
      for (int64_t i = 0; i < length; ++i)
        gi[i * s[0]] = convert<Gi>(convert<double>(g[i * s[1]]) - std::exp(convert<double>(y[i * s[2]])) * total);
    } else {
      // d/dx softmax: y * (g - sum(g * y))
      for (int64_t i = 0; i < length; ++i) total += convert<double>(g[i * s[1]]) * convert<double>(y[i * s[2]]);
      for (int64_t i = 0; i < length; ++i)
        gi[i * s[0]] = convert<Gi>(convert<double>(y[i * s[2]]) * (convert<double>(g[i * s[1]]) - total));
    }
  });
}

}  // namespace

void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim,
                      bool log) {
  if (grad_in.sizes.empty()) {  // a 0-d (log-)softmax is constant: zero gradient
    store_from_double(grad_in.data, grad_in.dtype, 0.0);
    return;
  }
  const SoftmaxBackwardDtypes dtypes = softmax_backward_dtypes(grad_in, grad_out, output, "cpu");
  if (dtypes.half_grad_in || dtypes.half_grad_out) {  // float32 operands with a 16-bit gradient on either side
    dispatch_float_or_half(grad_in.dtype, [&](auto gi_tag) {
      dispatch_float_or_half(grad_out.dtype, [&](auto go_tag) {
        softmax_backward_typed<typename decltype(gi_tag)::type, typename decltype(go_tag)::type, float>(
            grad_in, grad_out, output, dim, log);
      });
    });
    return;
  }
  dispatch_dtype(grad_in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_typed<T, T, T>(grad_in, grad_out, output, dim, log);
  });
}

}  // namespace bytegrad::cpu
