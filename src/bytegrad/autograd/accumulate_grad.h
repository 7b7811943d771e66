// The node that ends every path at a leaf: adds the incoming gradient into the leaf's .grad the way
// PyTorch's AccumulateGrad does (the memory behaviour of .grad follows from it):
//  - no .grad yet: the incoming tensor is stolen, no copy, when nothing else holds it and its strides match
//    the leaf's (dimensions of size 1 excepted); otherwise it is copied into the leaf's layout;
//  - .grad already set: added in place, and the incoming tensor is freed.
#pragma once

#include <cstdint>
#include <functional>

#include "bytegrad/autograd/node.h"

namespace bytegrad {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  const Tensor& variable() const { return variable_; }

 private:
  void accumulate(Tensor&& incoming);
  Tensor variable_;  // the leaf (the leaf's metadata points back weakly)
};

// PyTorch's gradient layout contract: strides equal the variable's wherever the size is not 1.
bool obeys_layout_contract(const Tensor& grad, const Tensor& variable);

// Registers hook(leaf) to run after each accumulation into the leaf's .grad (leaf: a tensor that requires
// grad and has no history), as Tensor.register_post_accumulate_grad_hook; returns the handle to remove it.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook);
// Removes a hook registered on `leaf`; an unknown handle is ignored (as RemovableHandle.remove twice).
void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle);

// Module::zero_grad and Optimizer::zero_grad: drops each defined .grad (set_to_none) or zeroes it in
// place without recording, as PyTorch's do.
void zero_grads(const TensorList& params, bool set_to_none);

}  // namespace bytegrad
