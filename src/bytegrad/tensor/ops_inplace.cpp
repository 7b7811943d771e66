// In-place pointwise updates for optimizers (lerp_, addcmul_, addcdiv_, sqrt_, maximum_): each writes its
// first operand through the backend with out aliasing it, so none allocates device memory.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

// Checks that `other` can be read as self's shape (same device, broadcastable to self): other expanded.
Tensor broadcast_to_self(const char* op, const Tensor& self, const Tensor& other) {
  check_same_device(op, self, other);
  if (broadcast_shapes(op, self, other) != self.sizes())
    throw std::invalid_argument(fmt::format("{}: {} cannot be broadcast to the shape of the in-place target {}", op,
                                            describe(other), describe(self)));
  return other.expand(self.sizes());
}

// The type PyTorch's TensorIterator computes an in-place op in: result_type over self and the other
// operands (dimensioned before 0-d), which must be castable to self's dtype (canCast: no floating into
// integral, nothing but bool into bool). Checked before anything is written.
ScalarType in_place_common_type(const char* op, const Tensor& self, std::initializer_list<const Tensor*> others) {
  ResultTypeState state;
  state.add(self.dtype(), self.dim() > 0);
  for (const Tensor* other : others) state.add(other->dtype(), other->dim() > 0);
  const ScalarType common = state.result();
  if (!can_cast(common, self.dtype())) {
    std::string operands = describe(self);
    for (const Tensor* other : others) operands += ", " + describe(*other);
    throw std::invalid_argument(
        fmt::format("{}: result type {} (of {}) can't be cast to the desired output type {} of "
                    "the in-place target",
                    op, scalar_type_name(common), operands, scalar_type_name(self.dtype())));
  }
  return common;
}

template <OpId op>
const Tensor& ternary_(TernaryOp kernel, const Tensor& self, const Tensor& a, const Tensor& b, double value) {
  const std::string display = std::string(op_name(op)) + "_";
  const char* name = display.c_str();
  check_defined(name, self);
  check_dtype_rule(name, op, self);
  const Tensor a_view = broadcast_to_self(name, self, a), b_view = broadcast_to_self(name, self, b);
  // lerp_ takes one dtype (PyTorch: "expected dtype ... for `end`"); addcmul_ and addcdiv_ promote.
  if constexpr (op == OpId::lerp) check_same_dtype(name, self, a);
  const ScalarType common = in_place_common_type(name, self, {&a, &b});
  check_write_overlap(name, self, {&a, &b});
  check_in_place_for_autograd(op, {self, a, b});
  without_recording([&] {
    backend_of(self).ternary(kernel, kv(self), kv(self), kv(a_view), kv(b_view), value, common);
    return 0;
  });
  self.bump_version();
  record_for_autograd({self, a, b}, [&] { return make_in_place_record<op>({self, a, b}, {value}); });
  return self;
}

}  // namespace

const Tensor& lerp_(const Tensor& self, const Tensor& end, double weight) {
  return ternary_<OpId::lerp>(TernaryOp::lerp, self, end, end, weight);
}

const Tensor& addcmul_(const Tensor& self, const Tensor& a, const Tensor& b, double value) {
  return ternary_<OpId::addcmul>(TernaryOp::addcmul, self, a, b, value);
}

const Tensor& addcdiv_(const Tensor& self, const Tensor& a, const Tensor& b, double value) {
  return ternary_<OpId::addcdiv>(TernaryOp::addcdiv, self, a, b, value);
}

const Tensor& sqrt_(const Tensor& self) {
  check_defined("sqrt_", self);
  check_write_overlap("sqrt_", self);
  check_dtype_rule("sqrt_", dtype_rule(UnaryOp::sqrt), self);
  check_in_place_for_autograd(OpId::sqrt, {self});
  without_recording([&] {
    backend_of(self).unary(UnaryOp::sqrt, kv(self), kv(self));
    return 0;
  });
  self.bump_version();
  record_for_autograd({self}, [&] { return make_in_place_record<OpId::sqrt>({self}); });
  return self;
}

const Tensor& maximum_(const Tensor& self, const Tensor& other) {
  check_defined("maximum_", self);
  const Tensor other_view = broadcast_to_self("maximum_", self, other);
  const ScalarType common = in_place_common_type("maximum_", self, {&other});
  check_write_overlap("maximum_", self, {&other});
  check_in_place_for_autograd(OpId::maximum, {self, other});
  without_recording([&] {
    backend_of(self).binary(BinaryOp::maximum, kv(self), kv(self), kv(other_view), 1.0, common);
    return 0;
  });
  self.bump_version();
  record_for_autograd({self, other}, [&] { return make_in_place_record<OpId::maximum>({self, other}); });
  return self;
}

}  // namespace bytegrad
