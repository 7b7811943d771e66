#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "bytegrad/optim/optimizer.h"

namespace bytegrad::optim {

// torch.optim.Adam, _single_tensor_adam (capturable=False). Parameter groups step in order, each whole:
// its state is created, its parameters updated and its temporaries dropped before the next group's turn
// (Adam.step calls _init_group and then adam() per group; with foreach, the multi-tensor temporaries of
// one group only are alive at once). State, created at a parameter's first step for every parameter of
// the group that has a gradient (all of them before any update, as _init_group): `step` (a CPU
// float32 scalar in PyTorch: no device memory; a host counter here), then exp_avg and exp_avg_sq
// (zeros_like(param)), then max_exp_avg_sq if amsgrad. Per parameter and step:
//  - weight_decay != 0 (Adam): grad = grad.add(param, alpha=wd), a param-sized temporary freed when the
//    next parameter's turn begins; AdamW instead scales param in place (param.mul_(1 - lr * wd));
//  - exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2): in place;
//  - amsgrad: torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq): in place;
//  - denom = (v.sqrt() / bias_correction2_sqrt).add_(eps): the sqrt (param-sized), then the quotient
//    (param-sized), then the sqrt is freed, then the previous parameter's denom (Python keeps `denom`
//    alive until it is reassigned): so the peak holds three param-sized blocks from the second parameter
//    on; the last denom (and weight-decay grad) are freed when step returns;
//  - param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1) in place.
// Multi-tensor (foreach=true), _multi_tensor_adam: the same state, created the same way; then
//  - weight_decay != 0 (Adam): grads + wd * params, one temporary per parameter, all alive until the
//    moments are updated, then dropped last parameter first; AdamW scales the parameters in place;
//  - the moment updates in place; then sqrt of every exp_avg_sq (or max_exp_avg_sq): one temporary per
//    parameter, divided and shifted by eps in place, used by addcdiv_, and dropped, last parameter first,
//    when step returns. So the step's peak holds one whole parameter set more than before the step.
// One group's options (or every parameter's, without groups).
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  std::optional<double> weight_decay;  // unset: the optimizer's default, 0 for Adam and 1e-2 for AdamW
  bool amsgrad = false;
  bool foreach = false;  // PyTorch's multi-tensor path (its default on CUDA)
};

using AdamParamGroup = ParamGroup<AdamOptions>;

class Adam : public GroupedOptimizer<AdamOptions> {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
       double weight_decay = 0.0, bool amsgrad = false);
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  // torch.optim.Adam([{"params": ..., "weight_decay": ...}, ...]): one options set per group.
  explicit Adam(std::vector<AdamParamGroup> groups);
  void step() override;

  struct State {
    int64_t step = 0;  // PyTorch: torch.tensor(0.0) on the CPU
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  // Default (step 0, undefined tensors) until the parameter's first step.
  const State& state(size_t param_index) const { return state_.at(param_index); }

 protected:
  Adam(std::vector<AdamParamGroup> groups, bool decoupled_weight_decay);

 private:
  // A group's parameters are params_[begin, end), with its hyperparameters resolved from its options at
  // each step.
  struct Group {
    size_t begin, end;
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad, foreach;
  };
  Group resolved(size_t group_index, size_t begin) const;  // validated as the constructor validates
  Group resolved(const AdamOptions& options, size_t begin, size_t end) const;
  AdamOptions options_from_json(const json::Value& options, size_t group) const;
  void init_state(const Group& g);
  void single_tensor_step(const Group& g);
  void multi_tensor_step(const Group& g);
  // state_dict and load_state_dict's pieces (optimizer.h)
  json::Value group_options(size_t group) const override;
  std::optional<ParamState> param_state(size_t param_index) const override;
  StateKeys state_keys(const json::Value& options) const override;
  void check_group_options(const std::vector<json::Value>& options) const override;
  void replace_state(const std::vector<json::Value>& options, std::vector<std::optional<ParamState>> state) override;
  bool decoupled_weight_decay_;
  std::vector<State> state_;
};

// torch.optim.AdamW: Adam with decoupled weight decay (param.mul_(1 - lr * weight_decay), in place, before
// the moment updates); same state and temporaries as Adam without weight decay.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
        double weight_decay = 1e-2, bool amsgrad = false);
  AdamW(std::vector<Tensor> params, const AdamOptions& options);
  explicit AdamW(std::vector<AdamParamGroup> groups);
};

}  // namespace bytegrad::optim
