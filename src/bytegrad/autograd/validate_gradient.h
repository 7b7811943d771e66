// The one check every gradient entering autograd passes, against the shape, dtype and device its receiver
// expects (PyTorch's Python-side _make_grads and its engine's validate_outputs, and the Tensor.grad setter):
//   - the gradient given to backward(gradient)            GradientEntry::root
//   - each gradient a node returns for one of its inputs  GradientEntry::node_output
//   - a gradient assigned with set_grad                   GradientEntry::assigned
// The engine's entries adapt what PyTorch's engine adapts (another dtype is converted, a 0-d gradient on
// another device is moved, a node's broadcast gradient is summed down) and refuse the rest; an assigned
// .grad must match exactly, as PyTorch's setter requires. Every refusal is decided before anything is
// allocated, and names the gradient, what was expected and where it came from.
#pragma once

#include <cstddef>
#include <string_view>

#include "bytegrad/autograd/node.h"

namespace bytegrad {

enum class GradientEntry { root, node_output, assigned };

struct GradientSource {
  GradientEntry entry;
  size_t index = 0;       // the root's position among backward's roots, or the node's output number
  std::string_view node;  // node_output: the node that returned it (e.g. "MulBackward0")
};

// `grad` (defined) as the receiver described by `expected` takes it; throws std::invalid_argument for a
// root or assigned gradient, std::runtime_error for one a node returned.
Tensor validate_gradient(Tensor grad, const GradientMetadata& expected, const GradientSource& source);

// What a tensor expects of its gradient: its own shape, dtype and device.
inline GradientMetadata gradient_metadata_of(const Tensor& t) { return {t.sizes(), t.dtype(), t.device()}; }

}  // namespace bytegrad
