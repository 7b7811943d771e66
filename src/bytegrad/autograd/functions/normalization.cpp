// Derivative of native_layer_norm, as derivatives.yaml states it: NativeLayerNormBackward0 saves input,
// weight, bias and the forward's mean and rstd (result1, result2); its backward computes grad_input,
// grad_weight and grad_bias only for the inputs that need one (grad_input_mask). The saved mean and rstd
// are what a layer norm keeps alive until backward beyond its input and parameters: 2 * M float32 values.
// (PyTorch switches to a twice-differentiable composite formula under create_graph; bytegrad's backward
// always runs the fused op, so layer norm is differentiable once.) _fused_rms_norm likewise:
// FusedRmsNormBackward0 saves input, weight and rstd (result1); backward is _fused_rms_norm_backward.
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

namespace {

std::optional<Tensor> optional_of(const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; }

}  // namespace

// inputs: input, weight, bias (undefined where absent); outputs: output, mean, rstd (only the output
// differentiable). The inputs are saved before the kernel runs, mean and rstd (result1, result2) after.
std::shared_ptr<FormulaNode> native_layer_norm(const OpRecord& r, const op_args::LayerNorm& args) {
  auto node = make_node(
      r,
      [shape = args.normalized_shape](const FormulaNode& n, TensorList& g) {
        TensorList out(3);
        if (!g[0].defined()) return out;
        const std::array<bool, 3> mask = {n.needs_grad(0), n.needs_grad(1), n.needs_grad(2)};
        LayerNormGrads grads = native_layer_norm_backward(g[0], n.saved(0), shape, n.saved(3), n.saved(4),
                                                          optional_of(n.saved(1)), optional_of(n.saved(2)), mask);
        out[0] = std::move(grads.grad_input);
        out[1] = std::move(grads.grad_weight);
        out[2] = std::move(grads.grad_bias);
        return out;
      },
      /*differentiable_outputs=*/1);
  node->save("input", r.inputs.at(0));
  node->save("weight", r.inputs.at(1));
  node->save("bias", r.inputs.at(2));
  node->save_output("result1", 1);
  node->save_output("result2", 2);
  return node;
}

// inputs: input, weight (undefined where absent); outputs: output, rstd (only the output differentiable).
std::shared_ptr<FormulaNode> fused_rms_norm(const OpRecord& r, const op_args::LayerNorm& args) {
  auto node = make_node(
      r,
      [shape = args.normalized_shape](const FormulaNode& n, TensorList& g) {
        TensorList out(2);
        if (!g[0].defined()) return out;
        RmsNormGrads grads = fused_rms_norm_backward(g[0], n.saved(0), shape, n.saved(2), optional_of(n.saved(1)),
                                                     {n.needs_grad(0), n.needs_grad(1)});
        out[0] = std::move(grads.grad_input);
        out[1] = std::move(grads.grad_weight);
        return out;
      },
      /*differentiable_outputs=*/1);
  node->save("input", r.inputs.at(0));
  node->save("weight", r.inputs.at(1));
  node->save_output("result1", 1);
  return node;
}

}  // namespace bytegrad::formulas
