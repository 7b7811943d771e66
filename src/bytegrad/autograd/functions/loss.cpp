// Derivatives of the losses, as derivatives.yaml states them. nll_loss saves its input (log_probs), the
// target, the class weights (when given) and total_weight (kept alive until backward); its backward
// allocates one zeroed input-sized gradient. mse_loss saves input and target; its backward allocates one input-sized
// gradient per operand that needs one (the target's is mse_loss_backward(grad, target, input)).
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

// inputs: log_probs, target, weight (undefined when absent; never requires grad); outputs: output,
// total_weight (not differentiable, saved after the kernel)
std::shared_ptr<FormulaNode> nll_loss(const OpRecord& r, const op_args::NllLoss& args) {
  auto node = make_node(
      r,
      [args](const FormulaNode& n, TensorList& g) {
        const Tensor& weight = n.saved(2);
        return TensorList{nll_loss_backward(g[0], n.saved(0), n.saved(1), n.saved(3), args.reduction, args.ignore_index,
                                            weight.defined() ? std::optional<Tensor>(weight) : std::nullopt),
                          Tensor(), Tensor()};
      },
      /*differentiable_outputs=*/1);
  node->save("self", r.inputs.at(0));
  node->save("target", r.inputs.at(1));
  node->save("weight", r.inputs.at(2));
  node->save_output("total_weight", 1);
  return node;
}

// inputs: self, target
std::shared_ptr<FormulaNode> mse_loss(const OpRecord& r, const op_args::LossReduction& args) {
  auto node = make_node(r, [reduction = args.reduction](const FormulaNode& n, TensorList& g) {
    TensorList out(2);
    if (n.needs_grad(0)) out[0] = mse_loss_backward(g[0], n.saved(0), n.saved(1), reduction);
    if (n.needs_grad(1)) out[1] = mse_loss_backward(g[0], n.saved(1), n.saved(0), reduction);
    return out;
  });
  node->save("self", r.inputs.at(0));
  node->save("target", r.inputs.at(1));
  return node;
}

// inputs: self, target (derivatives.yaml: binary_cross_entropy_with_logits_backward and its target_backward,
// without weights): (sigmoid(self) - target) * grad and -self * grad, each divided by numel in place for mean.
// (tests/programs/op_events.cpp holds the input's gradient to PyTorch's one allocation.)
std::shared_ptr<FormulaNode> binary_cross_entropy_with_logits(const OpRecord& r, const op_args::LossReduction& args) {
  auto node = make_node(r, [reduction = args.reduction](const FormulaNode& n, TensorList& g) {
    TensorList out(2);
    const Tensor input = n.saved(0);
    const auto numel = static_cast<double>(input.numel());
    if (n.needs_grad(0)) {
      // One allocation, as PyTorch's fused backward kernel makes (recorded): the sigmoid, then in place.
      out[0] = sigmoid(input);
      out[0].sub_(n.saved(1));
      out[0].mul_(g[0]);
      if (reduction == Reduction::mean) out[0].div_(numel);
    }
    if (n.needs_grad(1)) {
      out[1] = -input;
      out[1].mul_(g[0]);
      if (reduction == Reduction::mean) out[1].div_(numel);
    }
    return out;
  });
  node->save("self", r.inputs.at(0));
  node->save("target", r.inputs.at(1));
  return node;
}

}  // namespace bytegrad::formulas
