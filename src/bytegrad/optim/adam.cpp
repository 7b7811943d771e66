// torch.optim.Adam / AdamW's eager steps (capturable=False): the single-tensor path (_single_tensor_adam)
// and the multi-tensor one (_multi_tensor_adam, foreach=True); the state and temporaries of both are
// listed in adam.h. The bias corrections are host doubles, as Python computes them from step.item().
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
           bool amsgrad)
    : Adam(std::move(params), AdamOptions{lr, betas, eps, weight_decay, amsgrad, false}, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params)),
      lr_(options.lr),
      beta1_(options.betas.first),
      beta2_(options.betas.second),
      eps_(options.eps),
      weight_decay_(options.weight_decay.value_or(decoupled_weight_decay ? 1e-2 : 0.0)),
      amsgrad_(options.amsgrad),
      foreach_(options.foreach),
      decoupled_weight_decay_(decoupled_weight_decay),
      state_(params_.size()) {
  const char* name = decoupled_weight_decay ? "AdamW" : "Adam";
  if (lr_ < 0) throw std::invalid_argument(fmt::format("{}: invalid learning rate: {}", name, lr_));
  if (eps_ < 0) throw std::invalid_argument(fmt::format("{}: invalid epsilon value: {}", name, eps_));
  if (beta1_ < 0 || beta1_ >= 1)
    throw std::invalid_argument(fmt::format("{}: invalid beta parameter at index 0: {}", name, beta1_));
  if (beta2_ < 0 || beta2_ >= 1)
    throw std::invalid_argument(fmt::format("{}: invalid beta parameter at index 1: {}", name, beta2_));
  if (weight_decay_ < 0) throw std::invalid_argument(fmt::format("{}: invalid weight_decay value: {}", name, weight_decay_));
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
             bool amsgrad)
    : Adam(std::move(params), AdamOptions{lr, betas, eps, weight_decay, amsgrad, false}, true) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, true) {}

void Adam::step() {
  NoGradGuard no_grad;
  AllocationScope scope(decoupled_weight_decay_ ? "AdamW.step" : "Adam.step");
  PhaseScope phase(MemoryPhase::optimizer_step);
  init_state();
  if (foreach_) multi_tensor_step();
  else single_tensor_step();
}

// _init_group: lazy state for every parameter with a gradient, in parameter order, before any update.
void Adam::init_state() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    State& s = state_[i];
    if (!param.grad().defined() || s.exp_avg.defined()) continue;
    AllocationScope state_scope("Adam state");
    CategoryScope state_category(MemoryCategory::optimizer_state);
    s.exp_avg = zeros_like(param);
    s.exp_avg_sq = zeros_like(param);
    if (amsgrad_) s.max_exp_avg_sq = zeros_like(param);
  }
}

void Adam::single_tensor_step() {
  // Python's loop locals: `grad` (a weight-decay temporary) and `denom` stay alive until reassigned in the
  // next parameter's turn, and are freed in that order (grad first) when the function returns.
  Tensor grad, denom;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    grad = param.grad();
    if (!grad.defined()) continue;
    State& s = state_[i];
    s.step += 1;
    if (weight_decay_ != 0) {
      if (decoupled_weight_decay_) param.mul_(1.0 - lr_ * weight_decay_);
      else grad = grad.add(param, weight_decay_);
    }
    lerp_(s.exp_avg, grad, 1.0 - beta1_);
    s.exp_avg_sq.mul_(beta2_);
    addcmul_(s.exp_avg_sq, grad, grad, 1.0 - beta2_);

    const double step = static_cast<double>(s.step);
    const double bias_correction1 = 1.0 - std::pow(beta1_, step);
    const double bias_correction2 = 1.0 - std::pow(beta2_, step);
    const double step_size = lr_ / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    if (amsgrad_) maximum_(s.max_exp_avg_sq, s.exp_avg_sq);
    {
      // (v.sqrt() / bias_correction2_sqrt).add_(eps): the sqrt is freed once the quotient exists, then the
      // previous denom when the name is rebound.
      Tensor root = sqrt(amsgrad_ ? s.max_exp_avg_sq : s.exp_avg_sq);
      Tensor quotient = div(root, bias_correction2_sqrt);
      root = Tensor();
      quotient.add_(eps_);
      denom = std::move(quotient);
    }
    addcdiv_(param, s.exp_avg, denom, -step_size);
  }
  grad = Tensor();
  denom = Tensor();
}

namespace {

// Drops a Python list of temporaries the way CPython frees one: last element first.
void drop_list(std::vector<Tensor>& list) {
  while (!list.empty()) list.pop_back();
}

}  // namespace

void Adam::multi_tensor_step() {
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) with_grad.push_back(i);
  if (with_grad.empty()) return;
  std::vector<Tensor> grads;  // the .grad tensors, or their weight-decayed copies
  for (size_t i : with_grad) {
    state_[i].step += 1;
    grads.push_back(params_[i].grad());
  }
  if (weight_decay_ != 0) {
    if (decoupled_weight_decay_) {
      for (size_t i : with_grad) params_[i].mul_(1.0 - lr_ * weight_decay_);
    } else {
      std::vector<Tensor> decayed;  // torch._foreach_add(grads, params, alpha=wd): a new list
      for (size_t k = 0; k < with_grad.size(); ++k) decayed.push_back(grads[k].add(params_[with_grad[k]], weight_decay_));
      grads.swap(decayed);
      decayed.clear();  // the .grad references: nothing is freed
    }
  }
  for (size_t k = 0; k < with_grad.size(); ++k) lerp_(state_[with_grad[k]].exp_avg, grads[k], 1.0 - beta1_);
  for (size_t i : with_grad) state_[i].exp_avg_sq.mul_(beta2_);
  for (size_t k = 0; k < with_grad.size(); ++k)
    addcmul_(state_[with_grad[k]].exp_avg_sq, grads[k], grads[k], 1.0 - beta2_);
  drop_list(grads);  // `del device_grads`: the weight-decay copies go here, last first
  if (amsgrad_)
    for (size_t i : with_grad) maximum_(state_[i].max_exp_avg_sq, state_[i].exp_avg_sq);
  std::vector<Tensor> denoms;  // torch._foreach_sqrt(exp_avg_sqs), then divided and shifted in place
  for (size_t i : with_grad) denoms.push_back(sqrt(amsgrad_ ? state_[i].max_exp_avg_sq : state_[i].exp_avg_sq));
  for (size_t k = 0; k < with_grad.size(); ++k) {
    const double step = static_cast<double>(state_[with_grad[k]].step);
    denoms[k].div_(std::sqrt(1.0 - std::pow(beta2_, step)));
  }
  for (Tensor& d : denoms) d.add_(eps_);
  for (size_t k = 0; k < with_grad.size(); ++k) {
    const size_t i = with_grad[k];
    const double step_size = lr_ / (1.0 - std::pow(beta1_, static_cast<double>(state_[i].step)));
    addcdiv_(params_[i], state_[i].exp_avg, denoms[k], -step_size);
  }
  drop_list(denoms);  // freed when the function returns, last parameter first
}

}  // namespace bytegrad::optim
