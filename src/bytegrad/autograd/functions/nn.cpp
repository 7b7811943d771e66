// Derivatives of the neural-network ops: (log_)softmax save their result; masked_fill and where save
// their masks; embedding saves its indices; dropout saves its mask; triu/tril (for masks) save nothing.
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

std::shared_ptr<FormulaNode> softmax(const OpRecord& r, const op_args::Dim& args) {
  // _softmax_backward_data(grad, result, dim, self.scalar_type()): a float16 input read as float32
  // (half_to_float) gets its gradient in float16 straight from the kernel.
  auto node = make_node(r, [dim = args.dim, input_dtype = r.inputs.at(0).dtype()](const FormulaNode& n, TensorList& g) {
    return TensorList{softmax_backward(g[0], n.saved(0), dim, false, input_dtype)};
  });
  node->save_output("result", 0);
  node->defers_gradient = true;  // to a masked_fill's backward, or the cast before it (gradient_reader.h)
  node->takes_deferred = true;   // the cast after it (autocast's copy for a product), left to its gradient
  return node;
}

std::shared_ptr<FormulaNode> log_softmax(const OpRecord& r, const op_args::Dim& args) {
  // _log_softmax_backward_data(grad, result, dim, self.scalar_type()): as softmax's, half_to_float's gradient
  // is float16, written by the kernel from the float32 operands (no temporary).
  auto node = make_node(r, [dim = args.dim, input_dtype = r.inputs.at(0).dtype()](const FormulaNode& n, TensorList& g) {
    return TensorList{softmax_backward(g[0], n.saved(0), dim, true, input_dtype)};
  });
  node->save_output("result", 0);
  return node;
}

std::shared_ptr<FormulaNode> masked_fill(const OpRecord& r, const op_args::Scalar&) {  // inputs: self, mask
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{masked_fill(g[0], n.saved(0), 0.0), Tensor()};
  });
  node->save("mask", r.inputs.at(1));
  node->defers_gradient = true;
  node->takes_deferred = true;
  return node;
}

// masked_select saves self and mask (derivatives.yaml); backward: masked_select_backward, zeros of the
// broadcast shape with the gradient scattered in place where the mask is true.
std::shared_ptr<FormulaNode> masked_select(const OpRecord& r, const op_args::None&) {  // inputs: self, mask
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{masked_select_backward(g[0], n.saved(0), n.saved(1)), Tensor()};
  });
  node->save("self", r.inputs.at(0));
  node->save("mask", r.inputs.at(1));
  return node;
}

std::shared_ptr<FormulaNode> where(const OpRecord& r, const op_args::None&) {  // inputs: condition, self, other
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    Tensor cond = n.saved(0);
    TensorList out(3);
    if (n.needs_grad(1)) out[1] = where(cond, g[0], zeros({}, TensorOptions{g[0].dtype(), g[0].device()}));
    if (n.needs_grad(2)) out[2] = where(cond, zeros({}, TensorOptions{g[0].dtype(), g[0].device()}), g[0]);
    return out;
  });
  node->save("condition", r.inputs.at(0));
  return node;
}

// native_dropout: input self; outputs: output, mask (bool, not differentiable, saved after the kernel).
// grad * mask / (1 - p)
std::shared_ptr<FormulaNode> dropout(const OpRecord& r, const op_args::Dropout& args) {
  auto node = make_node(
      r,
      [p = args.p](const FormulaNode& n, TensorList& g) {
        return TensorList{native_dropout_backward(g[0], n.saved(0), 1.0 / (1.0 - p))};
      },
      /*differentiable_outputs=*/1);
  node->save_output("mask", 1);
  return node;
}

// inputs: self, index. zeros, then index_add
std::shared_ptr<FormulaNode> index_select(const OpRecord& r, const op_args::Dim& args) {
  auto node = make_node_keeping_input_shape(r, [dim = args.dim](const FormulaNode& n, TensorList& g) {
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    backend_for(full.device())
        .index_add(full.view_for_kernels(), dim, n.saved(0).view_for_kernels(), g[0].view_for_kernels());
    return TensorList{full, Tensor()};
  });
  node->save("index", r.inputs.at(1));
  return node;
}

// inputs: weight, indices. Dense gradient
std::shared_ptr<FormulaNode> embedding(const OpRecord& r, const op_args::None&) {
  auto node = make_node_keeping_input_shape(r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{embedding_dense_backward(g[0], n.saved(0), n.shapes.at(0).at(0)), Tensor()};
  });
  node->save("indices", r.inputs.at(1));
  return node;
}

// grad.triu(diagonal): saves nothing
std::shared_ptr<FormulaNode> triu(const OpRecord& r, const op_args::Diagonal& args) {
  return make_node(
      r, [d = args.diagonal](const FormulaNode&, TensorList& g) { return TensorList{bytegrad::triu(g[0], d)}; });
}

// grad.tril(diagonal): saves nothing
std::shared_ptr<FormulaNode> tril(const OpRecord& r, const op_args::Diagonal& args) {
  return make_node(
      r, [d = args.diagonal](const FormulaNode&, TensorList& g) { return TensorList{bytegrad::tril(g[0], d)}; });
}

}  // namespace bytegrad::formulas
