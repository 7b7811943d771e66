// torch.optim.Adam / AdamW's eager steps (capturable=False): the single-tensor path (_single_tensor_adam)
// and the multi-tensor one (_multi_tensor_adam, foreach=True); the state and temporaries of both are
// listed in adam.h. The bias corrections are host doubles, as Python computes them from step.item().
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/kernels/kernel_profile.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

namespace {

// The one group of the constructors that take a parameter list.
std::vector<AdamParamGroup> one_group(std::vector<Tensor> params, const AdamOptions& options) {
  return {AdamParamGroup{std::move(params), options, std::nullopt}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
           bool amsgrad)
    : Adam(std::move(params), AdamOptions{lr, betas, eps, weight_decay, amsgrad, false}) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(one_group(std::move(params), options)) {}

Adam::Adam(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), false) {}

// NOLINTNEXTLINE(performance-unnecessary-value-param): every caller moves its groups in; nothing is copied
Adam::Adam(std::vector<AdamParamGroup> groups, bool decoupled_weight_decay)
    : GroupedOptimizer(std::move(groups)), decoupled_weight_decay_(decoupled_weight_decay), state_(params_.size()) {
  size_t begin = 0;
  std::vector<size_t> group_ends;
  for (size_t k = 0; k < param_groups_.size(); ++k) {
    begin = resolved(k, begin).end;
    group_ends.push_back(begin);
  }
  check_groups_disjoint(group_ends);
}

Adam::Group Adam::resolved(size_t group_index, size_t begin) const {
  const char* name = decoupled_weight_decay_ ? "AdamW" : "Adam";
  const AdamParamGroup& group = param_groups_[group_index];
  const AdamOptions& o = group.options;
  Group g{begin,
          begin + group.params.size(),
          o.lr,
          o.betas.first,
          o.betas.second,
          o.eps,
          o.weight_decay.value_or(decoupled_weight_decay_ ? 1e-2 : 0.0),
          o.amsgrad,
          o.foreach};
  check_at_least_zero(name, "learning rate", g.lr);
  check_at_least_zero(name, "epsilon value", g.eps);
  check_beta(name, 0, g.beta1);
  check_beta(name, 1, g.beta2);
  check_at_least_zero(name, "weight_decay value", g.weight_decay);
  return g;
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps, double weight_decay,
             bool amsgrad)
    : AdamW(std::move(params), AdamOptions{lr, betas, eps, weight_decay, amsgrad, false}) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options) : AdamW(one_group(std::move(params), options)) {}

AdamW::AdamW(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), true) {}

void Adam::step() {
  NoGradGuard no_grad;
  AllocationScope scope(decoupled_weight_decay_ ? "AdamW.step" : "Adam.step");
  PhaseScope phase(MemoryPhase::optimizer_step);
  KernelProfileLabel profile_label(decoupled_weight_decay_ ? "AdamW.step" : "Adam.step");
  // Adam.step: per group, _init_group (state for that group's parameters) then the update, with the
  // group's options as they are now (a scheduler or the user may have changed them).
  check_groups_unchanged();
  size_t begin = 0;
  for (size_t k = 0; k < param_groups_.size(); ++k) {
    const Group g = resolved(k, begin);
    begin = g.end;
    init_state(g);
    if (g.foreach) multi_tensor_step(g);
    else single_tensor_step(g);
  }
}

// _init_group: lazy state for every parameter with a gradient, in parameter order, before any update.
void Adam::init_state(const Group& g) {
  for (size_t i = g.begin; i < g.end; ++i) {
    const Tensor& param = params_[i];
    State& s = state_[i];
    if (!param.grad().defined() || s.exp_avg.defined()) continue;
    AllocationScope state_scope("Adam state");
    CategoryScope state_category(MemoryCategory::optimizer_state);
    s.exp_avg = zeros_like(param);
    s.exp_avg_sq = zeros_like(param);
    if (g.amsgrad) s.max_exp_avg_sq = zeros_like(param);
  }
}

void Adam::single_tensor_step(const Group& g) {
  const double lr = g.lr, beta1 = g.beta1, beta2 = g.beta2, eps = g.eps, weight_decay = g.weight_decay;
  const bool amsgrad = g.amsgrad;
  // Python's loop locals: `grad` (a weight-decay temporary) and `denom` stay alive until reassigned in the
  // next parameter's turn, and are freed in that order (grad first) when the function returns.
  Tensor grad, denom;
  for (size_t i = g.begin; i < g.end; ++i) {
    const Tensor& param = params_[i];
    grad = param.grad();
    if (!grad.defined()) continue;
    State& s = state_[i];
    s.step += 1;
    if (weight_decay != 0) {
      if (decoupled_weight_decay_) param.mul_(1.0 - lr * weight_decay);
      else grad = grad.add(param, weight_decay);
    }
    lerp_(s.exp_avg, grad, 1.0 - beta1);
    s.exp_avg_sq.mul_(beta2);
    addcmul_(s.exp_avg_sq, grad, grad, 1.0 - beta2);

    const double step = static_cast<double>(s.step);
    const double bias_correction1 = 1.0 - std::pow(beta1, step);
    const double bias_correction2 = 1.0 - std::pow(beta2, step);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    if (amsgrad) maximum_(s.max_exp_avg_sq, s.exp_avg_sq);
    {
      // (v.sqrt() / bias_correction2_sqrt).add_(eps): the sqrt is freed once the quotient exists, then the
      // previous denom when the name is rebound.
      Tensor root = sqrt(amsgrad ? s.max_exp_avg_sq : s.exp_avg_sq);
      Tensor quotient = div(root, bias_correction2_sqrt);
      root = Tensor();
      quotient.add_(eps);
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

void Adam::multi_tensor_step(const Group& g) {
  const double lr = g.lr, beta1 = g.beta1, beta2 = g.beta2, eps = g.eps, weight_decay = g.weight_decay;
  const bool amsgrad = g.amsgrad;
  std::vector<size_t> with_grad;
  for (size_t i = g.begin; i < g.end; ++i)
    if (params_[i].grad().defined()) with_grad.push_back(i);
  if (with_grad.empty()) return;
  // Each torch._foreach_* call below is one loop over the tensors inside a ForeachBatch: the backend may
  // run the loop's per-tensor updates as multi-tensor launches (on cuda, as PyTorch's multi_tensor_apply).
  // No loop frees memory, so what a batch holds back stays valid until it runs.
  const Device device = params_[with_grad.front()].device();
  std::vector<Tensor> grads;  // the .grad tensors, or their weight-decayed copies
  for (size_t i : with_grad) {
    state_[i].step += 1;
    grads.push_back(params_[i].grad());
  }
  if (weight_decay != 0) {
    if (decoupled_weight_decay_) {
      ForeachBatch batch(device);
      for (size_t i : with_grad) params_[i].mul_(1.0 - lr * weight_decay);
    } else {
      std::vector<Tensor> decayed;  // torch._foreach_add(grads, params, alpha=wd): a new list
      for (size_t k = 0; k < with_grad.size(); ++k)
        decayed.push_back(grads[k].add(params_[with_grad[k]], weight_decay));
      grads.swap(decayed);
      decayed.clear();  // the .grad references: nothing is freed
    }
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k) lerp_(state_[with_grad[k]].exp_avg, grads[k], 1.0 - beta1);
  }
  {
    ForeachBatch batch(device);
    for (size_t i : with_grad) state_[i].exp_avg_sq.mul_(beta2);
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k)
      addcmul_(state_[with_grad[k]].exp_avg_sq, grads[k], grads[k], 1.0 - beta2);
  }
  drop_list(grads);  // `del device_grads`: the weight-decay copies go here, last first
  if (amsgrad)
    for (size_t i : with_grad) maximum_(state_[i].max_exp_avg_sq, state_[i].exp_avg_sq);
  std::vector<Tensor> denoms;  // torch._foreach_sqrt(exp_avg_sqs), then divided and shifted in place
  {
    ForeachBatch batch(device);
    for (size_t i : with_grad) denoms.push_back(sqrt(amsgrad ? state_[i].max_exp_avg_sq : state_[i].exp_avg_sq));
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k) {
      const double step = static_cast<double>(state_[with_grad[k]].step);
      denoms[k].div_(std::sqrt(1.0 - std::pow(beta2, step)));
    }
  }
  {
    ForeachBatch batch(device);
    for (Tensor& d : denoms) d.add_(eps);
  }
  {
    ForeachBatch batch(device);
    for (size_t k = 0; k < with_grad.size(); ++k) {
      const size_t i = with_grad[k];
      const double step_size = lr / (1.0 - std::pow(beta1, static_cast<double>(state_[i].step)));
      addcdiv_(params_[i], state_[i].exp_avg, denoms[k], -step_size);
    }
  }
  drop_list(denoms);  // freed when the function returns, last parameter first
}

}  // namespace bytegrad::optim
