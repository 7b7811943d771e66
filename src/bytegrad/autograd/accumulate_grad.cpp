#include "bytegrad/autograd/accumulate_grad.h"

#include <atomic>
#include <limits>
#include <stdexcept>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad {

AccumulateGrad::AccumulateGrad(Tensor variable)
    : Node(std::numeric_limits<uint64_t>::max()), variable_(std::move(variable)) {
  input_metadata.push_back({variable_.sizes(), variable_.dtype(), variable_.device()});
}

bool obeys_layout_contract(const Tensor& grad, const Tensor& variable) {
  if (grad.dim() != variable.dim()) return false;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (grad.sizes()[d] != 1) {
      if (grad.strides()[d] != variable.strides()[d]) return false;
    } else if (grad.strides()[d] == 0) {
      return false;  // a size-1 dimension with stride 0 is an expanded view
    }
  }
  return true;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor new_grad = std::move(grads.at(0));
  AutogradMeta& meta = ensure_autograd_meta(variable_);
  if (meta.hooks) meta.hooks->run(new_grad);  // the leaf's register_hook hooks, before accumulating
  if (!new_grad.defined()) return {};
  accumulate(std::move(new_grad));
  // The incoming gradient is gone by now (PyTorch's engine frees it after the hooks; they allocate nothing
  // that could land differently). A post-accumulate hook may register or remove hooks: run over a copy.
  const auto post_hooks = ensure_autograd_meta(variable_).post_accumulate_grad_hooks;
  for (const auto& [handle, hook] : post_hooks) hook(variable_);
  return {};
}

void AccumulateGrad::accumulate(Tensor&& incoming) {
  Tensor new_grad = std::move(incoming);
  AutogradMeta& meta = ensure_autograd_meta(variable_);
  AllocationScope scope("gradient");
  if (!meta.grad.defined()) {
    // Steal when no one else holds the incoming gradient and it already has the leaf's layout.
    if (!grad_mode_enabled() && new_grad.use_count() == 1 && obeys_layout_contract(new_grad, variable_)) {
      set_grad_of(meta, new_grad.alias(), variable_);
    } else {
      Tensor copy =
          empty_strided(variable_.sizes(), variable_.strides(), TensorOptions{variable_.dtype(), variable_.device()});
      copy.copy_(new_grad);
      set_grad_of(meta, copy, variable_);
    }
  } else if (!grad_mode_enabled()) {
    meta.grad.add_(new_grad);  // in place; new_grad is freed when this returns
  } else {
    set_grad_of(meta, meta.grad + new_grad, variable_);
  }
}

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook) {
  if (!leaf.defined()) throw std::invalid_argument("register_post_accumulate_grad_hook: the tensor is undefined");
  AutogradMeta* meta = autograd_meta(leaf);
  if (meta == nullptr || !meta->requires_grad || meta->grad_fn)
    throw std::invalid_argument(
        "register_post_accumulate_grad_hook: only leaf tensors that require grad can have post-accumulate-grad "
        "hooks (got " +
        describe(leaf) + ")");
  static std::atomic<uint64_t> next_handle{1};
  const uint64_t handle = next_handle++;
  meta->post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle) {
  AutogradMeta* meta = autograd_meta(leaf);
  if (meta == nullptr) return;
  auto& hooks = meta->post_accumulate_grad_hooks;
  std::erase_if(hooks, [&](const auto& entry) { return entry.first == handle; });
}

void zero_grads(const TensorList& params, bool set_to_none) {
  for (const Tensor& p : params) {
    const Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      grad.zero_();
    }
  }
}

}  // namespace bytegrad
