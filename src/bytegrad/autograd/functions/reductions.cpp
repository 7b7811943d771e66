// Derivatives of reductions. sum's gradient is a view (expand), so it allocates nothing; mean's divides,
// allocating one input-sized tensor. norm, var and std follow FunctionsManual.cpp's norm_backward,
// var_backward and std_backward expression for expression (their temporaries are PyTorch's; where C++ leaves
// the order of a product's operands open, the same expression compiled by GCC evaluates as PyTorch's does).
#include <algorithm>

#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

namespace {

// Restores the reduced dimensions as size 1 (when keepdim was false) and expands back: views only.
Tensor expand_back(const Tensor& grad, const Shape& input_sizes, Shape dims, bool keepdim) {
  Tensor g = grad;
  if (!keepdim && !input_sizes.empty()) {
    std::sort(dims.begin(), dims.end());
    for (int64_t d : dims) g = g.unsqueeze(d);
  }
  return g.expand(input_sizes);
}

}  // namespace

std::shared_ptr<FormulaNode> sum(const OpRecord& r, const op_args::None&) {
  return make_node_keeping_input_shape(
      r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0].expand(n.shapes.at(0))}; });
}

std::shared_ptr<FormulaNode> sum_dims(const OpRecord& r, const op_args::Dims& args) {
  return make_node_keeping_input_shape(r, [args](const FormulaNode& n, TensorList& g) {
    return TensorList{expand_back(g[0], n.shapes.at(0), args.dims, args.keepdim)};
  });
}

std::shared_ptr<FormulaNode> mean(const OpRecord& r, const op_args::None&) {
  return make_node_keeping_input_shape(r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].expand(n.shapes.at(0)) / static_cast<double>(shape_numel(n.shapes.at(0)))};
  });
}

std::shared_ptr<FormulaNode> mean_dims(const OpRecord& r, const op_args::Dims& args) {
  return make_node_keeping_input_shape(r, [args](const FormulaNode& n, TensorList& g) {
    int64_t count = 1;
    for (int64_t d : args.dims) count *= n.shapes.at(0)[d];
    return TensorList{expand_back(g[0], n.shapes.at(0), args.dims, args.keepdim) / static_cast<double>(count)};
  });
}

namespace {

// FunctionsManual's unsqueeze_multiple: dims (wrapped) restored as size 1, in increasing order.
Tensor unsqueeze_dims(Tensor t, Shape dims) {
  std::sort(dims.begin(), dims.end());
  for (int64_t d : dims) t = t.unsqueeze(d);
  return t;
}

// var_backward(grad, self, dim, correction, keepdim)
Tensor var_backward(Tensor grad, const Tensor& self, const op_args::Variance& args) {
  const double correction = args.correction;
  const Shape& dims = args.dims;
  if (self.dim() == 0 || args.whole) {
    // dof <= 0 (n <= correction): 2 / dof is inf (or negative), and the gradient inf/NaN, as the forward.
    const double dof = static_cast<double>(self.numel()) - correction;
    return (2.0 / dof) * grad * (self - self.mean());
  }
  if (!args.keepdim && self.dim() > 1) grad = unsqueeze_dims(grad, dims);
  int64_t rnumel = 1;
  for (int64_t d : dims) rnumel *= self.sizes()[d];
  return (2.0 / (static_cast<double>(rnumel) - correction)) * grad * (self - self.mean(dims, /*keepdim=*/true));
}

}  // namespace

// linalg_vector_norm (ord 2): grad * (self / norm), 0 where norm == 0 (args.dims empty: every
// dimension). Saves self and result.
std::shared_ptr<FormulaNode> norm(const OpRecord& r, const op_args::Dims& args) {
  auto node = make_node(r, [args](const FormulaNode& n, TensorList& g) {
    const Tensor self = n.saved(0);
    Tensor result = n.saved(1);
    Tensor grad = g[0];
    if (!args.keepdim && self.dim() != 0) {
      grad = unsqueeze_dims(grad, args.dims);
      result = unsqueeze_dims(result, args.dims);
    }
    return TensorList{grad * (self / result).masked_fill_(result == 0.0, 0.0)};
  });
  node->save("self", r.inputs.at(0));
  node->save_output("result", 0);
  return node;
}

// var.correction: saves self.
std::shared_ptr<FormulaNode> var(const OpRecord& r, const op_args::Variance& args) {
  auto node = make_node(
      r, [args](const FormulaNode& n, TensorList& g) { return TensorList{var_backward(g[0], n.saved(0), args)}; });
  node->save("self", r.inputs.at(0));
  return node;
}

// std.correction: var_backward of grad / (2 * result) (0 where result == 0). Saves self and result.
std::shared_ptr<FormulaNode> std(const OpRecord& r, const op_args::Variance& args) {
  auto node = make_node(r, [args](const FormulaNode& n, TensorList& g) {
    const Tensor result = n.saved(1);
    Tensor grad_var = (g[0] / (result * 2.0)).masked_fill_(result == 0.0, 0.0);
    return TensorList{var_backward(grad_var, n.saved(0), args)};
  });
  node->save("self", r.inputs.at(0));
  node->save_output("result", 0);
  return node;
}

}  // namespace bytegrad::formulas
