// Derivatives of the ops along one dimension (tensor/ops_sort.cpp). cumsum saves nothing; its backward is
// FunctionsManual's cumsum_backward: the gradient itself when there is nothing to sum, else
// grad.flip(dim).cumsum(dim).flip(dim) (three allocations, the first two freed at the end of the
// expression). sort and topk save their indices; backward makes zeros of the input's shape and scatters the
// gradient into them (value_selecting_reduction_backward).
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

std::shared_ptr<FormulaNode> cumsum(const OpRecord& r, const op_args::Dim& args) {
  return make_node_keeping_input_shape(
      r, [dim = args.dim, dtype = r.inputs.at(0).dtype()](const FormulaNode& n, TensorList& g) {
        const Tensor grad = g[0].to(dtype);
        const Shape& sizes = n.shapes.at(0);
        if (grad.numel() <= 1 || sizes.empty() || sizes[static_cast<size_t>(dim)] == 1) return TensorList{grad};
        return TensorList{flip(cumsum(flip(grad, dim), dim), dim)};
      });
}

std::shared_ptr<FormulaNode> sort(const OpRecord& r, const op_args::Sort& args) {
  auto node = make_node_keeping_input_shape(r, [dim = args.dim](const FormulaNode& n, TensorList& g) {
    return TensorList{value_selecting_backward(g[0], dim, n.saved(0), n.shapes.at(0))};
  });
  node->save_output("indices", 1);
  return node;
}

std::shared_ptr<FormulaNode> topk(const OpRecord& r, const op_args::TopK& args) {
  auto node = make_node_keeping_input_shape(r, [dim = args.dim](const FormulaNode& n, TensorList& g) {
    return TensorList{value_selecting_backward(g[0], dim, n.saved(0), n.shapes.at(0))};
  });
  node->save_output("indices", 1);
  return node;
}

}  // namespace bytegrad::formulas
