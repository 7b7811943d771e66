// A graph node defined by a derivative formula: what it saved in the forward pass plus a function from
// incoming gradients to input gradients. Each formula in autograd/functions/ mirrors PyTorch's
// derivatives.yaml entry for the op, since that decides what stays allocated and what backward allocates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/autograd/node.h"
#include "bytegrad/tensor/autograd_hook.h"

namespace bytegrad {

class FormulaNode final : public Node {
 public:
  using Backward = std::function<TensorList(const FormulaNode&, TensorList& grads)>;
  // `name` is the op table's (core/op_table.h), which lives as long as the program: not copied.
  FormulaNode(std::string_view name, Backward backward) : name_(name), backward_(std::move(backward)) {}

  std::string name() const override { return std::string(name_); }
  TensorList apply(TensorList&& grads) override;
  std::optional<ScalarType> only_casts_gradient_to() const override { return casts_gradient_to; }
  // Set by a formula whose backward is `g[0].to(dtype)` and nothing else (formulas::to_dtype).
  std::optional<ScalarType> casts_gradient_to;
  bool can_defer_gradient() const override { return defers_gradient; }
  bool takes_deferred_gradient() const override { return takes_deferred; }
  // Set by the formulas whose backward is the one op that can (node.h).
  bool defers_gradient = false;
  bool takes_deferred = false;
  void release_variables() override {
    for (SavedVariable& s : saved_) s.reset();
  }
  std::vector<std::pair<std::string, const SavedVariable*>> saved_variables() const override;

  // Saves `t` (an input of the op) under `operand` (e.g. "mat1") now: before the op's kernel runs, as
  // PyTorch saves inputs; returns its index for saved().
  size_t save(const std::string& operand, const Tensor& t);
  // Saves the op's output `output` (an index into OpRecord::outputs) under `operand` ("result") when the op
  // finishes, after its kernel ran, as PyTorch saves outputs; its index for saved() is taken now, so the
  // node keeps (and releases) its saved tensors in the order the formula names them.
  size_t save_output(const std::string& operand, size_t output);
  // Once the kernel ran: outputs [0, differentiable outputs) become the node's outputs (their grad_fn is
  // this node), then the outputs named by save_output are saved, in the order they were named.
  void finish(const std::shared_ptr<FormulaNode>& self, const std::vector<Tensor>& outputs);
  // Whether the formula saved an input (save, as opposed to save_output).
  bool saves_inputs() const { return saved_.size() > output_saves_.size(); }
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
  friend std::shared_ptr<FormulaNode> make_node(const OpRecord&, Backward, size_t);

  std::string_view name_;
  Backward backward_;
  size_t differentiable_outputs_ = SIZE_MAX;
  std::vector<SavedVariable> saved_;  // each knows its operand's name
  struct OutputSave {
    size_t slot;    // index in saved_
    size_t output;  // the output finish saves there
  };
  SmallVector<OutputSave, 2> output_saves_;
  // During apply: the tensors saved-tensor hooks gave back (see apply).
  std::vector<Tensor> unpacked_;
};

// Creates the node the op table names for `record`'s op, with edges to every tensor input (null edges where
// no gradient is needed). Its outputs are given to it when the op finishes (FormulaNode::finish): the first
// `differentiable_outputs` of them (all by default; native_layer_norm's mean and rstd, a dropout's mask, an
// attention's logsumexp get no history).
std::shared_ptr<FormulaNode> make_node(const OpRecord& record, FormulaNode::Backward backward,
                                       size_t differentiable_outputs = SIZE_MAX);
// make_node, keeping the first input's sizes as shapes[0] (for a backward that rebuilds that shape).
std::shared_ptr<FormulaNode> make_node_keeping_input_shape(const OpRecord& record, FormulaNode::Backward backward);

}  // namespace bytegrad
