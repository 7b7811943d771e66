// What autograd attaches to a tensor: whether it requires grad, its .grad, and the node that produced it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "bytegrad/autograd/node.h"
#include "bytegrad/tensor/memory_role.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

struct AutogradMeta {
  bool requires_grad = false;            // set by the user on leaves
  Tensor grad;                           // .grad (leaves, or non-leaves that retain_grad); set with set_grad_of
  MemoryRole grad_role;                  // the `gradient` role of grad's block, while it is the .grad
  std::shared_ptr<Node> grad_fn;         // the node that produced this tensor (null for leaves)
  uint32_t output_nr = 0;                // which output of grad_fn
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad, while a graph uses it
  // For a differentiable view (a recorded view op's output: view, select, slice, transpose, ...), the
  // tensor it is a view of, as PyTorch's view._base: a view of a view points at the first base. Held weakly
  // so that a view never keeps its base (and its .grad) alive: memory figures stay PyTorch's.
  std::weak_ptr<TensorImpl> view_base;
  // Run, in registration order, each time AccumulateGrad has updated this leaf's .grad (PyTorch's
  // post-accumulate-grad hooks: DDP's reducer watches every parameter this way). Keyed for removal.
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;
  // register_hook's hooks (null until one is registered): run by grad_fn before its backward, or for a
  // leaf by its AccumulateGrad.
  std::shared_ptr<GradientHooks> hooks;
};

// The tensor's autograd metadata, or null when it has none.
AutogradMeta* autograd_meta(const Tensor& t);
AutogradMeta& ensure_autograd_meta(const Tensor& t);

// Makes `grad` the .grad of `variable` (whose metadata `meta` is; undefined grad: none), its block taking
// the `gradient` role from the previous one.
void set_grad_of(AutogradMeta& meta, Tensor grad, const Tensor& variable);

bool requires_grad(const Tensor& t);  // a leaf that requires grad, or a tensor with history
// Where a gradient for `t` should go: its grad_fn, or (for a leaf requiring grad) its AccumulateGrad.
Edge gradient_edge(const Tensor& t);
// Makes `t` output `output_nr` of `node` (and tells the node what gradient to expect there).
void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr);
// The base `view` was recorded as a view of (undefined when it is not a view or its base is gone).
Tensor view_base(const Tensor& view);

}  // namespace bytegrad
