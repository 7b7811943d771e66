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
  check_options(o);
  lr_ = o.lr;
  momentum_ = o.momentum;
  dampening_ = o.dampening;
  weight_decay_ = o.weight_decay;
  nesterov_ = o.nesterov;
  foreach_ = o.foreach;
}

void SGD::check_options(const SGDOptions& o) {
  check_at_least_zero("SGD", "learning rate", o.lr);
  check_at_least_zero("SGD", "momentum value", o.momentum);
  check_at_least_zero("SGD", "weight_decay value", o.weight_decay);
  check_not_nan("SGD", "dampening value", o.dampening);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw std::invalid_argument("SGD: Nesterov momentum requires a momentum and zero dampening");
}

// The group's dict as PyTorch 2.11's SGD writes it (without "params"), with "initial_lr" once set.
json::Value SGD::group_options(size_t group) const {
  const SGDParamGroup& pg = param_groups_.at(group);
  const SGDOptions& o = pg.options;
  json::Value out = json::object();
  out.add("lr", json_number(o.lr));
  out.add("momentum", json_number(o.momentum));
  out.add("dampening", json_number(o.dampening));
  out.add("weight_decay", json_number(o.weight_decay));
  out.add("nesterov", json::boolean(o.nesterov));
  add_flag_options(out, o.foreach, /*has_capturable=*/false);
  if (pg.initial_lr) out.add("initial_lr", json_number(*pg.initial_lr));
  return out;
}

SGDOptions SGD::options_from_json(const json::Value& options, size_t group) {
  SGDOptions o;
  o.lr = option_number(options, group, "lr");
  o.momentum = option_number(options, group, "momentum");
  o.dampening = option_number(options, group, "dampening");
  o.weight_decay = option_number(options, group, "weight_decay");
  o.nesterov = option_bool(options, group, "nesterov", false);
  o.foreach = option_bool(options, group, "foreach", false);
  for (const char* key : {"maximize", "differentiable", "fused"}) refuse_true_option(options, group, key);
  return o;
}

std::optional<ParamState> SGD::param_state(size_t param_index) const {
  const Tensor& buf = momentum_buffers_.at(param_index);
  if (!buf.defined()) return std::nullopt;
  ParamState out;
  out.tensors.insert_or_assign("momentum_buffer", buf);
  return out;
}

Optimizer::StateKeys SGD::state_keys(const json::Value& options) const {
  if (option_number(options, 0, "momentum") == 0) return {};
  return {false, {"momentum_buffer"}};
}

void SGD::check_group_options(const std::vector<json::Value>& options) const {
  for (size_t g = 0; g < options.size(); ++g) {
    try {
      check_options(options_from_json(options[g], g));
      option_initial_lr(options[g], g);
    } catch (const std::invalid_argument& e) {
      if (std::string(e.what()).starts_with("param group")) throw;
      throw std::invalid_argument(fmt::format("param group {}: {}", g, e.what()));
    }
  }
}

void SGD::replace_state(const std::vector<json::Value>& options, std::vector<std::optional<ParamState>> state) {
  param_groups_.front().options = options_from_json(options.front(), 0);
  param_groups_.front().initial_lr = option_initial_lr(options.front(), 0);
  load_options();
  std::vector<Tensor> fresh(params_.size());
  for (size_t i = 0; i < state.size(); ++i)
    if (state[i])
      if (const Tensor* buf = state[i]->tensors.find("momentum_buffer")) fresh[i] = *buf;
  state.clear();
  momentum_buffers_.swap(fresh);
  for (Tensor& old : fresh) old = Tensor();  // parameter by parameter, as PyTorch's state dict is freed
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
        TensorNameScope state_name_scope(state_name(i, "momentum_buffer"));
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
        TensorNameScope state_name_scope(state_name(with_grad[k], "momentum_buffer"));
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
