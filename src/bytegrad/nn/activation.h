// The activation modules, as torch.nn's (ReLU, GELU, ...): one class per activation row
// of the op table (core/op_table.h's BYTEGRAD_ACTIVATION_TABLE, its `module` column). forward is the op
// (tensor/ops.h); no parameters; what the op's node saves (result or input) is the row's.
//
// Another activation module is one line, for any function Tensor(const Tensor&) in namespace bytegrad:
//   BYTEGRAD_ACTIVATION_MODULE(Softsign, softsign);
#pragma once

#include "bytegrad/core/op_table.h"
#include "bytegrad/nn/module.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

// Op supplies apply(x) and, when the op has an in-place form (x.relu_()), in_place(x); only such modules
// take torch.nn's `inplace` argument: it applies the in-place form to the input and returns the input.
template <typename Op>
class Activation : public Module {
  static constexpr bool kHasInPlace = requires(const Tensor& x) { Op::in_place(x); };

 public:
  Activation() = default;
  explicit Activation(bool inplace) requires kHasInPlace : inplace_(inplace) {}

  Tensor forward(const Tensor& input) override {
    if constexpr (kHasInPlace) {
      if (inplace_) {
        Op::in_place(input);
        return input;
      }
    }
    return Op::apply(input);
  }

 private:
  bool inplace_ = false;
};

// x.op_() where Tensor has that member (a template, so a missing member only removes the overload).
#define BYTEGRAD_ACTIVATION_IN_PLACE(op)                  \
  template <typename T>                                   \
  static auto in_place(const T& x)->decltype(x.op##_()) { \
    return x.op##_();                                     \
  }

// The module class Name whose forward is bytegrad::op (its Op in nn::activation_ops). Name and op are
// identifiers that declare and call, which parentheses would break.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define BYTEGRAD_ACTIVATION_MODULE(Name, op)                           \
  namespace activation_ops {                                           \
  struct Name {                                                        \
    static Tensor apply(const Tensor& x) { return ::bytegrad::op(x); } \
    BYTEGRAD_ACTIVATION_IN_PLACE(op)                                   \
  };                                                                   \
  }                                                                    \
  class Name : public Activation<activation_ops::Name> {               \
   public:                                                             \
    using Activation<activation_ops::Name>::Activation;                \
  }
// NOLINTEND(bugprone-macro-parentheses)

#define BYTEGRAD_ACTIVATION_MODULE_ROW(op, dtypes, saves, node, autocast, cuda, module, ...) \
  BYTEGRAD_ACTIVATION_MODULE(module, op);
BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_ACTIVATION_MODULE_ROW)
#undef BYTEGRAD_ACTIVATION_MODULE_ROW

// torch.nn.LeakyReLU(negative_slope): leaky_relu(input, negative_slope), no parameters.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& input) override { return leaky_relu(input, negative_slope_); }
  double negative_slope() const { return negative_slope_; }

 private:
  double negative_slope_;
};

}  // namespace bytegrad::nn
