// Derivatives of views and copies. Most are views of the gradient (no allocation); select, slice and
// unbind/stack build a full-size gradient, and expand sums down, as PyTorch's formulas do.
#include "autograd/functions/formulas.h"
#include "tensor/ops.h"

namespace bytegrad::formulas {

void view(const OpRecord& r) {  // also reshape when it returned a view
  auto node = make_node("ViewBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].reshape(n.shapes.at(0))};
  });
  node->shapes = {r.inputs.at(0).sizes()};
}

void t(const OpRecord& r) {
  make_node("TBackward0", r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0].t()}; });
}

void transpose(const OpRecord& r) {  // ints: dim0, dim1
  auto node = make_node("TransposeBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].transpose(n.ints.at(0), n.ints.at(1))};
  });
  node->ints = r.ints;
}

void permute(const OpRecord& r) {  // ints: the order (wrapped)
  auto node = make_node("PermuteBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Shape inverse(n.ints.size());
    for (size_t i = 0; i < n.ints.size(); ++i) inverse[static_cast<size_t>(n.ints[i])] = static_cast<int64_t>(i);
    return TensorList{g[0].permute(inverse)};
  });
  node->ints = r.ints;
}

void expand(const OpRecord& r) {  // the engine sums the gradient down to the input's shape
  make_node("ExpandBackward0", r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0]}; });
}

void unsqueeze(const OpRecord& r) {  // ints: dim (wrapped)
  auto node = make_node("UnsqueezeBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].squeeze(n.ints.at(0))};
  });
  node->ints = r.ints;
}

void squeeze(const OpRecord& r) {  // any squeeze: back to the input's sizes (views: only size-1 dims return)
  auto node = make_node("SqueezeBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].view(n.shapes.at(0))};
  });
  node->shapes = {r.inputs.at(0).sizes()};
}

// A full-size zero gradient with the incoming one copied into the selected part: one allocation.
void select(const OpRecord& r) {  // ints: dim, index (wrapped)
  auto node = make_node("SelectBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    full.select(n.ints.at(0), n.ints.at(1)).copy_(g[0]);
    return TensorList{full};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
}

void slice(const OpRecord& r) {  // ints: dim, start, end, step (resolved)
  auto node = make_node("SliceBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Tensor full = zeros(n.shapes.at(0), TensorOptions{g[0].dtype(), g[0].device()});
    full.slice(n.ints.at(0), n.ints.at(1), n.ints.at(2), n.ints.at(3)).copy_(g[0]);
    return TensorList{full};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
}

// unbind's outputs' gradients are stacked into one tensor (missing ones as zeros).
void unbind(const OpRecord& r) {  // ints: dim
  auto node = make_node("UnbindBackward0", r, [](const FormulaNode& n, TensorList& g) {
    Shape part_sizes = n.shapes.at(0);
    part_sizes.erase(part_sizes.begin() + n.ints.at(0));
    const Tensor* any = nullptr;
    for (const Tensor& t : g)
      if (t.defined()) any = &t;
    for (Tensor& t : g)
      if (!t.defined()) t = zeros(part_sizes, TensorOptions{any->dtype(), any->device()});
    return TensorList{stack(g, n.ints.at(0))};
  });
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
}

// split's outputs' gradients are concatenated into one tensor; a part without a gradient contributes
// zeros of its size, allocated first (PyTorch's split_with_sizes_backward).
void split(const OpRecord& r) {  // ints: split_size, dim
  auto node = make_node("SplitBackward0", r, [](const FormulaNode& n, TensorList& g) {
    const int64_t split_size = n.ints.at(0), dim = n.ints.at(1);
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
  node->shapes = {r.inputs.at(0).sizes()};
  node->ints = r.ints;
}

void stack(const OpRecord& r) {  // ints: dim; each input's gradient is a view of the incoming one
  auto node = make_node("StackBackward0", r, [](const FormulaNode& n, TensorList& g) {
    TensorList parts = g[0].unbind(n.ints.at(0));
    TensorList out(n.next_edges.size());
    for (size_t i = 0; i < out.size(); ++i)
      if (n.needs_grad(i)) out[i] = parts[i];
    return out;
  });
  node->ints = r.ints;
}

void cat(const OpRecord& r) {  // ints: dim; each input's gradient is a narrow view
  auto node = make_node("CatBackward0", r, [](const FormulaNode& n, TensorList& g) {
    TensorList out(n.next_edges.size());
    int64_t offset = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t length = n.shapes.at(i).at(static_cast<size_t>(n.ints.at(0)));
      if (n.needs_grad(i)) out[i] = g[0].narrow(n.ints.at(0), offset, length);
      offset += length;
    }
    return out;
  });
  for (const Tensor& input : r.inputs) node->shapes.push_back(input.sizes());
  node->ints = r.ints;
}

void clone(const OpRecord& r) {
  make_node("CloneBackward0", r, [](const FormulaNode&, TensorList& g) { return TensorList{g[0]}; });
}

void to_device(const OpRecord& r) {  // ints: the source device (type, index)
  auto node = make_node("ToCopyBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].to(Device{static_cast<DeviceType>(n.ints.at(0)), static_cast<int>(n.ints.at(1))})};
  });
  node->ints = r.ints;
}

void to_dtype(const OpRecord& r) {
  auto node = make_node("ToCopyBackward0", r, [](const FormulaNode& n, TensorList& g) {
    return TensorList{g[0].to(static_cast<ScalarType>(n.ints.at(0)))};
  });
  node->ints = {static_cast<int64_t>(r.inputs.at(0).dtype())};
}

}  // namespace bytegrad::formulas
