// Elementwise kernels: unary, binary (tensor-tensor and tensor-scalar), where and masked_fill. Arithmetic
// happens in opmath_t<T> (float for the 16-bit floats); what each op computes is kernels/pointwise_math.h,
// shared with the CUDA kernels.
#include <stdexcept>

#include "bytegrad/kernels/cpu/cpu_kernels.h"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cpu {

namespace {

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

// Calls apply(functor) with the functor for `op` fixed at compile time (the switch is the op table's
// rows), so each loop inlines its op's math from kernels/pointwise_math.h.
template <typename M, typename Apply>
void with_unary_functor(UnaryOp op, Apply&& apply) {
  switch (op) {
#define BYTEGRAD_UNARY_CASE(name, ...) \
  case UnaryOp::name: return apply([](M x) { return pointwise::unary<M>(UnaryOp::name, x); });
    BYTEGRAD_UNARY_OPS(BYTEGRAD_UNARY_CASE)
#undef BYTEGRAD_UNARY_CASE
  }
  throw std::logic_error("cpu unary: unknown op");
}

template <typename M, typename Apply>
void with_binary_functor(BinaryOp op, M alpha, Apply&& apply) {
  switch (op) {
#define BYTEGRAD_BINARY_CASE(name, ...) \
  case BinaryOp::name: return apply([alpha](M x, M y) { return pointwise::binary<M>(BinaryOp::name, x, y, alpha); });
    BYTEGRAD_BINARY_OPS(BYTEGRAD_BINARY_CASE)
#undef BYTEGRAD_BINARY_CASE
  }
  throw std::logic_error("cpu binary: unknown op");
}

template <typename M, typename Apply>
void with_scalar_functor(BinaryOp op, M scalar, double exact, bool scalar_first, Apply&& apply) {
  switch (op) {
#define BYTEGRAD_SCALAR_CASE(name, ...)                                                         \
  case BinaryOp::name:                                                                          \
    return apply([=](M x) {                                                                     \
      return pointwise::binary_with_scalar<M>(BinaryOp::name, x, scalar, exact, scalar_first); \
    });
    BYTEGRAD_BINARY_OPS(BYTEGRAD_SCALAR_CASE)
#undef BYTEGRAD_SCALAR_CASE
  }
  throw std::logic_error("cpu binary_scalar: unknown op");
}

}  // namespace

// The output dtype is the input's, or bool for to_bool ops (logical_not, comparisons).
void unary(UnaryOp op, const StridedView& out, const StridedView& in) {
  if (out.dtype != in.dtype && out.dtype != ScalarType::bool_)
    throw std::invalid_argument("cpu unary: input and output dtypes differ");
  dispatch_dtype(in.dtype, [&](auto in_tag) {
    using T = typename decltype(in_tag)::type;
    using M = opmath_t<T>;
    if (out.dtype == ScalarType::bool_ && in.dtype != ScalarType::bool_)
      with_unary_functor<M>(op, [&](auto f) { unary_loop<T, bool>(out, in, f); });
    else
      with_unary_functor<M>(op, [&](auto f) { unary_loop<T, T>(out, in, f); });
  });
}

void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha) {
  if (a.dtype != b.dtype) throw std::invalid_argument("cpu binary: operand dtypes differ");
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if (has_bool_output(op)) with_binary_functor<M>(op, M(1), [&](auto f) { binary_loop<T, bool>(out, a, b, f); });
    else with_binary_functor<M>(op, convert<M>(alpha), [&](auto f) { binary_loop<T, T>(out, a, b, f); });
  });
}

void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar, bool scalar_first) {
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const M typed = convert<M>(scalar);
    if (has_bool_output(op))
      with_scalar_functor<M>(op, typed, scalar, scalar_first, [&](auto f) { unary_loop<T, bool>(out, a, f); });
    else
      with_scalar_functor<M>(op, typed, scalar, scalar_first, [&](auto f) { unary_loop<T, T>(out, a, f); });
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
