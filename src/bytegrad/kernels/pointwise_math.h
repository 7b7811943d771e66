// What each pointwise op computes on one element, shared by the CPU kernels (cpu and sim) and the CUDA
// kernels: one switch per kind of op, host and device functions, in the op's math type M (float for the
// 16-bit floats, as PyTorch's opmath_t; the integer type itself for integers). Formulas follow PyTorch's
// CUDA kernels, so both backends agree with it to the rounding. The ops are the op table's unary and
// binary rows (core/op_table.h); a new row gets its case here.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "bytegrad/core/op_table.h"
#include "bytegrad/kernels/host_device.h"

namespace bytegrad::pointwise {

// float and double overloads of the C math functions: the same names exist in host libm and CUDA's device
// library, so one expression compiles on both (float ones call the full-precision *f variants). Each row
// defines m_<name> from the C function c_name (float: c_name##f).
#define BYTEGRAD_FLOAT_AND_DOUBLE(name, c_name)                           \
  BYTEGRAD_HOST_DEVICE float m_##name(float x) { return ::c_name##f(x); } \
  BYTEGRAD_HOST_DEVICE double m_##name(double x) { return ::c_name(x); }
BYTEGRAD_FLOAT_AND_DOUBLE(exp, exp)
BYTEGRAD_FLOAT_AND_DOUBLE(expm1, expm1)
BYTEGRAD_FLOAT_AND_DOUBLE(log, log)
BYTEGRAD_FLOAT_AND_DOUBLE(sqrt, sqrt)
BYTEGRAD_FLOAT_AND_DOUBLE(tanh, tanh)
BYTEGRAD_FLOAT_AND_DOUBLE(erf, erf)
BYTEGRAD_FLOAT_AND_DOUBLE(abs, fabs)
BYTEGRAD_FLOAT_AND_DOUBLE(cos, cos)
BYTEGRAD_FLOAT_AND_DOUBLE(sin, sin)
BYTEGRAD_FLOAT_AND_DOUBLE(log1p, log1p)
#undef BYTEGRAD_FLOAT_AND_DOUBLE
// PyTorch's CUDA rsqrt calls the device's rsqrt (rsqrtf: within 2 ulp of 1/sqrt); the host has none, and
// computes 1 / sqrt as PyTorch's CPU kernel does.
#ifdef __CUDA_ARCH__
BYTEGRAD_HOST_DEVICE float m_rsqrt(float x) { return ::rsqrtf(x); }
BYTEGRAD_HOST_DEVICE double m_rsqrt(double x) { return ::rsqrt(x); }
#else
BYTEGRAD_HOST_DEVICE float m_rsqrt(float x) { return 1.0F / ::sqrtf(x); }
BYTEGRAD_HOST_DEVICE double m_rsqrt(double x) { return 1.0 / ::sqrt(x); }
#endif
BYTEGRAD_HOST_DEVICE float m_pow(float x, float y) { return ::powf(x, y); }
BYTEGRAD_HOST_DEVICE double m_pow(double x, double y) { return ::pow(x, y); }

// Transcendental ops on integer tensors compute in double (the op layer refuses most of them).
template <typename M>
using real_t = std::conditional_t<std::is_floating_point_v<M>, M, double>;

template <typename M>
BYTEGRAD_HOST_DEVICE bool is_nan(M x) {
  if constexpr (std::is_floating_point_v<M>) return x != x;  // NOLINT(misc-redundant-expression): NaN test
  else return false;
}

// Signed integer +, - and * wrap around in two's complement, as PyTorch's integer kernels give in practice
// (int64 ** 40 and products that overflow); C++ leaves signed overflow undefined (UBSan reports it), so
// they are computed in the unsigned type. Other types compute as written.
template <typename M>
BYTEGRAD_HOST_DEVICE M wrapping_add(M a, M b) {
  if constexpr (std::is_integral_v<M> && std::is_signed_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<M>(a + b);
  }
}
template <typename M>
BYTEGRAD_HOST_DEVICE M wrapping_sub(M a, M b) {
  if constexpr (std::is_integral_v<M> && std::is_signed_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<M>(a - b);
  }
}
template <typename M>
BYTEGRAD_HOST_DEVICE M wrapping_mul(M a, M b) {
  if constexpr (std::is_integral_v<M> && std::is_signed_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<M>(a * b);
  }
}

// Integer power by squaring; negative exponents give 1/base^e truncated (0 unless |base| == 1).
template <typename I>
BYTEGRAD_HOST_DEVICE I integer_pow(I base, I exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? I(-1) : I(1);
    return 0;
  }
  I result = 1;
  while (exponent) {
    if (exponent & 1) result = wrapping_mul(result, base);
    exponent >>= 1;
    base = wrapping_mul(base, base);
  }
  return result;
}

// Integer division that cannot trap: x / 0 gives 0 (PyTorch's CPU kernel raises), and MIN / -1 wraps.
template <typename M>
BYTEGRAD_HOST_DEVICE M safe_divide(M x, M y) {
  if constexpr (std::is_integral_v<M>) {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<M>) {
      if (y == -1) return static_cast<M>(0 - static_cast<std::make_unsigned_t<M>>(x));
    }
    return x / y;
  } else {
    return x / y;
  }
}

template <typename M>
BYTEGRAD_HOST_DEVICE M gelu_derivative(M x) {
  using R = real_t<M>;
  constexpr R kSqrt1_2 = static_cast<R>(0.70710678118654752440);
  constexpr R kInvSqrt2Pi = static_cast<R>(0.39894228040143267794);
  const R r = static_cast<R>(x);
  const R cdf = R(0.5) * (R(1) + m_erf(r * kSqrt1_2));
  const R pdf = m_exp(R(-0.5) * r * r) * kInvSqrt2Pi;
  return static_cast<M>(cdf + r * pdf);
}

// The value of a unary op (logical_not: 1 or 0, which the kernel stores as bool).
template <typename M>
BYTEGRAD_HOST_DEVICE M unary(UnaryOp op, M x) {
  using R = real_t<M>;
  const R r = static_cast<R>(x);
  switch (op) {
    case UnaryOp::neg: return wrapping_sub(M(0), x);
    case UnaryOp::abs:
      if constexpr (std::is_floating_point_v<M>) return m_abs(x);
      else return x < M(0) ? wrapping_sub(M(0), x) : x;
    case UnaryOp::exp: return static_cast<M>(m_exp(r));
    case UnaryOp::expm1: return static_cast<M>(m_expm1(r));  // exp(x) - 1, exact near 0
    case UnaryOp::log: return static_cast<M>(m_log(r));
    case UnaryOp::sqrt: return static_cast<M>(m_sqrt(r));
    case UnaryOp::reciprocal: return static_cast<M>(R(1) / r);  // 1 / 0 = inf, as PyTorch's kernel
    case UnaryOp::rsqrt: return static_cast<M>(m_rsqrt(r));     // 1 / sqrt(x): inf at 0, NaN below
    case UnaryOp::cos: return static_cast<M>(m_cos(r));
    case UnaryOp::sin: return static_cast<M>(m_sin(r));
    case UnaryOp::log_sigmoid:  // PyTorch's CUDA kernel: min(x, 0) - log1p(exp(-|x|)), stable for large |x|
      return static_cast<M>((r < R(0) ? r : R(0)) - m_log1p(m_exp(-m_abs(r))));
    case UnaryOp::relu: return x <= M(0) ? M(0) : x;  // NaN stays NaN, as clamp_min(0)
    case UnaryOp::sigmoid: return static_cast<M>(R(1) / (R(1) + m_exp(-r)));
    case UnaryOp::tanh: return static_cast<M>(m_tanh(r));
    case UnaryOp::gelu: return static_cast<M>(r * R(0.5) * (R(1) + m_erf(r * static_cast<R>(0.70710678118654752440))));
    case UnaryOp::silu: return static_cast<M>(r / (R(1) + m_exp(-r)));  // x * sigmoid(x), as PyTorch's kernel
    case UnaryOp::logical_not: return static_cast<M>(x == M(0));
  }
  return x;
}

// The value of a binary op on a and b (alpha scales add/sub's b; comparisons give 1 or 0).
template <typename M>
BYTEGRAD_HOST_DEVICE M binary(BinaryOp op, M a, M b, M alpha) {
  switch (op) {
    case BinaryOp::add: return wrapping_add(a, wrapping_mul(alpha, b));
    case BinaryOp::sub: return wrapping_sub(a, wrapping_mul(alpha, b));
    case BinaryOp::mul: return wrapping_mul(a, b);
    case BinaryOp::div: return safe_divide(a, b);
    case BinaryOp::pow:
      if constexpr (std::is_floating_point_v<M>) return m_pow(a, b);
      else return integer_pow(a, b);
    case BinaryOp::maximum: return (is_nan(a) || a > b) ? a : b;  // NaN-propagating, as torch.maximum
    case BinaryOp::minimum: return (is_nan(a) || a < b) ? a : b;
    case BinaryOp::eq: return static_cast<M>(a == b);
    case BinaryOp::ne: return static_cast<M>(a != b);
    case BinaryOp::lt: return static_cast<M>(a < b);
    case BinaryOp::le: return static_cast<M>(a <= b);
    case BinaryOp::gt: return static_cast<M>(a > b);
    case BinaryOp::ge: return static_cast<M>(a >= b);
    case BinaryOp::logical_and: return static_cast<M>(a != M(0) && b != M(0));
    case BinaryOp::logical_or: return static_cast<M>(a != M(0) || b != M(0));
    // a: the incoming gradient; b: the saved tensor.
    case BinaryOp::relu_backward: return b <= M(0) ? M(0) : a;  // threshold_backward(grad, result, 0)
    case BinaryOp::sigmoid_backward: return static_cast<M>(a * (M(1) - b) * b);
    case BinaryOp::tanh_backward: return static_cast<M>(a * (M(1) - b * b));
    case BinaryOp::gelu_backward: return static_cast<M>(a * gelu_derivative(b));
    case BinaryOp::leaky_relu_backward: return b > M(0) ? a : static_cast<M>(a * alpha);  // leaky_relu too (b = a)
    case BinaryOp::silu_backward: {  // PyTorch's silu_backward: grad * s * (1 + x * (1 - s)), s = sigmoid(x)
      using R = real_t<M>;
      const R x = static_cast<R>(b);
      const R s = R(1) / (R(1) + m_exp(-x));
      return static_cast<M>(static_cast<R>(a) * s * (R(1) + x * (R(1) - s)));
    }
  }
  return a;
}

// x ** exponent for a scalar exponent, with PyTorch's special cases (exact squares and roots instead of
// pow), so torch.pow(x, 2) and x * x agree.
template <typename M>
BYTEGRAD_HOST_DEVICE M pow_scalar_exponent(M x, M exponent) {
  if constexpr (std::is_floating_point_v<M>) {
    if (exponent == M(0.5)) return m_sqrt(x);
    if (exponent == M(2)) return x * x;
    if (exponent == M(3)) return x * x * x;
    if (exponent == M(-0.5)) return M(1) / m_sqrt(x);
    if (exponent == M(-1)) return M(1) / x;
    if (exponent == M(-2)) return M(1) / (x * x);
    return m_pow(x, exponent);
  } else {
    return integer_pow(x, exponent);
  }
}

// A binary op with a Python-number operand: `scalar` converted to M (the op layer passes a tensor of the
// type computed in: int_tensor + 0.5 arrives as float32), `exact` the number itself (comparisons use it, so int_tensor
// > 0.5 means what it says). PyTorch's scalar fast paths: pow through pow_scalar_exponent, and floating division by a
// scalar through its reciprocal.
template <typename M>
BYTEGRAD_HOST_DEVICE M binary_with_scalar(BinaryOp op, M x, M scalar, double exact, bool scalar_first) {
  switch (op) {
    case BinaryOp::eq:
    case BinaryOp::ne:
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
    case BinaryOp::logical_and:
    case BinaryOp::logical_or: {
      const double v = static_cast<double>(x);
      return static_cast<M>(scalar_first ? binary<double>(op, exact, v, 1.0) : binary<double>(op, v, exact, 1.0));
    }
    default: break;
  }
  if (scalar_first) return binary<M>(op, scalar, x, M(1));
  if (op == BinaryOp::pow) return pow_scalar_exponent<M>(x, scalar);
  if constexpr (std::is_floating_point_v<M>) {
    if (op == BinaryOp::div) return x * (M(1) / scalar);
  }
  return binary<M>(op, x, scalar, M(1));
}

}  // namespace bytegrad::pointwise
