// Matrix products. mm's gradients follow the layout of the operand they are for (PyTorch's
// mm_mat1_backward / mm_mat2_backward): for a column-major operand (such as weight.t() in Linear) the
// gradient is computed transposed, so after TBackward it lands in the parameter's own layout and
// AccumulateGrad can keep it without a copy.
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

namespace {

bool column_major(const Shape& sizes, const Shape& strides) {
  return sizes.size() == 2 && strides[0] == 1 && strides[1] == sizes[0];
}

Tensor maybe_multiply(const Tensor& t, double alpha) { return alpha == 1.0 ? t : t * alpha; }

// Gradient of mat1 in mat1 @ mat2.
Tensor mm_mat1_backward(const Tensor& grad, const Tensor& mat2, const Shape& mat1_sizes, const Shape& mat1_strides,
                        double alpha) {
  if (column_major(mat1_sizes, mat1_strides)) return maybe_multiply(mm(mat2, grad.t()).t(), alpha);
  return maybe_multiply(mm(grad, mat2.t()), alpha);
}

// Gradient of mat2 in mat1 @ mat2.
Tensor mm_mat2_backward(const Tensor& grad, const Tensor& mat1, const Shape& mat2_sizes, const Shape& mat2_strides,
                        double alpha) {
  if (column_major(mat2_sizes, mat2_strides)) return maybe_multiply(mm(grad.t(), mat1).t(), alpha);
  return maybe_multiply(mm(mat1.t(), grad), alpha);
}

// shapes: mat1 sizes, mat1 strides, mat2 sizes, mat2 strides; saved: mat1 (if mat2 needs grad), mat2
// (if mat1 needs grad).
std::shared_ptr<FormulaNode> save_for_product(const std::shared_ptr<FormulaNode>& node, const Tensor& mat1,
                                              const Tensor& mat2, size_t mat1_input, size_t mat2_input) {
  node->shapes = {mat1.sizes(), mat1.strides(), mat2.sizes(), mat2.strides()};
  if (node->needs_grad(mat2_input)) node->save("mat1", mat1);
  if (node->needs_grad(mat1_input)) node->save("mat2", mat2);
  return node;
}

}  // namespace

std::shared_ptr<FormulaNode> mm(const OpRecord& r, const op_args::None&) {  // inputs: self (mat1), mat2
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    // mat2's gradient first, then self's: PyTorch 2.11's MmBackward0 computes them in that order (measured
    // on the H100, events.jsonl "linear nobias" rows: the weight's gradient is allocated before the
    // input's), unlike AddmmBackward0 below (mat1 before mat2).
    TensorList out(2);
    if (n.needs_grad(1)) out[1] = mm_mat2_backward(g[0], n.saved("mat1"), n.shapes[2], n.shapes[3], 1.0);
    if (n.needs_grad(0)) out[0] = mm_mat1_backward(g[0], n.saved("mat2"), n.shapes[0], n.shapes[1], 1.0);
    return out;
  });
  save_for_product(node, r.inputs.at(0), r.inputs.at(1), 0, 1);
  return node;
}

// inputs: self (the added term), mat1, mat2. The self gradient is grad itself (summed down to the bias
// by the engine), then mat1's, then mat2's, in PyTorch's order.
std::shared_ptr<FormulaNode> addmm(const OpRecord& r, const op_args::Addmm& args) {
  auto node = make_node(r, [beta = args.beta, alpha = args.alpha](const FormulaNode& n, TensorList& g) {
    TensorList out(3);
    if (n.needs_grad(0)) out[0] = maybe_multiply(g[0], beta);
    if (n.needs_grad(1)) out[1] = mm_mat1_backward(g[0], n.saved("mat2"), n.shapes[0], n.shapes[1], alpha);
    if (n.needs_grad(2)) out[2] = mm_mat2_backward(g[0], n.saved("mat1"), n.shapes[2], n.shapes[3], alpha);
    return out;
  });
  save_for_product(node, r.inputs.at(1), r.inputs.at(2), 1, 2);
  return node;
}

std::shared_ptr<FormulaNode> bmm(const OpRecord& r, const op_args::None&) {  // self @ mat2, batched
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    // mat2's gradient first, as MmBackward0 (measured: attention's attn @ v backward allocates v's
    // gradient, then attn's; tests/data/pytorch_probes/t0 traces of x_tiny_transformer_adamw).
    TensorList out(2);
    if (n.needs_grad(1)) out[1] = bmm(n.saved("mat1").transpose(1, 2), g[0]);
    if (n.needs_grad(0)) out[0] = bmm(g[0], n.saved("mat2").transpose(1, 2));
    return out;
  });
  // Saved (and released) mat2 first, then self: BmmBackward0's saved variables in the order its formulas
  // name them (self's uses mat2). Recorded where the two differ in size and only the node holds them:
  // attention's q k^T product with S != L, and attn @ v after dropout (tests/data/pytorch_probes/sdpa_mask).
  node->shapes = {r.inputs.at(0).sizes(), r.inputs.at(0).strides(), r.inputs.at(1).sizes(), r.inputs.at(1).strides()};
  if (node->needs_grad(0)) node->save("mat2", r.inputs.at(1));
  if (node->needs_grad(1)) node->save("mat1", r.inputs.at(0));
  return node;
}

// derivatives.yaml's dot: self: grad * tensor, tensor: grad * self (each saved only when the other
// operand needs a gradient), computed in input order.
std::shared_ptr<FormulaNode> dot(const OpRecord& r, const op_args::None&) { return product_rule(r, "tensor"); }

// derivatives.yaml's mv: self: grad.ger(vec) (outer: one matrix-sized product), vec: self.t().mv(grad).
std::shared_ptr<FormulaNode> mv(const OpRecord& r, const op_args::None&) {
  auto node = make_node(r, [](const FormulaNode& n, TensorList& g) {
    TensorList out(2);
    if (n.needs_grad(0)) out[0] = outer(g[0], n.saved("vec"));
    if (n.needs_grad(1)) out[1] = bytegrad::mv(n.saved("self").t(), g[0]);
    return out;
  });
  if (node->needs_grad(1)) node->save("self", r.inputs.at(0));
  if (node->needs_grad(0)) node->save("vec", r.inputs.at(1));
  return node;
}

}  // namespace bytegrad::formulas
