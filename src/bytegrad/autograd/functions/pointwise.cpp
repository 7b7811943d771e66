// Derivatives of elementwise ops, as PyTorch's derivatives.yaml states them (what each saves, and what
// its backward allocates). Broadcast gradients are summed down by the engine.
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

namespace {

// grad * alpha, without an allocation when alpha is 1 (PyTorch's maybe_multiply).
Tensor maybe_multiply(const Tensor& grad, double alpha) { return alpha == 1.0 ? grad : grad * alpha; }

}  // namespace

std::shared_ptr<FormulaNode> add(const OpRecord& r, const op_args::Alpha& args) {  // a + alpha * b: saves nothing
  return make_node(r, [alpha = args.alpha](const FormulaNode& n, TensorList& g) {
    return TensorList{n.needs_grad(0) ? g[0] : Tensor(), n.needs_grad(1) ? maybe_multiply(g[0], alpha) : Tensor()};
  });
}

std::shared_ptr<FormulaNode> add_scalar(const OpRecord& r, const op_args::Scalar&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0]}; });
}

std::shared_ptr<FormulaNode> sub(const OpRecord& r, const op_args::Alpha& args) {  // a - alpha * b
  return make_node(r, [alpha = args.alpha](const FormulaNode& n, TensorList& g) {
    return TensorList{n.needs_grad(0) ? g[0] : Tensor(), n.needs_grad(1) ? maybe_multiply(-g[0], alpha) : Tensor()};
  });
}

std::shared_ptr<FormulaNode> sub_scalar(const OpRecord& r, const op_args::Scalar&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0]}; });
}

std::shared_ptr<FormulaNode> rsub_scalar(const OpRecord& r, const op_args::Scalar&) {  // s - b
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{-g[0]}; });
}

std::shared_ptr<FormulaNode> product_rule(const OpRecord& r, const char* other_name) {
  auto node = make_node(r, [other_name](const FormulaNode& n, TensorList& g) {
    TensorList out(2);
    if (n.needs_grad(0)) out[0] = g[0] * n.saved(other_name);
    if (n.needs_grad(1)) out[1] = g[0] * n.saved("self");
    return out;
  });
  if (node->needs_grad(1)) node->save("self", r.inputs.at(0));
  if (node->needs_grad(0)) node->save(other_name, r.inputs.at(1));
  return node;
}

// saves each operand for the other's gradient
std::shared_ptr<FormulaNode> mul(const OpRecord& r, const op_args::None&) { return product_rule(r, "other"); }

std::shared_ptr<FormulaNode> mul_scalar(const OpRecord& r, const op_args::Scalar& args) {
  auto node = make_node(r, [s = args.value](const FormulaNode&, TensorList& g) { return TensorList{g[0] * s}; });
  node->takes_deferred = true;  // a deferred masked gradient, masked and multiplied in one pass (gradient_reader.h)
  return node;
}

std::shared_ptr<FormulaNode> div(const OpRecord& r, const op_args::None&) {  // self / other
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    TensorList out(2);
    Tensor other = n.saved("other");
    if (n.needs_grad(0)) out[0] = g[0] / other;
    if (n.needs_grad(1)) out[1] = -g[0] * ((n.saved("self") / other) / other);  // PyTorch's order
    return out;
  });
  if (node->needs_grad(1)) node->save("self", r.inputs[0]);
  node->save("other", r.inputs[1]);
  return node;
}

std::shared_ptr<FormulaNode> div_scalar(const OpRecord& r, const op_args::Scalar& args) {
  auto node = make_node(r, [s = args.value](const FormulaNode&, TensorList& g) { return TensorList{g[0] / s}; });
  node->takes_deferred = true;  // as mul_scalar's
  return node;
}

std::shared_ptr<FormulaNode> neg(const OpRecord& r, const op_args::None&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{-g[0]}; });
}

// The activations (the op table's activation rows): the node saves the result or the input, as the row's
// `saves` column says, and backward is the row's fused op_backward(grad, saved): one allocation.
#define BYTEGRAD_ACTIVATION_SAVE_result(node, r) (node)->save_output("result", 0)
#define BYTEGRAD_ACTIVATION_SAVE_input(node, r) (node)->save("self", (r).inputs.at(0))
#define BYTEGRAD_ACTIVATION_FORMULA(op, dtypes, saves, ...)                                                            \
  std::shared_ptr<FormulaNode> op(const OpRecord& r, const op_args::None&) {                                           \
    auto node =                                                                                                        \
        make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{op##_backward(g[0], n.saved(0))}; }); \
    BYTEGRAD_ACTIVATION_SAVE_##saves(node, r);                                                                         \
    return node;                                                                                                       \
  }
BYTEGRAD_ACTIVATION_OPS(BYTEGRAD_ACTIVATION_FORMULA)
#undef BYTEGRAD_ACTIVATION_FORMULA
#undef BYTEGRAD_ACTIVATION_SAVE_result
#undef BYTEGRAD_ACTIVATION_SAVE_input

std::shared_ptr<FormulaNode> exp(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0] * n.saved(0)}; });
  node->save_output("result", 0);
  return node;
}

// grad * (result + 1): a result-sized temporary, then the gradient (derivatives.yaml's expm1).
std::shared_ptr<FormulaNode> expm1(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0] * (n.saved(0) + 1.0)}; });
  node->save_output("result", 0);
  return node;
}

std::shared_ptr<FormulaNode> log(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0] / n.saved(0)}; });
  node->save("self", r.inputs.at(0));
  return node;
}

std::shared_ptr<FormulaNode> sqrt(const OpRecord& r, const op_args::None&) {  // grad / (2 * result)
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0] / (n.saved(0) * 2.0)}; });
  node->save_output("result", 0);
  return node;
}

// -grad * (result * result): saves the result; backward makes two result-sized temporaries, then the
// gradient (derivatives.yaml's reciprocal).
std::shared_ptr<FormulaNode> reciprocal(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    const Tensor result = n.saved(0);
    const Tensor squared = result * result;
    return TensorList{-g[0] * squared};
  });
  node->save_output("result", 0);
  return node;
}

// -0.5 * grad * result.pow(3) (derivatives.yaml's rsqrt), saving the result. Written as PyTorch's generated
// code writes it, so the temporaries (-0.5 * grad, result cubed) are made and freed in its order.
std::shared_ptr<FormulaNode> rsqrt(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    const Tensor result = n.saved(0);
    return TensorList{-0.5 * g[0] * result.pow(3.0)};
  });
  node->save_output("result", 0);
  return node;
}

// grad * -self.sin() (derivatives.yaml's cos): saves self; backward makes sin(self), its negation, then the
// gradient, and frees the two temporaries.
std::shared_ptr<FormulaNode> cos(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0] * -n.saved(0).sin()}; });
  node->save("self", r.inputs.at(0));
  return node;
}

// grad * self.cos() (derivatives.yaml's sin): saves self; cos(self), then the gradient.
std::shared_ptr<FormulaNode> sin(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0] * n.saved(0).cos()}; });
  node->save("self", r.inputs.at(0));
  return node;
}

// leaky_relu_backward(grad, self, negative_slope) (derivatives.yaml's leaky_relu): saves self; one allocation.
std::shared_ptr<FormulaNode> leaky_relu(const OpRecord& r, const op_args::Scalar& args) {
  auto node = make_node(r, [slope = args.value](const FormulaNode& n, TensorList& g) {
    return TensorList{leaky_relu_backward(g[0], n.saved(0), slope)};
  });
  node->save("self", r.inputs.at(0));
  return node;
}

// clamp_min, clamp_max and clamp (derivatives.yaml; FunctionsManual's clamp_backward): the gradient flows
// where self is within the bounds, 0 elsewhere. Each saves self; backward makes a 0-d zero first, then the
// bool mask(s), then where's output; the masks and the zero are freed after it.
namespace {
// clamp_min and clamp_max: one bound, `within` telling where self is inside it (ge for a minimum, le for a
// maximum).
template <typename Within>
std::shared_ptr<FormulaNode> clamp_one_bound(const OpRecord& r, double bound, Within within) {
  auto node = make_node(r, [bound, within](const FormulaNode& n, TensorList& g) {
    const Tensor zero = scalar_tensor(0.0, TensorOptions{g[0].dtype(), g[0].device()});
    return TensorList{where(within(n.saved(0), bound), g[0], zero)};
  });
  node->save("self", r.inputs.at(0));
  return node;
}
}  // namespace

std::shared_ptr<FormulaNode> clamp_min(const OpRecord& r, const op_args::Scalar& args) {
  return clamp_one_bound(r, args.value, [](const Tensor& self, double min) { return ge(self, min); });
}

std::shared_ptr<FormulaNode> clamp_max(const OpRecord& r, const op_args::Scalar& args) {
  return clamp_one_bound(r, args.value, [](const Tensor& self, double max) { return le(self, max); });
}

// Both bounds: (self >= min).logical_and_(self <= max), both masks alive until where's output exists.
std::shared_ptr<FormulaNode> clamp(const OpRecord& r, const op_args::Clamp& args) {
  auto node = make_node(r, [bounds = args](const FormulaNode& n, TensorList& g) {
    const Tensor self = n.saved(0);
    const Tensor zero = scalar_tensor(0.0, TensorOptions{g[0].dtype(), g[0].device()});
    if (bounds.min && bounds.max) {
      const Tensor at_least = ge(self, *bounds.min);
      const Tensor at_most = le(self, *bounds.max);
      logical_and_(at_least, at_most);
      return TensorList{where(at_least, g[0], zero)};
    }
    if (bounds.min) return TensorList{where(ge(self, *bounds.min), g[0], zero)};
    return TensorList{where(le(self, *bounds.max), g[0], zero)};
  });
  node->save("self", r.inputs.at(0));
  return node;
}

// grad * (exponent * self.pow(exponent - 1))
std::shared_ptr<FormulaNode> pow_scalar(const OpRecord& r, const op_args::Scalar& args) {
  auto node = make_node(r, [e = args.value](const FormulaNode& n, TensorList& g) {
    if (e == 0.0) return TensorList{zeros_like(g[0])};
    return TensorList{g[0] * (pow(n.saved(0), e - 1.0) * e)};
  });
  node->save("self", r.inputs.at(0));
  return node;
}

// fill_ and zero_ (derivatives.yaml fill_.Scalar and zero_: self: zeros_like(grad)): nothing saved; backward
// allocates one zeroed gradient, as PyTorch's.
std::shared_ptr<FormulaNode> fill(const OpRecord& r, const op_args::Scalar&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{zeros_like(g[0])}; });
}

std::shared_ptr<FormulaNode> zero(const OpRecord& r, const op_args::None&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{zeros_like(g[0])}; });
}

}  // namespace bytegrad::formulas
