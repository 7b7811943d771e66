// A graph node defined by a derivative formula: what it saved in the forward pass plus a function from
// incoming gradients to input gradients. Each formula in autograd/functions/ mirrors PyTorch's
// derivatives.yaml entry for the op, since that decides what stays allocated and what backward allocates.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bytegrad/autograd/node.h"
#include "bytegrad/tensor/autograd_hook.h"

namespace bytegrad {

class FormulaNode final : public Node {
 public:
  using Backward = std::function<TensorList(const FormulaNode&, TensorList& grads)>;
  FormulaNode(std::string name, Backward backward) : name_(std::move(name)), backward_(std::move(backward)) {}

  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release_variables() override {
    for (SavedVariable& s : saved_) s.reset();
  }
  std::vector<std::pair<std::string, const SavedVariable*>> saved_variables() const override;

  // Saves `t` under `operand` (e.g. "mat1"); returns its index for saved().
  size_t save(const std::string& operand, const Tensor& t);
  Tensor saved(size_t index) const {
    return index < unpacked_.size() && unpacked_[index].defined() ? unpacked_[index] : unpack(saved_.at(index));
  }
  // The tensor saved under `operand` (which must have been saved).
  Tensor saved(std::string_view operand) const;
  // Whether forward input i needs a gradient (PyTorch's task_should_compute_output).
  bool needs_grad(size_t input) const { return input < next_edges.size() && next_edges[input].valid(); }

  // Shapes captured in the forward pass (other values are captured by the backward function).
  std::vector<Shape> shapes;

 private:
  std::string name_;
  Backward backward_;
  std::vector<std::string> saved_names_;
  std::vector<SavedVariable> saved_;
  // During apply: the tensors saved-tensor hooks gave back (see apply).
  std::vector<Tensor> unpacked_;
};

// Creates the node the op table names for `record`'s op: edges to every tensor input (null edges where no
// gradient is needed), and makes each output the node's output i.
std::shared_ptr<FormulaNode> make_node(const OpRecord& record, FormulaNode::Backward backward);

}  // namespace bytegrad
