#include "bytegrad/autograd/node.h"

#include "bytegrad/autograd/module_scope.h"

namespace bytegrad {

namespace {
// Per thread, like PyTorch's: creation order within the thread that ran the forward pass.
thread_local uint64_t next_sequence_nr = 0;
}  // namespace

Node::Node() : module_(current_module_name_ptr()), sequence_nr_(next_sequence_nr++) {}

// (AccumulateGrad: made once per leaf, by whichever op first used it, so it names no module.)
Node::Node(uint64_t sequence_nr) : sequence_nr_(sequence_nr) {}

void GradientHooks::run(Tensor& grad) const {
  for (const auto& [id, hook] : std::vector(hooks)) {  // a copy: a hook may remove itself
    if (!grad.defined()) return;
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
}

void Node::run_tensor_pre_hooks(TensorList& grads) const {
  for (const auto& [output_nr, hooks] : tensor_pre_hooks)
    if (output_nr < grads.size()) hooks->run(grads[output_nr]);
}

const std::string& Node::module() const {
  static const std::string none;
  return module_ ? *module_ : none;
}

}  // namespace bytegrad
