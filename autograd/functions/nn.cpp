// Derivatives of the neural-network ops: (log_)softmax save their result; masked_fill and where save
// their masks; embedding saves its indices; dropout saves its mask; triu/tril (for masks) save nothing.
#include "autograd/functions/formulas.h"
#include "tensor/ops.h"

namespace bytegrad::formulas {

void softmax(const OpRecord& r) {  // ints: dim
  auto node = make_node("SoftmaxBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{softmax_backward(g[0], n.saved(0), n.ints.at(0), false)};
  });
  node->ints = r.ints;
  node->save("result", r.outputs.at(0));
}

void log_softmax(const OpRecord& r) {  // ints: dim
  auto node = make_node("LogSoftmaxBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{softmax_backward(g[0], n.saved(0), n.ints.at(0), true)};
  });
  node->ints = r.ints;
  node->save("result", r.outputs.at(0));
}

void masked_fill(const OpRecord& r) {  // inputs: self, mask
  auto node = make_node("MaskedFillBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{masked_fill(g[0], n.saved(0), 0.0), Tensor()};
  });
  node->save("mask", r.inputs.at(1));
}

void where(const OpRecord& r) {  // inputs: condition, self, other
  auto node = make_node("WhereBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Tensor cond = n.saved(0);
    TensorList out(3);
    if (n.needs_grad(1)) out[1] = where(cond, g[0], zeros({}, TensorOptions{g[0].dtype(), g[0].device()}));
    if (n.needs_grad(2)) out[2] = where(cond, zeros({}, TensorOptions{g[0].dtype(), g[0].device()}), g[0]);
    return out;
  });
  node->save("condition", r.inputs.at(0));
}

void dropout(const OpRecord& r) {  // inputs: self, mask (bool); scalars: p. grad * mask / (1 - p)
  auto node = make_node("NativeDropoutBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{native_dropout_backward(g[0], n.saved(0), 1.0 / (1.0 - n.scalars.at(0))), Tensor()};
  });
  node->scalars = r.scalars;
  node->save("mask", r.inputs.at(1));
}

void index_select(const OpRecord& r) {  // inputs: self, index; ints: dim. zeros, then index_add
  auto node = make_node("IndexSelectBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    backend_for(full.device()).index_add(full.view_for_kernels(), n.ints.at(0), n.saved(0).view_for_kernels(),
                                         g[0].view_for_kernels());
    return TensorList{full, Tensor()};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
  node->save("index", r.inputs.at(1));
}

void embedding(const OpRecord& r) {  // inputs: weight, indices. The gradient is dense: zeros + index_add
  auto node = make_node("EmbeddingBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Tensor indices = n.saved(0).reshape({-1});
    Tensor grad_rows = g[0].reshape({indices.numel(), n.shapes.at(0).at(1)});
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    backend_for(full.device()).index_add(full.view_for_kernels(), 0, indices.view_for_kernels(),
                                         grad_rows.view_for_kernels());
    return TensorList{full, Tensor()};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->save("indices", r.inputs.at(1));
}

void triu(const OpRecord& r) {  // ints: diagonal. grad.triu(diagonal): saves nothing
  auto node = make_node("TriuBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{bytegrad::triu(g[0], n.ints.at(0))};
  });
  node->ints = r.ints;
}

void tril(const OpRecord& r) {  // ints: diagonal. grad.tril(diagonal): saves nothing
  auto node = make_node("TrilBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{bytegrad::tril(g[0], n.ints.at(0))};
  });
  node->ints = r.ints;
}

}  // namespace bytegrad::formulas
