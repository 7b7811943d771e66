// Derivatives of views and copies. Most are views of the gradient (no allocation); select, slice and
// unbind/stack build a full-size gradient, and expand sums down, as PyTorch's formulas do.
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

std::shared_ptr<FormulaNode> view(const OpRecord& r, const op_args::None&) {  // also reshape when it returned a view
  return make_node_keeping_input_shape(
      r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0].reshape(n.shapes.at(0))}; });
}

std::shared_ptr<FormulaNode> t(const OpRecord& r, const op_args::None&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0].t()}; });
}

std::shared_ptr<FormulaNode> transpose(const OpRecord& r, const op_args::Transpose& args) {
  return make_node(
      r, [args](const FormulaNode&, TensorList& g) { return TensorList{g[0].transpose(args.dim0, args.dim1)}; });
}

std::shared_ptr<FormulaNode> permute(const OpRecord& r, const op_args::Permutation& args) {  // the order is wrapped
  return make_node(r, [order = args.order](const FormulaNode&, TensorList& g) {
    Shape inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    return TensorList{g[0].permute(inverse)};
  });
}

// the engine sums the gradient down to the input's shape
std::shared_ptr<FormulaNode> expand(const OpRecord& r, const op_args::None&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0]}; });
}

std::shared_ptr<FormulaNode> unsqueeze(const OpRecord& r, const op_args::Dim& args) {
  return make_node(r, [dim = args.dim](const FormulaNode&, TensorList& g) { return TensorList{g[0].squeeze(dim)}; });
}

// back to the input's sizes (only size-1 dims return)
std::shared_ptr<FormulaNode> squeeze(const OpRecord& r, const op_args::None&) {
  return make_node_keeping_input_shape(
      r, [](const FormulaNode& n, TensorList& g) { return TensorList{g[0].view(n.shapes.at(0))}; });
}

// A full-size zero gradient with the incoming one copied into the selected part: one allocation.
std::shared_ptr<FormulaNode> select(const OpRecord& r, const op_args::Select& args) {
  return make_node_keeping_input_shape(r, [args](const FormulaNode& n, TensorList& g) {
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    full.select(args.dim, args.index).copy_(g[0]);
    return TensorList{full};
  });
}

std::shared_ptr<FormulaNode> slice(const OpRecord& r, const op_args::Slice& args) {
  return make_node_keeping_input_shape(r, [args](const FormulaNode& n, TensorList& g) {
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    full.slice(args.dim, args.start, args.end, args.step).copy_(g[0]);
    return TensorList{full};
  });
}

// constant_pad_nd_backward: the gradient cropped back by the negated pads, a new tensor (PyTorch's
// constant_pad_nd clones when nothing is padded), so each padded input's gradient is one allocation.
std::shared_ptr<FormulaNode> constant_pad_nd(const OpRecord& r, const op_args::Pad& args) {
  Shape negated = args.pad;
  for (int64_t& p : negated) p = -p;
  return make_node(
      r, [negated](const FormulaNode&, TensorList& g) { return TensorList{bytegrad::constant_pad_nd(g[0], negated)}; });
}

// unbind's outputs' gradients are stacked into one tensor (missing ones as zeros).
std::shared_ptr<FormulaNode> unbind(const OpRecord& r, const op_args::Dim& args) {
  return make_node_keeping_input_shape(r, [dim = args.dim](const FormulaNode& n, TensorList& g) {
    Shape part_sizes = n.shapes.at(0);
    part_sizes.erase(part_sizes.begin() + dim);
    const Tensor* any = nullptr;
    for (const Tensor& t : g)
      if (t.defined()) any = &t;
    if (any == nullptr) return TensorList{Tensor()};  // no output had a gradient: none for the input either
    for (Tensor& t : g)
      if (!t.defined()) t = zeros(part_sizes, TensorOptions{any->dtype(), any->device()});
    return TensorList{stack(g, dim)};
  });
}

// split's outputs' gradients are concatenated into one tensor; a part without a gradient contributes
// zeros of its size, allocated first (PyTorch's split_with_sizes_backward).
std::shared_ptr<FormulaNode> split(const OpRecord& r, const op_args::Split& args) {
  return make_node_keeping_input_shape(r, [args](const FormulaNode& n, TensorList& g) {
    const int64_t split_size = args.split_size, dim = args.dim;
    const Shape& full = n.shapes.at(0);
    const Tensor* any = nullptr;
    for (const Tensor& t : g)
      if (t.defined()) any = &t;
    for (size_t j = 0; j < g.size(); ++j) {
      if (g[j].defined()) continue;
      Shape part = full;
      part[dim] = std::min<int64_t>(split_size, full[dim] - static_cast<int64_t>(j) * split_size);
      g[j] = zeros(part, TensorOptions{any->dtype(), any->device()});
    }
    return TensorList{cat(g, dim)};
  });
}

// each input's gradient is a view of the incoming one
std::shared_ptr<FormulaNode> stack(const OpRecord& r, const op_args::Dim& args) {
  return make_node(r, [dim = args.dim](const FormulaNode& n, TensorList& g) {
    TensorList parts = g[0].unbind(dim);
    TensorList out(n.next_edges.size());
    for (size_t i = 0; i < out.size(); ++i)
      if (n.needs_grad(i)) out[i] = parts[i];
    return out;
  });
}

// each input's gradient is a narrow view; a legacy empty input (shape [0], which cat skipped) gets an
// empty gradient of its shape, as PyTorch's cat_tensors_backward (no allocation: 0 bytes)
std::shared_ptr<FormulaNode> cat(const OpRecord& r, const op_args::Dim& args) {
  auto node = make_node(r, [dim = args.dim](const FormulaNode& n, TensorList& g) {
    TensorList out(n.next_edges.size());
    int64_t offset = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const Shape& shape = n.shapes.at(i);
      if (shape.size() == 1 && shape[0] == 0) {
        if (n.needs_grad(i)) out[i] = zeros({0}, TensorOptions{g[0].dtype(), g[0].device()});
        continue;
      }
      const int64_t length = shape.at(static_cast<size_t>(dim));
      if (n.needs_grad(i)) out[i] = g[0].narrow(dim, offset, length);
      offset += length;
    }
    return out;
  });
  for (const Tensor& input : r.inputs) node->shapes.push_back(input.sizes());
  return node;
}

std::shared_ptr<FormulaNode> clone(const OpRecord& r, const op_args::None&) {
  return make_node(r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0]}; });
}

std::shared_ptr<FormulaNode> to_device(const OpRecord& r, const op_args::None&) {
  return make_node(
      r, [source = r.inputs.at(0).device()](const FormulaNode&, TensorList& g) { return TensorList{g[0].to(source)}; });
}

std::shared_ptr<FormulaNode> to_dtype(const OpRecord& r, const op_args::None&) {
  const ScalarType source = r.inputs.at(0).dtype();
  auto node = make_node(r, [source](const FormulaNode&, TensorList& g) { return TensorList{g[0].to(source)}; });
  node->casts_gradient_to = source;
  node->defers_gradient = true;  // a packed gradient's values, copied (gradient_reader.h)
  node->takes_deferred = true;   // softmax's gradient on slow attention's way back
  return node;
}

}  // namespace bytegrad::formulas
