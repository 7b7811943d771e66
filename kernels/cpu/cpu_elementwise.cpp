// Elementwise kernels: unary, binary (tensor-tensor and tensor-scalar), where and masked_fill.
// Arithmetic happens in opmath_t<T> (float for the 16-bit floats); each op is a small functor, and one
// table each (with_arithmetic_functor, with_predicate) serves both the tensor and the scalar forms.
#include <cmath>
#include <numbers>

#include "kernels/cpu/cpu_kernels.h"

namespace bytegrad::cpu {

namespace {

// Transcendental math on integer inputs goes through double.
template <typename M>
using float_math_t = std::conditional_t<std::is_floating_point_v<M>, M, double>;

template <typename M>
bool is_nan(M x) {
  if constexpr (std::is_floating_point_v<M>) return std::isnan(x);
  else return false;
}

template <typename M>
M gelu_of(M x) {
  using F = float_math_t<M>;
  const F fx = static_cast<F>(x);
  return static_cast<M>(F(0.5) * fx * (F(1) + std::erf(fx * F(std::numbers::sqrt2 / 2))));
}

template <typename M>
M gelu_derivative(M x) {
  using F = float_math_t<M>;
  const F fx = static_cast<F>(x);
  const F cdf = F(0.5) * (F(1) + std::erf(fx * F(std::numbers::sqrt2 / 2)));
  const F pdf = std::exp(F(-0.5) * fx * fx) * F(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  return static_cast<M>(cdf + fx * pdf);
}

// Integer division that cannot trap: x / 0 gives 0 (PyTorch's CPU kernel raises; CUDA gives garbage).
template <typename M>
M safe_divide(M x, M y) {
  if constexpr (std::is_integral_v<M>) {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<M>) {
      if (y == -1) return static_cast<M>(0 - static_cast<std::make_unsigned_t<M>>(x));  // no overflow trap
    }
    return x / y;
  } else {
    return x / y;
  }
}

template <typename M>
M power(M x, M y) {
  using F = float_math_t<M>;
  return static_cast<M>(std::pow(static_cast<F>(x), static_cast<F>(y)));
}

// Calls apply(functor(M, M) -> M) for an arithmetic `op` (alpha scales add/sub's second operand).
template <typename M, typename Apply>
void with_arithmetic_functor(BinaryOp op, double alpha, Apply&& apply) {
  const M a = static_cast<M>(alpha);
  const bool unit_alpha = alpha == 1.0;
  switch (op) {
    case BinaryOp::add:
      if (unit_alpha) return apply([](M x, M y) { return M(x + y); });
      return apply([a](M x, M y) { return M(x + a * y); });
    case BinaryOp::sub:
      if (unit_alpha) return apply([](M x, M y) { return M(x - y); });
      return apply([a](M x, M y) { return M(x - a * y); });
    case BinaryOp::mul: return apply([](M x, M y) { return M(x * y); });
    case BinaryOp::div: return apply([](M x, M y) { return safe_divide(x, y); });
    case BinaryOp::pow: return apply([](M x, M y) { return power(x, y); });
    case BinaryOp::maximum: return apply([](M x, M y) { return (is_nan(x) || x > y) ? x : y; });
    case BinaryOp::minimum: return apply([](M x, M y) { return (is_nan(x) || x < y) ? x : y; });
    // PyTorch's threshold_backward(grad, result, 0): the gradient passes where the output is positive.
    case BinaryOp::relu_backward: return apply([](M g, M y) { return y > M(0) ? g : M(0); });
    case BinaryOp::sigmoid_backward: return apply([](M g, M y) { return M(g * (M(1) - y) * y); });
    case BinaryOp::tanh_backward: return apply([](M g, M y) { return M(g * (M(1) - y * y)); });
    case BinaryOp::gelu_backward: return apply([](M g, M x) { return M(g * gelu_derivative(x)); });
    default: throw std::logic_error("cpu binary: not an arithmetic op");
  }
}

// Calls apply(predicate(X, X) -> bool) for a comparison or logical `op` (X is whatever the caller passes).
template <typename Apply>
void with_predicate(BinaryOp op, Apply&& apply) {
  switch (op) {
    case BinaryOp::eq: return apply([](auto x, auto y) { return x == y; });
    case BinaryOp::ne: return apply([](auto x, auto y) { return x != y; });
    case BinaryOp::lt: return apply([](auto x, auto y) { return x < y; });
    case BinaryOp::le: return apply([](auto x, auto y) { return x <= y; });
    case BinaryOp::gt: return apply([](auto x, auto y) { return x > y; });
    case BinaryOp::ge: return apply([](auto x, auto y) { return x >= y; });
    case BinaryOp::logical_and: return apply([](auto x, auto y) { return x != 0 && y != 0; });
    case BinaryOp::logical_or: return apply([](auto x, auto y) { return x != 0 || y != 0; });
    default: throw std::logic_error("cpu binary: not a comparison");
  }
}

// out[i] = f(in[i]) with T inputs computed in opmath, stored as Out.
template <typename T, typename Out, typename F>
void unary_loop(const StridedView& out, const StridedView& in, F f) {
  using M = opmath_t<T>;
  for_each_row<2>({&out, &in}, [&f](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    if (s[0] == 1 && s[1] == 1) {  // the contiguous fast path the compiler can vectorize
      for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(convert<M>(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = convert<Out>(f(convert<M>(x[i * s[1]])));
    }
  });
}

template <typename T, typename Out, typename F>
void binary_loop(const StridedView& out, const StridedView& a, const StridedView& b, F f) {
  using M = opmath_t<T>;
  for_each_row<3>({&out, &a, &b}, [&f](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(convert<M>(x[i]), convert<M>(y[i])));
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {  // tensor with a broadcast row
      const M yv = convert<M>(y[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(convert<M>(x[i]), yv));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = convert<Out>(f(convert<M>(x[i * s[1]]), convert<M>(y[i * s[2]])));
    }
  });
}

template <typename T>
void unary_typed(UnaryOp op, const StridedView& out, const StridedView& in) {
  using M = opmath_t<T>;
  using F = float_math_t<M>;
  auto run = [&](auto f) { unary_loop<T, T>(out, in, f); };
  switch (op) {
    case UnaryOp::neg: return run([](M x) { return M(-x); });
    case UnaryOp::abs: return run([](M x) { return x < M(0) ? M(-x) : x; });
    case UnaryOp::exp: return run([](M x) { return static_cast<M>(std::exp(static_cast<F>(x))); });
    case UnaryOp::log: return run([](M x) { return static_cast<M>(std::log(static_cast<F>(x))); });
    case UnaryOp::sqrt: return run([](M x) { return static_cast<M>(std::sqrt(static_cast<F>(x))); });
    case UnaryOp::relu: return run([](M x) { return x < M(0) ? M(0) : x; });  // NaN passes through
    case UnaryOp::sigmoid:
      return run([](M x) { return static_cast<M>(F(1) / (F(1) + std::exp(-static_cast<F>(x)))); });
    case UnaryOp::tanh: return run([](M x) { return static_cast<M>(std::tanh(static_cast<F>(x))); });
    case UnaryOp::gelu: return run([](M x) { return gelu_of(x); });
    case UnaryOp::logical_not: break;  // handled by the caller (bool output)
  }
  throw std::logic_error("cpu unary: unknown op");
}

}  // namespace

void unary(UnaryOp op, const StridedView& out, const StridedView& in) {
  if (op == UnaryOp::logical_not) {
    // The one unary op whose output dtype (bool) may differ from its input's.
    dispatch_dtype(in.dtype, [&](auto in_tag) {
      using T = typename decltype(in_tag)::type;
      dispatch_dtype(out.dtype, [&](auto out_tag) {
        using Out = typename decltype(out_tag)::type;
        unary_loop<T, Out>(out, in, [](opmath_t<T> x) { return x == opmath_t<T>(0); });
      });
    });
    return;
  }
  if (out.dtype != in.dtype) throw std::invalid_argument("cpu unary: input and output dtypes differ");
  dispatch_dtype(in.dtype, [&](auto tag) { unary_typed<typename decltype(tag)::type>(op, out, in); });
}

void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha) {
  if (a.dtype != b.dtype) throw std::invalid_argument("cpu binary: operand dtypes differ");
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (has_bool_output(op)) with_predicate(op, [&](auto f) { binary_loop<T, bool>(out, a, b, f); });
    else with_arithmetic_functor<M>(op, alpha, [&](auto f) { binary_loop<T, T>(out, a, b, f); });
  });
}

void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar, bool scalar_first) {
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (has_bool_output(op)) {
      // Compared in double, so `int_tensor > 0.5` means what it says.
      with_predicate(op, [&](auto f) {
        unary_loop<T, bool>(out, a, [&](M x) {
          return scalar_first ? f(scalar, static_cast<double>(x)) : f(static_cast<double>(x), scalar);
        });
      });
      return;
    }
    // Arithmetic adopts the tensor's type: the scalar is converted to it (an int tensor + 0.5 adds 0).
    const M s = convert<M>(scalar);
    with_arithmetic_functor<M>(op, 1.0, [&](auto f) {
      unary_loop<T, T>(out, a, [&](M x) { return scalar_first ? f(s, x) : f(x, s); });
    });
  });
}

void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) {
  if (cond.dtype != ScalarType::bool_) throw std::invalid_argument("cpu where: condition must be bool");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_row<4>({&out, &cond, &a, &b}, [](std::array<char*, 4> p, const std::array<int64_t, 4>& s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
    });
  });
}

void masked_fill(const StridedView& out, const StridedView& mask, double value) {
  if (mask.dtype != ScalarType::bool_) throw std::invalid_argument("cpu masked_fill: mask must be bool");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T typed = convert<T>(value);
    for_each_row<2>({&out, &mask}, [typed](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* m = reinterpret_cast<const bool*>(p[1]);
      for (int64_t i = 0; i < n; ++i)
        if (m[i * s[1]]) o[i * s[0]] = typed;
    });
  });
}

}  // namespace bytegrad::cpu
