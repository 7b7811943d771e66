// Elementwise ops: one output laid out as PyTorch's TensorIterator lays it out (ops_support.h), or none
// for the in-place forms. Scalars are passed to the kernel as numbers, never as device tensors.
// Tensor operands of two dtypes are promoted as PyTorch's TensorIterator on CUDA promotes them: the result
// type is result_type(a, b), and the kernel reads each operand in its own dtype (no converted copies; the
// output is still the only allocation). where is the exception, as in PyTorch: its operands are converted
// with .to() first.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "bytegrad/core/checked_convert.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/pending_scores.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

ScalarType result_dtype(DtypeRule rule, ScalarType operand) {
  return rule == DtypeRule::to_bool ? ScalarType::bool_ : operand;
}

// PyTorch's alpha_check for add and sub: an integral (or bool) computation takes only a whole alpha.
// (PyTorch also refuses alpha=2.0 written as a float; a double cannot tell 2.0 from 2.)
void check_alpha(const char* name, double alpha, ScalarType common) {
  if (is_integral(common, /*include_bool=*/true) && !(std::isfinite(alpha) && alpha == std::trunc(alpha)))
    throw std::invalid_argument(
        fmt::format("{}: For integral input tensors, argument alpha must not be a floating "
                    "point number (alpha = {}, computing in {})",
                    name, alpha, scalar_type_name(common)));
}

// PyTorch's sub_check: subtraction refuses bool operands, pointing at the operator meant.
void check_sub_operands(const char* name, ScalarType a, ScalarType b) {
  if (a == ScalarType::bool_ && b == ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("{}: Subtraction, the `-` operator, with two bool tensors is not "
                    "supported. Use logical_xor() (ne() for bools) instead.",
                    name));
  if (a == ScalarType::bool_ || b == ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("{}: Subtraction, the `-` operator, with a bool tensor is not supported. "
                    "If you are trying to invert a mask, use logical_not() instead.",
                    name));
}

// The type PyTorch computes `tensor op scalar` in: result_type(tensor, scalar) with the scalar a wrapped
// number (Python's), the lowest-priority operand. A number that is not whole (or not finite, or beyond
// int64: no Python int PyTorch could take) with an integer or bool tensor gives float32, the default dtype;
// a whole number with a bool tensor gives int64; otherwise the tensor's dtype (uint8 + 300 stays uint8 and
// wraps, float16 * 1e6 overflows to inf: PyTorch checks neither). A double cannot tell 2.0 from 2: whole
// numbers act as Python ints.
ScalarType scalar_op_common_type(ScalarType dtype, double scalar) {
  if (is_floating_point(dtype)) return dtype;
  const bool whole = std::isfinite(scalar) && scalar == std::trunc(scalar) && std::fabs(scalar) < 0x1p63;
  if (!whole) return ScalarType::float32;
  return dtype == ScalarType::bool_ ? ScalarType::int64 : dtype;
}

// The checks on a scalar operand of an arithmetic op, before anything is allocated or written (comparisons
// compare exactly in double and take any scalar): bool subtraction, integer powers with a negative integer
// exponent, the row's dtype rule on the type computed in, and for an in-place form PyTorch's canCast of
// that type to self's dtype.
void check_scalar_operand(const char* name, OpId op, ScalarType dtype, double scalar, ScalarType common,
                          bool in_place) {
  if (op_info(op).dtypes == DtypeRule::to_bool) return;
  if (op == OpId::sub_scalar || op == OpId::rsub_scalar) check_sub_operands(name, dtype, ScalarType::int64);
  if (op == OpId::pow_scalar && is_integral(common, /*include_bool=*/true) && scalar < 0 &&
      scalar == std::trunc(scalar))
    throw std::invalid_argument(
        fmt::format("{}: Integers to negative integer powers are not allowed ({} base, "
                    "exponent {})",
                    name, scalar_type_name(dtype), scalar));
  if (in_place && common != dtype)
    throw std::invalid_argument(
        fmt::format("{}: result type {} can't be cast to the desired output type {} (a {} "
                    "tensor with the scalar {} computes in {})",
                    name, pytorch_type_name(common), pytorch_type_name(dtype), scalar_type_name(dtype), scalar,
                    scalar_type_name(common)));
  const DtypeRule rule = op_info(op).dtypes;
  if (rule == DtypeRule::floating && !is_floating_point(common))
    throw std::invalid_argument(
        fmt::format("{}: a {} tensor with the scalar {} computes in {}, which is not a "
                    "floating-point type (bytegrad does not promote integers to float; "
                    "convert with .to(float32))",
                    name, scalar_type_name(dtype), scalar, scalar_type_name(common)));
  if (rule == DtypeRule::not_bool && common == ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("{}: a bool tensor with the scalar {} computes in bool, which {} does not "
                    "take",
                    name, scalar, name));
}

// add(x, other, alpha) and sub with a scalar `other`: the kernel gets alpha * other, so the type computed in
// comes from `other` (int64 + 2.5 with alpha 2 is float32, though 2 * 2.5 is whole), and alpha is checked
// against it (PyTorch's alpha_check). Returns that type.
ScalarType check_scalar_alpha(const char* name, OpId op, const Tensor& self, double other, double alpha,
                              bool in_place) {
  check_defined(name, self);
  const ScalarType common = scalar_op_common_type(self.dtype(), other);
  check_scalar_operand(name, op, self.dtype(), other, common, in_place);
  check_alpha(name, alpha, common);
  return common;
}

Tensor unary_compute(const char* name, UnaryOp op, const Tensor& x) {
  AllocationScope scope(name);
  check_defined(name, x);
  check_dtype_rule(name, dtype_rule(op), x);
  Tensor out = empty_elementwise_output(x.sizes(), result_dtype(dtype_rule(op), x.dtype()), x.device(), {&x});
  backend_of(x).unary(op, kv(out), kv(x));
  return out;
}

Tensor binary_compute(const char* name, BinaryOp op, const Tensor& a, const Tensor& b, double alpha) {
  AllocationScope scope(name);
  check_same_device(name, a, b);
  const ScalarType common = result_type(a, b);
  check_dtype_rule(name, dtype_rule(op), a, b, common);
  if (op == BinaryOp::sub) check_sub_operands(name, a.dtype(), b.dtype());
  if (op == BinaryOp::add || op == BinaryOp::sub) check_alpha(name, alpha, common);
  const Shape shape = broadcast_shapes(name, a, b);
  Tensor out = empty_elementwise_output(shape, result_dtype(dtype_rule(op), common), a.device(), {&a, &b});
  backend_of(a).binary(op, kv(out), kv(a.expand(shape)), kv(b.expand(shape)), alpha, common);
  return out;
}

// Whether a mul or div by a number into `out` starts a pending chain (tensor/pending_scores.h): floating
// operands in one dtype, contiguous, on a device that defers them, in a forward autograd records.
bool starts_pending_scores(OpId op, const Tensor& a, const Tensor& out) {
  if (op != OpId::mul_scalar && op != OpId::div_scalar) return false;
  const ScalarType t = a.dtype();
  if (t != ScalarType::float32 && t != ScalarType::bfloat16 && t != ScalarType::float16) return false;
  if (a.numel() == 0 || !a.is_contiguous() || !out.is_contiguous() || !defers_scores_on(a.device())) return false;
  const AutogradHook* hook = autograd_hook();
  return hook != nullptr && hook->needs_graph({a});
}

// `common`: the type computed in when the caller decided it (add and sub with alpha); else from the scalar.
Tensor scalar_compute(const char* name, OpId op, const Tensor& a, double scalar,
                      std::optional<ScalarType> common = std::nullopt) {
  AllocationScope scope(name);
  check_defined(name, a);
  const ScalarOpKernel kernel = scalar_op_kernel(op);
  const bool first = kernel.order == OperandOrder::scalar_first;
  if (op_info(op).dtypes == DtypeRule::to_bool) {  // comparisons: exact in double, on the tensor's values
    Tensor out = empty_elementwise_output(a.sizes(), ScalarType::bool_, a.device(), {&a});
    backend_of(a).binary_scalar(kernel.kernel, kv(out), kv(a), scalar, first);
    return out;
  }
  const ScalarType type = common.value_or(scalar_op_common_type(a.dtype(), scalar));
  if (type == a.dtype()) check_dtype_rule(name, op, a);  // (names the tensor)
  check_scalar_operand(name, op, a.dtype(), scalar, type, /*in_place=*/false);
  // One output of the computed type, laid out like a: PyTorch's only allocation (the scalar is a wrapped
  // number on the host, never a device tensor).
  Tensor out = empty_elementwise_output(a.sizes(), type, a.device(), {&a});
  // In backward (a mul or div by a number), a deferred gradient is written here (tensor/gradient_reader.h).
  std::optional<DeferredGradient> deferred =
      (op == OpId::mul_scalar || op == OpId::div_scalar) && type == a.dtype() && a.defined()
          ? take_deferred_gradient(a.storage().get())
          : std::nullopt;
  if (deferred) {
    write_deferred_gradient(*deferred, kv(out), std::nullopt, 0.0, ScalarStep{kernel.kernel, scalar}, backend_of(a));
  } else if (type == a.dtype() && starts_pending_scores(op, a, out)) {
    // Forward in training: left unwritten until its reader is known (tensor/pending_scores.h).
    backend_of(a).note_deferred_binary_scalar(kv(out));
    defer_scaled_scores(kv(out), kv(a), ScalarStep{kernel.kernel, scalar});
  } else if (type == a.dtype()) {
    backend_of(a).binary_scalar(kernel.kernel, kv(out), kv(a), scalar, first);
  } else {
    // TensorIterator reads a in its own dtype and computes in `type`: a is converted into the output's own
    // block first, then the op runs there in place. The same values, and no memory beyond the output.
    backend_of(a).copy(kv(out), kv(a));
    backend_of(a).binary_scalar(kernel.kernel, kv(out), kv(out), scalar, first);
  }
  return out;
}

// The result is computed in result_type(self, other) and written in self's dtype, which must be a type
// that result can be cast to (PyTorch's canCast): float32.add_(bfloat16) and bfloat16.add_(float32) are
// allowed, int64.add_(float32) is not; the check comes before anything is written.
const Tensor& inplace_binary_compute(const char* name, BinaryOp op, const Tensor& self, const Tensor& other,
                                     double alpha) {
  check_same_device(name, self, other);
  const ScalarType common = result_type(self, other);
  check_dtype_rule(name, dtype_rule(op), self, other, common);
  check_can_cast_to_self(name, common, self, other);
  if (op == BinaryOp::sub) check_sub_operands(name, self.dtype(), other.dtype());
  if (op == BinaryOp::add || op == BinaryOp::sub) check_alpha(name, alpha, common);
  if (broadcast_shapes(name, self, other) != self.sizes())
    throw std::invalid_argument(fmt::format("{}: {} cannot be broadcast to the shape of the in-place target {}", name,
                                            describe(other), describe(self)));
  check_write_overlap(name, self, {&other});
  backend_of(self).binary(op, kv(self), kv(self), kv(other.expand(self.sizes())), alpha, common);
  self.bump_version();
  return self;
}

const Tensor& inplace_scalar_compute(const char* name, OpId op, const Tensor& self, double scalar,
                                     std::optional<ScalarType> common = std::nullopt) {
  check_defined(name, self);
  check_write_overlap(name, self);
  const ScalarOpKernel kernel = scalar_op_kernel(op);
  const ScalarType type = common.value_or(scalar_op_common_type(self.dtype(), scalar));
  if (type == self.dtype()) check_dtype_rule(name, op, self);
  check_scalar_operand(name, op, self.dtype(), scalar, type, /*in_place=*/true);
  backend_of(self).binary_scalar(kernel.kernel, kv(self), kv(self), scalar, false);
  self.bump_version();
  return self;
}

const Tensor& inplace_unary_compute(const char* name, UnaryOp op, const Tensor& self) {
  check_defined(name, self);
  check_write_overlap(name, self);
  check_dtype_rule(name, dtype_rule(op), self);
  backend_of(self).unary(op, kv(self), kv(self));
  self.bump_version();
  return self;
}

// Each op records itself around its computation (OpRecording: mul and div save their operands before the
// output exists); the computation's internal broadcast views are not recorded. Bool results (comparisons,
// logical ops: the table's to_bool rows) have no gradient; any other result of an operand that requires
// grad is floating, as only floating tensors require grad.
template <OpId id>
OpRecording begin_pointwise_recording(std::vector<Tensor> inputs, ArgsOf<id> args = {}) {
  if constexpr (op_info(id).dtypes == DtypeRule::to_bool) return {};
  else return begin_recording<id>(std::move(inputs), std::move(args));
}

// The row's autocast column (core/op_table.h): inside an autocast region, the op runs as PyTorch's wrapper
// runs it (tensor/autocast.h). Returns nullopt where autocast does not apply: the op then runs as it is.
template <OpId id, typename Op, typename... Operands>
std::optional<Tensor> autocast_by_row(Op&& op, const Operands&... operands) {
  if constexpr (constexpr AutocastPolicy policy = op_info(id).autocast; policy != AutocastPolicy::none) {
    if (autocast::active()) return autocast::run<policy>(std::forward<Op>(op), operands...);
  }
  return std::nullopt;
}

template <UnaryOp op>
Tensor unary_op(const Tensor& x) {
  constexpr OpId id = op_id(op);
  if (auto cast = autocast_by_row<id>([](const Tensor& t) { return unary_op<op>(t); }, x)) return *cast;
  const std::string name(op_name(id));
  OpRecording recording = begin_pointwise_recording<id>({x});
  Tensor out = without_recording([&] { return unary_compute(name.c_str(), op, x); });
  recording.finish({out});
  return out;
}

template <BinaryOp op>
Tensor binary_op(const Tensor& a, const Tensor& b, ArgsOf<op_id(op)> args = {}) {
  constexpr OpId id = op_id(op);
  if (auto cast =
          autocast_by_row<id>([args](const Tensor& x, const Tensor& y) { return binary_op<op>(x, y, args); }, a, b))
    return *cast;
  double alpha = 1.0;
  if constexpr (std::is_same_v<ArgsOf<id>, op_args::Alpha>) alpha = args.alpha;
  OpRecording recording = begin_pointwise_recording<id>({a, b}, args);
  Tensor out = without_recording([&] { return binary_compute(op_name(id).data(), op, a, b, alpha); });
  recording.finish({out});
  return out;
}

// `name` is the user's op ("sub" for x - 2 and 2 - x); the record is the table's scalar row.
template <OpId id>
Tensor scalar_op(const char* name, const Tensor& a, double scalar, std::optional<ScalarType> common = std::nullopt) {
  if (auto cast = autocast_by_row<id>(
          [name, common](const Tensor& x, double s) { return scalar_op<id>(name, x, s, common); }, a, scalar))
    return *cast;
  OpRecording recording = begin_pointwise_recording<id>({a}, {scalar});
  Tensor out = without_recording([&] { return scalar_compute(name, id, a, scalar, common); });
  recording.finish({out});
  return out;
}

// In-place ops record their op's row with in_place set: the recorder rebases self's history.
template <BinaryOp op>
const Tensor& inplace_binary(const char* name, const Tensor& self, const Tensor& other, ArgsOf<op_id(op)> args = {}) {
  constexpr OpId id = op_id(op);
  double alpha = 1.0;
  if constexpr (std::is_same_v<ArgsOf<id>, op_args::Alpha>) alpha = args.alpha;
  check_in_place_for_autograd(id, {self, other});
  without_recording([&] { return inplace_binary_compute(name, op, self, other, alpha); });
  record_for_autograd({self, other}, [&] { return make_in_place_record<id>({self, other}, args); });
  return self;
}

template <OpId id>
const Tensor& inplace_scalar(const char* name, const Tensor& self, double scalar,
                             std::optional<ScalarType> common = std::nullopt) {
  check_in_place_for_autograd(id, {self});
  without_recording([&] { return inplace_scalar_compute(name, id, self, scalar, common); });
  record_for_autograd({self}, [&] { return make_in_place_record<id>({self}, {scalar}); });
  return self;
}

template <UnaryOp op>
const Tensor& inplace_unary(const char* name, const Tensor& self) {
  check_in_place_for_autograd(op_id(op), {self});
  without_recording([&] { return inplace_unary_compute(name, op, self); });
  record_for_autograd({self}, [&] { return make_in_place_record<op_id(op)>({self}); });
  return self;
}

}  // namespace

// ------------------------------------------------------------------------- unary, binary (generated)

// Every unary row of the op table is a free function and a Tensor member (the activations' rows among
// them); every binary row a free function on two tensors (the activations' *_backward ops among them),
// with alpha for the rows whose args are Alpha. tensor/ops.h declares them from the same rows.
#define BYTEGRAD_DEFINE_UNARY(op, ...)                            \
  Tensor op(const Tensor& x) { return unary_op<UnaryOp::op>(x); } \
  Tensor Tensor::op() const { return unary_op<UnaryOp::op>(*this); }
BYTEGRAD_UNARY_OPS(BYTEGRAD_DEFINE_UNARY)
#undef BYTEGRAD_DEFINE_UNARY

#define BYTEGRAD_BINARY_CALL_None(op) binary_op<BinaryOp::op>(a, b)
#define BYTEGRAD_BINARY_CALL_Alpha(op) binary_op<BinaryOp::op>(a, b, {alpha})
#define BYTEGRAD_DEFINE_BINARY(op, dtypes, args, ...) \
  Tensor op(const Tensor& a, const Tensor& b BYTEGRAD_BINARY_EXTRA_##args) { return BYTEGRAD_BINARY_CALL_##args(op); }
#define BYTEGRAD_BINARY_EXTRA_None
#define BYTEGRAD_BINARY_EXTRA_Alpha , double alpha
BYTEGRAD_BINARY_OPS(BYTEGRAD_DEFINE_BINARY)
#undef BYTEGRAD_DEFINE_BINARY
#undef BYTEGRAD_BINARY_EXTRA_None
#undef BYTEGRAD_BINARY_EXTRA_Alpha
#undef BYTEGRAD_BINARY_CALL_None
#undef BYTEGRAD_BINARY_CALL_Alpha

// ------------------------------------------------------------------------------------- arithmetic

Tensor add(const Tensor& a, double b, double alpha) {
  const ScalarType common = check_scalar_alpha("add", OpId::add_scalar, a, b, alpha, false);
  return scalar_op<OpId::add_scalar>("add", a, alpha * b, common);
}
Tensor sub(const Tensor& a, double b, double alpha) {
  const ScalarType common = check_scalar_alpha("sub", OpId::sub_scalar, a, b, alpha, false);
  return scalar_op<OpId::sub_scalar>("sub", a, alpha * b, common);
}
Tensor sub(double a, const Tensor& b) { return scalar_op<OpId::rsub_scalar>("rsub", b, a); }
Tensor mul(const Tensor& a, double b) { return scalar_op<OpId::mul_scalar>("mul", a, b); }
Tensor div(const Tensor& a, double b) { return scalar_op<OpId::div_scalar>("div", a, b); }
Tensor div(double a, const Tensor& b) { return scalar_op<OpId::rdiv_scalar>("div", b, a); }
Tensor pow(const Tensor& base, double exponent) { return scalar_op<OpId::pow_scalar>("pow", base, exponent); }
Tensor pow(double base, const Tensor& exponent) { return scalar_op<OpId::rpow_scalar>("pow", exponent, base); }

ScalarType result_type(const Tensor& a, const Tensor& b) {
  check_defined("result_type", a);
  check_defined("result_type", b);
  ResultTypeState state;
  state.add(a.dtype(), a.dim() > 0);
  state.add(b.dtype(), b.dim() > 0);
  return state.result();
}

// ------------------------------------------------------------------------------------ comparisons

Tensor eq(const Tensor& a, double b) { return scalar_op<OpId::eq_scalar>("eq", a, b); }
Tensor ne(const Tensor& a, double b) { return scalar_op<OpId::ne_scalar>("ne", a, b); }
Tensor lt(const Tensor& a, double b) { return scalar_op<OpId::lt_scalar>("lt", a, b); }
Tensor le(const Tensor& a, double b) { return scalar_op<OpId::le_scalar>("le", a, b); }
Tensor gt(const Tensor& a, double b) { return scalar_op<OpId::gt_scalar>("gt", a, b); }
Tensor ge(const Tensor& a, double b) { return scalar_op<OpId::ge_scalar>("ge", a, b); }

// ----------------------------------------------------------------------------- where, masked_fill

// Operands of two dtypes: PyTorch's where_self_out converts each operand not of result_type(a, b) with
// .to() (a copy at the operand's own shape, strides preserved when dense: a first, then b), then allocates
// the output; the copies are freed when it returns (b's first).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  AllocationScope scope("where");
  check_same_device("where", cond, a);
  check_same_device("where", a, b);
  if (cond.dtype() != ScalarType::bool_)
    throw std::invalid_argument(fmt::format("where: the condition {} must be bool", describe(cond)));
  const Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond, a), b.sizes());
  const ScalarType common = result_type(a, b);
  OpRecording recording = begin_recording<OpId::where>({cond, a, b});
  Tensor out;
  without_recording([&] {
    const Tensor a_common = to_dtype_preserving_strides(a, common);
    const Tensor b_common = to_dtype_preserving_strides(b, common);
    out = empty_elementwise_output(shape, common, a.device(), {&cond, &a_common, &b_common});
    backend_of(a).where(kv(out), kv(cond.expand(shape)), kv(a_common.expand(shape)), kv(b_common.expand(shape)));
    return 0;
  });
  recording.finish({out});
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  AllocationScope scope("masked_fill");
  check_same_device("masked_fill", x, mask);
  if (mask.dtype() != ScalarType::bool_)
    throw std::invalid_argument(fmt::format("masked_fill: the mask {} must be bool", describe(mask)));
  value = checked_convert(value, x.dtype(), "masked_fill");
  // PyTorch: result = expand(x).clone(contiguous), then masked_fill_ on it: one pass here (the backend notes
  // both kernels' driver allocations).
  const Shape shape = broadcast_shapes("masked_fill", x, mask);
  OpRecording recording = begin_recording<OpId::masked_fill>({x, mask}, {value});
  Tensor out = empty(shape, TensorOptions{x.dtype(), x.device()});
  without_recording([&] {
    const StridedView source = kv(x.expand(shape));
    const StridedView mask_view = kv(mask.expand(shape));
    // In backward (MaskedFillBackward0), the gradient may come deferred, or go on deferred to a reader that
    // takes it (tensor/gradient_reader.h): masked and scaled later in one pass.
    std::optional<DeferredGradient> deferred =
        x.sizes() == shape ? take_deferred_gradient(x.storage().get()) : std::nullopt;
    const std::optional<SoleReader> reader = take_sole_reader();
    const bool masked_before = deferred && std::ranges::any_of(deferred->steps, [](const DeferredStep& step) {
                                 return step.mask.has_value();
                               });
    if (reader && reader->takes_deferred && reader->dtype == out.dtype() && reader->sizes == shape && !masked_before &&
        defers_gradients_on(out.device())) {
      backend_of(x).note_deferred_masked_fill(kv(out), source);
      if (!deferred) deferred = DeferredGradient{source, {}};
      deferred->steps.push_back({kv(out), mask_view, value});
      hand_deferred_gradient(out.storage().get(), std::move(*deferred));
    } else if (deferred) {
      write_deferred_gradient(*deferred, kv(out), mask_view, value, std::nullopt, backend_of(x));
    } else if (x.sizes() == shape && out.is_contiguous() && defer_masked_scores(kv(out), source, mask_view, value)) {
      // The pending scores' next step (tensor/pending_scores.h): left unwritten too.
      backend_of(x).note_deferred_masked_fill(kv(out), source);
    } else {
      backend_of(x).masked_fill(kv(out), source, mask_view, value);
    }
    return 0;
  });
  recording.finish({out});
  return out;
}

// ------------------------------------------------------------------------------------------ clamp
namespace {

// PyTorch's clamp meta functions keep a floating tensor's dtype whatever the bounds; an integral tensor is
// first converted to result_type(self, bound) (a copy), which bytegrad refuses rather than reproduce. The
// kernel then takes each bound as the tensor's type (Scalar::to, checked: a bound the dtype cannot hold is
// refused, a negative whole number wraps into uint8): returned converted.
struct ClampBounds {
  std::optional<double> min, max;
};
ClampBounds checked_clamp_bounds(const char* name, const Tensor& self, std::optional<double> min,
                                 std::optional<double> max) {
  check_defined(name, self);
  if (self.dtype() == ScalarType::bool_)
    throw std::invalid_argument(fmt::format("{}: {} is bool, which clamp does not take", name, describe(self)));
  ClampBounds bounds;
  for (auto [bound, out] : {std::pair{min, &bounds.min}, std::pair{max, &bounds.max}}) {
    if (!bound) continue;
    if (!is_floating_point(self.dtype()) && scalar_op_common_type(self.dtype(), *bound) != self.dtype())
      throw std::invalid_argument(
          fmt::format("{}: the bound {} would make PyTorch convert {} to float32 first; bytegrad does not promote "
                      "integers to float (convert with .to(float32), or give a whole-number bound)",
                      name, *bound, describe(self)));
    *out = checked_convert(*bound, self.dtype(), name);
  }
  return bounds;
}

// An in-place clamp's gradient needs self as it was before the clamp; bytegrad keeps no such copy, so it
// refuses where a graph would be recorded (the out-of-place forms are differentiable).
void check_in_place_clamp(const char* name, const Tensor& self) {
  AutogradHook* hook = autograd_hook();
  if (hook && !autograd_recording_paused() && hook->needs_graph({self}))
    throw std::invalid_argument(
        fmt::format("{}: in place on {}, which needs a graph, is not differentiable in bytegrad; use the out-of-place "
                    "form or call it under a NoGradGuard",
                    name, describe(self)));
}

// out = min(max(in, lo), hi) with either bound absent: max then min, so lo > hi gives hi and NaN stays NaN,
// as PyTorch's clamp kernel. out may be in.
void clamp_into(const Tensor& out, const Tensor& in, std::optional<double> min, std::optional<double> max) {
  const Tensor* source = &in;
  if (min) {
    backend_of(in).binary_scalar(BinaryOp::maximum, kv(out), kv(*source), *min);
    source = &out;
  }
  if (max) backend_of(in).binary_scalar(BinaryOp::minimum, kv(out), kv(*source), *max);
}

}  // namespace

Tensor clamp_min(const Tensor& x, double min) {
  return scalar_op<OpId::clamp_min>("clamp_min", x, *checked_clamp_bounds("clamp_min", x, min, {}).min, x.dtype());
}
Tensor clamp_max(const Tensor& x, double max) {
  return scalar_op<OpId::clamp_max>("clamp_max", x, *checked_clamp_bounds("clamp_max", x, {}, max).max, x.dtype());
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  if (!min && !max) throw std::invalid_argument("clamp: at least one of 'min' or 'max' must be given");
  const ClampBounds bounds = checked_clamp_bounds("clamp", x, min, max);
  min = bounds.min;
  max = bounds.max;
  OpRecording recording = begin_recording<OpId::clamp>({x}, op_args::Clamp{min, max});
  Tensor out = without_recording([&] {
    AllocationScope scope("clamp");
    Tensor result = empty_elementwise_output(x.sizes(), x.dtype(), x.device(), {&x});  // the only allocation
    clamp_into(result, x, min, max);
    return result;
  });
  recording.finish({out});
  return out;
}
const Tensor& clamp_min_(const Tensor& self, double min) {
  const ClampBounds bounds = checked_clamp_bounds("clamp_min_", self, min, {});
  check_in_place_clamp("clamp_min_", self);
  return inplace_scalar<OpId::clamp_min>("clamp_min_", self, *bounds.min, self.dtype());
}
const Tensor& clamp_max_(const Tensor& self, double max) {
  const ClampBounds bounds = checked_clamp_bounds("clamp_max_", self, {}, max);
  check_in_place_clamp("clamp_max_", self);
  return inplace_scalar<OpId::clamp_max>("clamp_max_", self, *bounds.max, self.dtype());
}
const Tensor& clamp_(const Tensor& self, std::optional<double> min, std::optional<double> max) {
  if (!min && !max) throw std::invalid_argument("clamp_: at least one of 'min' or 'max' must be given");
  const ClampBounds bounds = checked_clamp_bounds("clamp_", self, min, max);
  check_in_place_clamp("clamp_", self);
  check_write_overlap("clamp_", self);
  clamp_into(self, self, bounds.min, bounds.max);
  self.bump_version();
  return self;
}
Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  return bytegrad::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(double min) const { return bytegrad::clamp_min(*this, min); }
Tensor Tensor::clamp_max(double max) const { return bytegrad::clamp_max(*this, max); }
const Tensor& Tensor::clamp_(std::optional<double> min, std::optional<double> max) const {
  return bytegrad::clamp_(*this, min, max);
}
const Tensor& Tensor::clamp_min_(double min) const { return bytegrad::clamp_min_(*this, min); }
const Tensor& Tensor::clamp_max_(double max) const { return bytegrad::clamp_max_(*this, max); }

// logical_and_ (bool self): in place, for masks built in steps (clamp's gradient).
const Tensor& logical_and_(const Tensor& self, const Tensor& other) {
  return inplace_binary<BinaryOp::logical_and>("logical_and_", self, other);
}

// -------------------------------------------------------------------------------------- operators

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator/(double a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
const Tensor& operator+=(const Tensor& a, const Tensor& b) { return a.add_(b); }
const Tensor& operator+=(const Tensor& a, double b) { return a.add_(b); }
const Tensor& operator-=(const Tensor& a, const Tensor& b) { return a.sub_(b); }
const Tensor& operator-=(const Tensor& a, double b) { return a.sub_(b); }
const Tensor& operator*=(const Tensor& a, const Tensor& b) { return a.mul_(b); }
const Tensor& operator*=(const Tensor& a, double b) { return a.mul_(b); }
const Tensor& operator/=(const Tensor& a, const Tensor& b) { return a.div_(b); }
const Tensor& operator/=(const Tensor& a, double b) { return a.div_(b); }

// ---------------------------------------------------------------------------------------- members

Tensor Tensor::add(const Tensor& other, double alpha) const { return bytegrad::add(*this, other, alpha); }
Tensor Tensor::add(double other, double alpha) const { return bytegrad::add(*this, other, alpha); }
Tensor Tensor::sub(const Tensor& other, double alpha) const { return bytegrad::sub(*this, other, alpha); }
Tensor Tensor::sub(double other, double alpha) const { return bytegrad::sub(*this, other, alpha); }
Tensor Tensor::mul(const Tensor& other) const { return bytegrad::mul(*this, other); }
Tensor Tensor::mul(double other) const { return bytegrad::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return bytegrad::div(*this, other); }
Tensor Tensor::div(double other) const { return bytegrad::div(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return bytegrad::pow(*this, exponent); }
Tensor Tensor::pow(double exponent) const { return bytegrad::pow(*this, exponent); }
Tensor Tensor::eq(const Tensor& other) const { return bytegrad::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return bytegrad::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return bytegrad::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return bytegrad::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return bytegrad::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return bytegrad::ge(*this, other); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return bytegrad::masked_fill(*this, mask, value); }

const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  return inplace_binary<BinaryOp::add>("add_", *this, other, {alpha});
}
const Tensor& Tensor::add_(double other, double alpha) const {
  const ScalarType common = check_scalar_alpha("add_", OpId::add_scalar, *this, other, alpha, true);
  return inplace_scalar<OpId::add_scalar>("add_", *this, alpha * other, common);
}
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  return inplace_binary<BinaryOp::sub>("sub_", *this, other, {alpha});
}
const Tensor& Tensor::sub_(double other, double alpha) const {
  const ScalarType common = check_scalar_alpha("sub_", OpId::sub_scalar, *this, other, alpha, true);
  return inplace_scalar<OpId::sub_scalar>("sub_", *this, alpha * other, common);
}
const Tensor& Tensor::mul_(const Tensor& other) const { return inplace_binary<BinaryOp::mul>("mul_", *this, other); }
const Tensor& Tensor::mul_(double other) const { return inplace_scalar<OpId::mul_scalar>("mul_", *this, other); }
const Tensor& Tensor::div_(const Tensor& other) const { return inplace_binary<BinaryOp::div>("div_", *this, other); }
const Tensor& Tensor::div_(double other) const { return inplace_scalar<OpId::div_scalar>("div_", *this, other); }
const Tensor& Tensor::neg_() const { return inplace_unary<UnaryOp::neg>("neg_", *this); }
const Tensor& Tensor::relu_() const { return inplace_unary<UnaryOp::relu>("relu_", *this); }

const Tensor& Tensor::masked_fill_(const Tensor& mask, double value) const {
  check_same_device("masked_fill_", *this, mask);
  if (mask.dtype() != ScalarType::bool_)
    throw std::invalid_argument(fmt::format("masked_fill_: the mask {} must be bool", describe(mask)));
  value = checked_convert(value, dtype(), "masked_fill_");
  if (broadcast_shapes("masked_fill_", *this, mask) != sizes())
    throw std::invalid_argument(
        fmt::format("masked_fill_: the mask {} cannot be broadcast to {}", describe(mask), describe(*this)));
  // PyTorch only warns (deprecated) for an expanded target: every element that shares a location gets the
  // same value wherever the mask is set. A mask that partly overlaps the target is refused.
  check_write_overlap("masked_fill_", *this, {&mask}, SharedDestination::allow);
  check_in_place_for_autograd(OpId::masked_fill, {*this, mask});
  without_recording([&] {
    backend_of(*this).masked_fill(kv(*this), kv(*this), kv(mask.expand(sizes())), value);
    return 0;
  });
  bump_version();
  record_for_autograd({*this, mask}, [&] { return make_in_place_record<OpId::masked_fill>({*this, mask}, {value}); });
  return *this;
}

namespace {

// fill_ and zero_ (PyTorch's FillBackward0 and ZeroBackward0: the gradient through them is zero).
template <OpId id>
const Tensor& fill_in_place(const char* name, const Tensor& self, double value) {
  check_defined(name, self);
  // Exempt from the shared-destination rule, as in PyTorch: writing one value is the same whichever
  // element sharing a location is written last (an expanded view, empty_strided with 0 strides).
  check_write_overlap(name, self, {}, SharedDestination::allow);
  value = checked_convert(value, self.dtype(), name);
  check_in_place_for_autograd(id, {self});
  backend_of(self).fill(kv(self), value);
  self.bump_version();
  if constexpr (id == OpId::fill)
    record_for_autograd({self}, [&] { return make_in_place_record<id>({self}, {value}); });
  else record_for_autograd({self}, [&] { return make_in_place_record<id>({self}); });
  return self;
}

}  // namespace

const Tensor& Tensor::fill_(double value) const { return fill_in_place<OpId::fill>("fill_", *this, value); }
const Tensor& Tensor::zero_() const { return fill_in_place<OpId::zero>("zero_", *this, 0.0); }

}  // namespace bytegrad
