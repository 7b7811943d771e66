// torch.optim.SGD's eager steps: the single-tensor path (_single_tensor_sgd) and the multi-tensor one
// (_multi_tensor_sgd, foreach=True); the allocations of both are listed in sgd.h.
#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening, double weight_decay, bool nesterov)
    : SGD(std::move(params), SGDOptions{lr, momentum, dampening, weight_decay, nesterov, false}) {}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : GroupedOptimizer({SGDParamGroup{std::move(params), options, std::nullopt}}), momentum_buffers_(params_.size()) {
  load_options();
}

// The group's options as they are now (a scheduler or the user may have changed them), checked as
// PyTorch's constructor checks them. PyTorch's SGD checks `lr < 0`, which lets NaN through (every
// parameter would become NaN): refused here.
void SGD::load_options() {
  const SGDOptions& o = param_groups_.front().options;
  lr_ = o.lr;
  momentum_ = o.momentum;
  dampening_ = o.dampening;
  weight_decay_ = o.weight_decay;
  nesterov_ = o.nesterov;
  foreach_ = o.foreach;
  check_at_least_zero("SGD", "learning rate", lr_);
  check_at_least_zero("SGD", "momentum value", momentum_);
  check_at_least_zero("SGD", "weight_decay value", weight_decay_);
  check_not_nan("SGD", "dampening value", dampening_);
  if (nesterov_ && (momentum_ <= 0 || dampening_ != 0))
    throw std::invalid_argument("SGD: Nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  NoGradGuard no_grad;
  AllocationScope scope("SGD.step");
  PhaseScope phase(MemoryPhase::optimizer_step);
  check_groups_unchanged();
  load_options();
  if (foreach_) multi_tensor_step();
  else single_tensor_step();
}

void SGD::single_tensor_step() {
  // Python's loop locals: `grad` lives until the next parameter's turn reassigns it (or step returns).
  Tensor grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    grad = param.grad();
    if (!grad.defined()) continue;
    if (weight_decay_ != 0) grad = grad.add(param, weight_decay_);
    if (momentum_ != 0) {
      Tensor& buf = momentum_buffers_[i];
      if (!buf.defined()) {
        AllocationScope state_scope("SGD momentum_buffer");
        CategoryScope state_category(MemoryCategory::optimizer_state);
        buf = grad.clone().detach();
      } else {
        buf.mul_(momentum_).add_(grad, 1.0 - dampening_);
      }
      if (nesterov_) grad = grad.add(buf, momentum_);
      else grad = buf;
    }
    param.add_(grad, -lr_);
  }
}

void SGD::multi_tensor_step() {
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) with_grad.push_back(i);
  if (with_grad.empty()) return;
  std::vector<Tensor> grads;
  grads.reserve(with_grad.size());
  for (size_t i : with_grad) grads.push_back(params_[i].grad());
  if (weight_decay_ != 0) {  // torch._foreach_add(grads, params, alpha=wd): a new list of temporaries
    std::vector<Tensor> decayed;
    for (size_t k = 0; k < with_grad.size(); ++k) decayed.push_back(grads[k].add(params_[with_grad[k]], weight_decay_));
    grads.swap(decayed);
  }
  if (momentum_ != 0) {
    std::vector<Tensor> bufs;
    for (size_t k = 0; k < with_grad.size(); ++k) {
      Tensor& buf = momentum_buffers_[with_grad[k]];
      if (!buf.defined()) {
        AllocationScope state_scope("SGD momentum_buffer");
        CategoryScope state_category(MemoryCategory::optimizer_state);
        buf = grads[k].clone().detach();
      } else {
        buf.mul_(momentum_).add_(grads[k], 1.0 - dampening_);
      }
      bufs.push_back(buf);
    }
    if (nesterov_) {
      // torch._foreach_add_(grads, bufs, alpha=momentum): in place, into .grad itself without weight decay.
      for (size_t k = 0; k < with_grad.size(); ++k) grads[k].add_(bufs[k], momentum_);
    } else {
      while (!grads.empty()) grads.pop_back();  // `grads = bufs`: the old list goes, last element first
      grads = std::move(bufs);
    }
  }
  for (size_t k = 0; k < with_grad.size(); ++k) params_[with_grad[k]].add_(grads[k], -lr_);
  while (!grads.empty()) grads.pop_back();  // freed when the function returns, last parameter first
}

}  // namespace bytegrad::optim
