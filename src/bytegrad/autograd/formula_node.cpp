#include "bytegrad/autograd/formula_node.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/core/recycling_allocator.h"

namespace bytegrad {

std::vector<std::pair<std::string, const SavedVariable*>> FormulaNode::saved_variables() const {
  std::vector<std::pair<std::string, const SavedVariable*>> out;
  for (const SavedVariable& s : saved_) out.emplace_back(s.operand(), &s);
  return out;
}

namespace {

// Room made at a node's first save: most formulas save up to four tensors, so saved_ grows once, not at
// the second and third.
constexpr size_t kSavesReserved = 4;

}  // namespace

size_t FormulaNode::save(const std::string& operand, const Tensor& t) {
  if (saved_.empty()) saved_.reserve(kSavesReserved);
  saved_.emplace_back(t, name_, operand);
  return saved_.size() - 1;
}

size_t FormulaNode::save_output(const std::string& operand, size_t output) {
  if (saved_.empty()) saved_.reserve(kSavesReserved);
  saved_.emplace_back(Tensor(), name_, operand);  // its name now, its tensor from finish
  output_saves_.push_back({saved_.size() - 1, output});
  return saved_.size() - 1;
}

void FormulaNode::finish(const std::shared_ptr<FormulaNode>& self, const std::vector<Tensor>& outputs) {
  const size_t with_history = std::min(outputs.size(), differentiable_outputs_);
  for (size_t i = 0; i < with_history; ++i) set_history(outputs[i], self, static_cast<uint32_t>(i));
  for (const OutputSave& save : output_saves_)
    saved_[save.slot] =
        SavedVariable(outputs.at(save.output), name_, saved_[save.slot].operand(), /*node_output=*/true);
  output_saves_.clear();
}

// Tensors kept by saved-tensor hooks (checkpointing) come back as PyTorch's generated nodes take them: all
// unpacked when apply begins, in the order they were saved, and dropped when it returns, last first (its
// locals); the hooks hold nothing after handing one over, so that is when a recomputed tensor is freed.
// Saved tensors the node keeps itself are released later, by release_variables. When an unpack or the
// formula throws, what was unpacked is dropped all the same, before the error leaves the node: a failed
// backward holds none of it.
TensorList FormulaNode::apply(TensorList&& grads) {
  bool any_packed = false;
  for (const SavedVariable& s : saved_) any_packed = any_packed || s.packed();
  if (!any_packed) return backward_(*this, grads);
  struct DropUnpacked {
    std::vector<Tensor>& unpacked;
    ~DropUnpacked() {
      while (!unpacked.empty()) unpacked.pop_back();
    }
  } drop{unpacked_};
  unpacked_.assign(saved_.size(), Tensor());
  for (size_t i = 0; i < saved_.size(); ++i)
    if (saved_[i].packed()) unpacked_[i] = unpack(saved_[i]);
  return backward_(*this, grads);
}

Tensor FormulaNode::saved(std::string_view operand) const {
  for (size_t i = 0; i < saved_.size(); ++i)
    if (saved_[i].operand() == operand) return saved(i);
  throw std::logic_error(fmt::format("{}: nothing was saved as '{}'", name_, operand));
}

std::shared_ptr<FormulaNode> make_node(const OpRecord& record, FormulaNode::Backward backward,
                                       size_t differentiable_outputs) {
  auto node = make_shared_recycled<FormulaNode>(op_info(record.op).node, std::move(backward));
  node->differentiable_outputs_ = differentiable_outputs;
  node->next_edges.reserve(record.inputs.size());
  for (const Tensor& input : record.inputs) node->next_edges.push_back(input.defined() ? gradient_edge(input) : Edge{});
  return node;
}

std::shared_ptr<FormulaNode> make_node_keeping_input_shape(const OpRecord& record, FormulaNode::Backward backward) {
  auto node = make_node(record, std::move(backward));
  node->shapes = {record.inputs.at(0).sizes()};
  return node;
}

}  // namespace bytegrad
