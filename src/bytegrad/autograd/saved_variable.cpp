#include "bytegrad/autograd/saved_variable.h"

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/module_scope.h"

namespace bytegrad {

SavedVariable::SavedVariable(const Tensor& tensor, std::string_view saved_by, std::string operand, bool node_output)
    : saved_version_(tensor.defined() ? tensor.version() : 0),
      defined_(tensor.defined()),
      operand_(std::move(operand)),
      sizes_(tensor.defined() ? tensor.sizes() : Shape{}),
      dtype_(tensor.defined() ? tensor.dtype() : ScalarType::float32) {
  if (!tensor.defined()) return;
  hooks_ = current_saved_tensor_hooks();
  if (hooks_) {
    packed_ = hooks_->pack(tensor);
  } else {
    data_ = tensor.alias();
    // A non-leaf kept for backward is an activation (a leaf saved, such as the input, stays what it was), and
    // so is an output the node made and keeps without history (Dropout's mask): saved_tensors() lists both.
    const AutogradMeta* meta = autograd_meta(tensor);
    if ((meta && meta->grad_fn) || node_output) {
      // A node's output without history is saved while the node is made, inside its module's scope.
      const std::shared_ptr<const std::string> running = current_module_name_ptr();
      const std::string_view module = meta && meta->grad_fn ? std::string_view(meta->grad_fn->module())
                                      : running             ? std::string_view(*running)
                                                            : std::string_view();
      // "saved by MulBackward0 (fc1)", built in one allocation
      std::string owner;
      owner.reserve(9 + saved_by.size() + (module.empty() ? 0 : module.size() + 3));
      owner.append("saved by ").append(saved_by);
      if (!module.empty()) owner.append(" (").append(module).append(")");
      activation_role_ = MemoryRole(tensor, MemoryCategory::activation, owner);
    }
  }
}

// A tensor the hooks must give back: which of the two hooks failed, named with the node and the operand,
// rather than an undefined tensor failing later inside the node's formula.
Tensor SavedVariable::unpack_from_hooks(const std::string& node_name) const {
  const auto what = [&] {
    return fmt::format("the saved tensor '{}' of {} (a {} tensor of shape {})", operand_.empty() ? "?" : operand_,
                       node_name, scalar_type_name(dtype_), shape_str(sizes_));
  };
  if (!packed_)
    throw std::runtime_error(fmt::format(
        "saved-tensor hooks: the pack hook returned nothing (a null pointer) for {}, so backward has nothing to "
        "unpack; pack must return what unpack needs to give the tensor back",
        what()));
  Tensor t = hooks_->unpack(packed_);
  if (!t.defined())
    throw std::runtime_error(fmt::format(
        "saved-tensor hooks: the unpack hook returned an undefined tensor for {}; unpack must return the saved "
        "tensor (or one of the same shape, dtype and device)",
        what()));
  return t;
}

Tensor SavedVariable::unpack(const std::string& node_name) const {
  if (!defined_) return Tensor();
  if (released_)
    throw std::runtime_error(
        "Trying to backward through the graph a second time (or directly access saved tensors after they have "
        "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
        "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
        "if you need to access saved tensors after calling backward. (" +
        node_name + " needed them.)");
  if (hooks_) return unpack_from_hooks(node_name);
  if (data_.version() != saved_version_)
    throw std::runtime_error(fmt::format(
        "one of the variables needed for gradient computation has been modified by an inplace operation: the "
        "{} tensor of shape {} on {} saved by {} is at version {}; it was saved at version {}. Find the "
        "in-place op that changed it after the forward pass (or clone it before modifying).",
        scalar_type_name(dtype_), shape_str(sizes_), data_.device().str(), node_name, data_.version(), saved_version_));
  return data_;
}

void SavedVariable::reset() {
  if (!defined_) return;
  activation_role_.reset();
  data_ = Tensor();
  packed_.reset();
  hooks_.reset();
  released_ = true;
}

}  // namespace bytegrad
