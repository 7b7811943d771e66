#include "bytegrad/autograd/formula_node.h"

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/autograd/autograd_meta.h"

namespace bytegrad {

std::vector<std::pair<std::string, const SavedVariable*>> FormulaNode::saved_variables() const {
  std::vector<std::pair<std::string, const SavedVariable*>> out;
  for (size_t i = 0; i < saved_.size(); ++i) out.emplace_back(saved_names_[i], &saved_[i]);
  return out;
}

size_t FormulaNode::save(const std::string& operand, const Tensor& t) {
  saved_names_.push_back(operand);
  saved_.emplace_back(t, name_);
  return saved_.size() - 1;
}

// Tensors kept by saved-tensor hooks (checkpointing) come back as PyTorch's generated nodes take them: all
// unpacked when apply begins, in the order they were saved, and dropped when it returns, last first (its
// locals); the hooks hold nothing after handing one over, so that is when a recomputed tensor is freed.
// Saved tensors the node keeps itself are released later, by release_variables.
TensorList FormulaNode::apply(TensorList&& grads) {
  bool any_packed = false;
  for (const SavedVariable& s : saved_) any_packed = any_packed || s.packed();
  if (!any_packed) return backward_(*this, grads);
  unpacked_.assign(saved_.size(), Tensor());
  for (size_t i = 0; i < saved_.size(); ++i)
    if (saved_[i].packed()) unpacked_[i] = unpack(saved_[i]);
  TensorList out = backward_(*this, grads);
  while (!unpacked_.empty()) unpacked_.pop_back();
  return out;
}

Tensor FormulaNode::saved(std::string_view operand) const {
  for (size_t i = 0; i < saved_names_.size(); ++i)
    if (saved_names_[i] == operand) return saved(i);
  throw std::logic_error(fmt::format("{}: nothing was saved as '{}'", name_, operand));
}

std::shared_ptr<FormulaNode> make_node(const OpRecord& record, FormulaNode::Backward backward) {
  auto node = std::make_shared<FormulaNode>(std::string(op_info(record.op).node), std::move(backward));
  for (const Tensor& input : record.inputs) node->next_edges.push_back(input.defined() ? gradient_edge(input) : Edge{});
  for (size_t i = 0; i < record.outputs.size(); ++i) set_history(record.outputs[i], node, static_cast<uint32_t>(i));
  return node;
}

}  // namespace bytegrad
