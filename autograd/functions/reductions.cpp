// Derivatives of reductions. sum's gradient is a view (expand), so it allocates nothing; mean's divides,
// allocating one input-sized tensor. norm, var and std follow FunctionsManual.cpp's norm_backward,
// var_backward and std_backward expression for expression (their temporaries are PyTorch's; where C++ leaves
// the order of a product's operands open, the same expression compiled by GCC evaluates as PyTorch's does).
#include <algorithm>

#include "autograd/functions/formulas.h"
#include "tensor/ops.h"

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

void sum(const OpRecord& r) {
  auto node = make_node("SumBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].expand(n.shapes.at(0))};
  });
  node->shapes = {r.inputs.at(0).sizes()};
}

// ints: keepdim, then the reduced dims (already wrapped)
void sum_dims(const OpRecord& r) {
  auto node = make_node("SumBackward1", r, [](const FormulaNode& n, TensorList& g) {
    Shape dims(n.ints.begin() + 1, n.ints.end());
    return TensorList{expand_back(g[0], n.shapes.at(0), dims, n.ints.at(0) != 0)};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
}

void mean(const OpRecord& r) {
  auto node = make_node("MeanBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].expand(n.shapes.at(0)) / static_cast<double>(shape_numel(n.shapes.at(0)))};
  });
  node->shapes = {r.inputs.at(0).sizes()};
}

void mean_dims(const OpRecord& r) {
  auto node = make_node("MeanBackward1", r, [](const FormulaNode& n, TensorList& g) {
    Shape dims(n.ints.begin() + 1, n.ints.end());
    int64_t count = 1;
    for (int64_t d : dims) count *= n.shapes.at(0)[d];
    return TensorList{expand_back(g[0], n.shapes.at(0), dims, n.ints.at(0) != 0) / static_cast<double>(count)};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
}

namespace {

// FunctionsManual's unsqueeze_multiple: dims (wrapped) restored as size 1, in increasing order.
Tensor unsqueeze_dims(Tensor t, Shape dims) {
  std::sort(dims.begin(), dims.end());
  for (int64_t d : dims) t = t.unsqueeze(d);
  return t;
}

// var_backward(grad, self, dim, correction, keepdim); ints: keepdim, whole (dim=None), wrapped dims...
Tensor var_backward(Tensor grad, const Tensor& self, const FormulaNode& n) {
  const double correction = n.scalars.at(0);
  const bool keepdim = n.ints.at(0) != 0;
  const bool whole = n.ints.at(1) != 0;
  const Shape dims(n.ints.begin() + 2, n.ints.end());
  if (self.dim() == 0 || whole) {
    // dof <= 0 (n <= correction): 2 / dof is inf (or negative), and the gradient inf/NaN, as the forward.
    const double dof = static_cast<double>(self.numel()) - correction;
    return (2.0 / dof) * grad * (self - self.mean());
  }
  if (!keepdim && self.dim() > 1) grad = unsqueeze_dims(grad, dims);
  int64_t rnumel = 1;
  for (int64_t d : dims) rnumel *= self.sizes()[d];
  return (2.0 / (static_cast<double>(rnumel) - correction)) * grad * (self - self.mean(dims, /*keepdim=*/true));
}

}  // namespace

// linalg_vector_norm (ord 2): grad * (self / norm), 0 where norm == 0. ints: keepdim, wrapped dims (none:
// every dimension). Saves self and result.
void norm(const OpRecord& r) {
  auto node = make_node("LinalgVectorNormBackward0", r, [](const FormulaNode& n, TensorList& g) {
    const Tensor self = n.saved(0);
    Tensor result = n.saved(1);
    Tensor grad = g[0];
    const Shape dims(n.ints.begin() + 1, n.ints.end());
    if (n.ints.at(0) == 0 && self.dim() != 0) {
      grad = unsqueeze_dims(grad, dims);
      result = unsqueeze_dims(result, dims);
    }
    return TensorList{grad * (self / result).masked_fill_(result == 0.0, 0.0)};
  });
  node->ints = r.ints;
  node->save("self", r.inputs.at(0));
  node->save("result", r.outputs.at(0));
}

// var.correction: scalars: correction; ints: keepdim, whole, wrapped dims. Saves self.
void var(const OpRecord& r) {
  auto node = make_node("VarBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{var_backward(g[0], n.saved(0), n)};
  });
  node->scalars = r.scalars;
  node->ints = r.ints;
  node->save("self", r.inputs.at(0));
}

// std.correction: var_backward of grad / (2 * result) (0 where result == 0). Saves self and result.
void std(const OpRecord& r) {
  auto node = make_node("StdBackward0", r, [](const FormulaNode& n, TensorList& g) {
    const Tensor result = n.saved(1);
    Tensor grad_var = (g[0] / (result * 2.0)).masked_fill_(result == 0.0, 0.0);
    return TensorList{var_backward(grad_var, n.saved(0), n)};
  });
  node->scalars = r.scalars;
  node->ints = r.ints;
  node->save("self", r.inputs.at(0));
  node->save("result", r.outputs.at(0));
}

}  // namespace bytegrad::formulas
