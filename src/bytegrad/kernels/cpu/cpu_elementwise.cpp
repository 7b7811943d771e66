// Elementwise kernels: unary, binary (tensor-tensor and tensor-scalar), where and masked_fill. Arithmetic
// happens in opmath_t<T> (float for the 16-bit floats); what each op computes is kernels/pointwise_math.h,
// shared with the CUDA kernels.
#include <stdexcept>
#include <string>
#include <type_traits>

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

// One element of a runtime dtype, converted to C (the mixed-dtype path: one switch per element, no scratch).
template <typename C>
inline C load_as(const char* p, ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float32: return convert<C>(*reinterpret_cast<const float*>(p));
    case ScalarType::float64: return convert<C>(*reinterpret_cast<const double*>(p));
    case ScalarType::float16: return convert<C>(*reinterpret_cast<const Eigen::half*>(p));
    case ScalarType::bfloat16: return convert<C>(*reinterpret_cast<const Eigen::bfloat16*>(p));
    case ScalarType::int64: return convert<C>(*reinterpret_cast<const int64_t*>(p));
    case ScalarType::int32: return convert<C>(*reinterpret_cast<const int32_t*>(p));
    case ScalarType::uint8: return convert<C>(*reinterpret_cast<const uint8_t*>(p));
    case ScalarType::bool_: return convert<C>(*reinterpret_cast<const bool*>(p));
  }
  throw std::logic_error("cpu backend: unknown dtype");
}

// A C value stored into an element of a runtime dtype.
template <typename C>
inline void store_as(char* p, ScalarType dtype, C value) {
  switch (dtype) {
    case ScalarType::float32: *reinterpret_cast<float*>(p) = convert<float>(value); return;
    case ScalarType::float64: *reinterpret_cast<double*>(p) = convert<double>(value); return;
    case ScalarType::float16: *reinterpret_cast<Eigen::half*>(p) = convert<Eigen::half>(value); return;
    case ScalarType::bfloat16: *reinterpret_cast<Eigen::bfloat16*>(p) = convert<Eigen::bfloat16>(value); return;
    case ScalarType::int64: *reinterpret_cast<int64_t*>(p) = convert<int64_t>(value); return;
    case ScalarType::int32: *reinterpret_cast<int32_t*>(p) = convert<int32_t>(value); return;
    case ScalarType::uint8: *reinterpret_cast<uint8_t*>(p) = convert<uint8_t>(value); return;
    case ScalarType::bool_: *reinterpret_cast<bool*>(p) = convert<bool>(value); return;
  }
  throw std::logic_error("cpu backend: unknown dtype");
}

// The mixed-dtype binary loop (PyTorch's TensorIterator with a common dtype C on CUDA): each operand is
// read in its own dtype and converted to C, the op runs in opmath_t<C>, and the result is stored as bool
// (comparisons, logical ops) or converted to C and then to out's dtype. Element by element, so out may
// alias an operand exactly (in-place ops).
template <typename C, typename F>
void mixed_binary_loop(const StridedView& out, const StridedView& a, const StridedView& b, bool bool_output, F f) {
  using M = opmath_t<C>;
  const ScalarType out_type = out.dtype, a_type = a.dtype, b_type = b.dtype;
  const int64_t out_size = static_cast<int64_t>(element_size(out_type));
  const int64_t a_size = static_cast<int64_t>(element_size(a_type));
  const int64_t b_size = static_cast<int64_t>(element_size(b_type));
  for_each_row<3>({&out, &a, &b}, [&](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const M x = convert<M>(load_as<C>(p[1] + i * s[1] * a_size, a_type));
      const M y = convert<M>(load_as<C>(p[2] + i * s[2] * b_size, b_type));
      const M r = f(x, y);
      char* o = p[0] + i * s[0] * out_size;
      if (bool_output) *reinterpret_cast<bool*>(o) = convert<bool>(r);
      else store_as<C>(o, out_type, convert<C>(r));
    }
  });
}

// Whether a row's loops exist for math type M: the op layer refuses integer and bool tensors for the
// `floating` rows (core/op_table.h), so their loops are instantiated for the floating types only. With the
// output dtype also fixed per row (bool for `to_bool` rows), this keeps the file's loops to those that can
// run: a third as many, which is minutes less in every build, sanitizer build and clang-tidy run.
template <typename M>
constexpr bool rule_admits(DtypeRule rule) {
  return rule != DtypeRule::floating || std::is_floating_point_v<M>;
}

// A floating row reached with an integer or bool tensor: the op layer should have refused it.
[[noreturn]] void no_kernel_for_dtype(const char* kind, OpId op) {
  throw std::logic_error(std::string("cpu ") + kind + ": " + std::string(op_name(op)) +
                         " has no kernel for integer or bool tensors");
}

// Calls apply(functor, bool_output) with the functor for `op` fixed at compile time (the switch is the op
// table's rows), so each loop inlines its op's math from kernels/pointwise_math.h; bool_output is
// std::true_type for the rows whose result is bool.
template <typename M, typename Apply>
void with_unary_functor(UnaryOp op, Apply&& apply) {
  switch (op) {
#define BYTEGRAD_UNARY_CASE(name, dtypes, ...)                                     \
  case UnaryOp::name:                                                              \
    if constexpr (rule_admits<M>(DtypeRule::dtypes))                               \
      return apply([](M x) { return pointwise::unary<M>(UnaryOp::name, x); },      \
                   std::bool_constant<DtypeRule::dtypes == DtypeRule::to_bool>{}); \
    return no_kernel_for_dtype("unary", op_id(UnaryOp::name));
    BYTEGRAD_UNARY_OPS(BYTEGRAD_UNARY_CASE)
#undef BYTEGRAD_UNARY_CASE
  }
  throw std::logic_error("cpu unary: unknown op");
}

template <typename M, typename Apply>
void with_binary_functor(BinaryOp op, M alpha, Apply&& apply) {
  switch (op) {
#define BYTEGRAD_BINARY_CASE(name, dtypes, ...)                                                     \
  case BinaryOp::name:                                                                              \
    if constexpr (rule_admits<M>(DtypeRule::dtypes))                                                \
      return apply([alpha](M x, M y) { return pointwise::binary<M>(BinaryOp::name, x, y, alpha); }, \
                   std::bool_constant<DtypeRule::dtypes == DtypeRule::to_bool>{});                  \
    return no_kernel_for_dtype("binary", op_id(BinaryOp::name));
    BYTEGRAD_BINARY_OPS(BYTEGRAD_BINARY_CASE)
#undef BYTEGRAD_BINARY_CASE
  }
  throw std::logic_error("cpu binary: unknown op");
}

template <typename M, typename Apply>
void with_scalar_functor(BinaryOp op, M scalar, double exact, bool scalar_first, Apply&& apply) {
  switch (op) {
#define BYTEGRAD_SCALAR_CASE(name, dtypes, ...)                                                                  \
  case BinaryOp::name:                                                                                           \
    if constexpr (rule_admits<M>(DtypeRule::dtypes))                                                             \
      return apply(                                                                                              \
          [=](M x) { return pointwise::binary_with_scalar<M>(BinaryOp::name, x, scalar, exact, scalar_first); }, \
          std::bool_constant<DtypeRule::dtypes == DtypeRule::to_bool>{});                                        \
    return no_kernel_for_dtype("binary_scalar", op_id(BinaryOp::name));
    BYTEGRAD_BINARY_OPS(BYTEGRAD_SCALAR_CASE)
#undef BYTEGRAD_SCALAR_CASE
  }
  throw std::logic_error("cpu binary_scalar: unknown op");
}

// The output type of a row's loop: bool for comparisons and logical ops, else the input's type.
template <typename T, typename BoolOutput>
using loop_output_t = std::conditional_t<BoolOutput::value, bool, T>;

}  // namespace

// The output dtype is the input's, or bool for to_bool ops (logical_not).
void unary(UnaryOp op, const StridedView& out, const StridedView& in) {
  const ScalarType expected = dtype_rule(op) == DtypeRule::to_bool ? ScalarType::bool_ : in.dtype;
  if (out.dtype != expected)
    throw std::invalid_argument("cpu unary: " + std::string(op_name(op_id(op))) + " writes " +
                                std::string(scalar_type_name(expected)) + ", the output is " +
                                std::string(scalar_type_name(out.dtype)));
  dispatch_dtype(in.dtype, [&](auto in_tag) {
    using T = typename decltype(in_tag)::type;
    with_unary_functor<opmath_t<T>>(
        op, [&](auto f, auto bool_output) { unary_loop<T, loop_output_t<T, decltype(bool_output)>>(out, in, f); });
  });
}

void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b, double alpha,
            ScalarType common) {
  const bool bool_output = has_bool_output(op);
  if (bool_output && out.dtype != ScalarType::bool_)
    throw std::invalid_argument("cpu binary: comparisons and logical ops write bool");
  const bool same_dtype = a.dtype == b.dtype && common == a.dtype && (bool_output || out.dtype == a.dtype);
  if (!same_dtype) {  // mixed dtypes: converted element by element (no scratch memory), the op chosen per
                      // element as well (one loop per common dtype: this path is for correctness, not speed)
    dispatch_dtype(common, [&](auto tag) {
      using C = typename decltype(tag)::type;
      using M = opmath_t<C>;
      const M typed_alpha = bool_output ? M(1) : convert<M>(alpha);
      mixed_binary_loop<C>(out, a, b, bool_output,
                           [op, typed_alpha](M x, M y) { return pointwise::binary<M>(op, x, y, typed_alpha); });
    });
    return;
  }
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    with_binary_functor<M>(op, bool_output ? M(1) : convert<M>(alpha), [&](auto f, auto bool_out) {
      binary_loop<T, loop_output_t<T, decltype(bool_out)>>(out, a, b, f);
    });
  });
}

void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar, bool scalar_first) {
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    with_scalar_functor<M>(op, convert<M>(scalar), scalar, scalar_first, [&](auto f, auto bool_output) {
      unary_loop<T, loop_output_t<T, decltype(bool_output)>>(out, a, f);
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

void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value) {
  if (mask.dtype != ScalarType::bool_) throw std::invalid_argument("cpu masked_fill: mask must be bool");
  if (src.dtype != out.dtype) throw std::invalid_argument("cpu masked_fill: the source must have the output's dtype");
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T typed = convert<T>(value);
    for_each_row<3>({&out, &src, &mask}, [typed](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      const bool* m = reinterpret_cast<const bool*>(p[2]);
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = m[i * s[2]] ? typed : x[i * s[1]];
    });
  });
}

}  // namespace bytegrad::cpu
