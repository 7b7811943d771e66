// The optimizer base. Each optimizer (sgd.h, adam.h) lists PyTorch's device memory, state and per-step
// temporaries beside its class, for both of torch.optim's eager paths (fused=False, capturable=False):
//  - the single-tensor path (foreach=False), the default here: one parameter at a time, so its
//    temporaries are a parameter's size;
//  - the multi-tensor path (foreach=true in the options): what torch.optim.SGD/Adam/AdamW use on CUDA when
//    foreach is not given. Its _foreach_* ops make one temporary per parameter, all alive together, so the
//    step's peak holds a whole parameter set more.
// Every step runs under a NoGradGuard. Parameters without a gradient are skipped (no state).
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad::optim {

// One of PyTorch's param_groups: parameters with their own options (an optimizer's Options struct).
// The options may be changed between steps (param_groups()[i].options.lr = ..., as PyTorch's
// param_groups[i]["lr"] = ...); the parameter list may not.
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
  std::optional<double> initial_lr;  // set by the first scheduler made on the optimizer (lr_scheduler.h)
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // set_to_none (PyTorch's default) drops every .grad, freeing it; otherwise zeroes them in place.
  void zero_grad(bool set_to_none = true);
  const std::vector<Tensor>& params() const { return params_; }

  // Each group's learning rate, for schedulers and code that handles any optimizer (PyTorch's
  // param_groups[i]["lr"] and ["initial_lr"]); each optimizer's param_groups() has all of a group's options.
  virtual size_t num_param_groups() const = 0;
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  virtual std::optional<double>& initial_lr(size_t group) = 0;

 protected:
  // PyTorch's add_param_group rule: params_ is the groups' parameters concatenated (each group ends at the
  // matching entry of group_ends); a tensor in two groups would be stepped twice with two states.
  void check_groups_disjoint(const std::vector<size_t>& group_ends) const;
  std::vector<Tensor> params_;
};

// An optimizer whose param groups carry `Options` (AdamOptions, SGDOptions): param_groups() to read and
// change them between steps.
template <typename Options>
class GroupedOptimizer : public Optimizer {
 public:
  std::vector<ParamGroup<Options>>& param_groups() { return param_groups_; }
  const std::vector<ParamGroup<Options>>& param_groups() const { return param_groups_; }
  size_t num_param_groups() const override { return param_groups_.size(); }
  double lr(size_t group) const override { return param_groups_.at(group).options.lr; }
  void set_lr(size_t group, double lr) override { param_groups_.at(group).options.lr = lr; }
  std::optional<double>& initial_lr(size_t group) override { return param_groups_.at(group).initial_lr; }

 protected:
  explicit GroupedOptimizer(std::vector<ParamGroup<Options>> groups)
      : Optimizer(concatenated_params(groups)), param_groups_(std::move(groups)) {
    for (const auto& group : param_groups_) group_sizes_.push_back(group.params.size());
  }
  // Throws std::logic_error when a group's parameter list was changed through param_groups().
  void check_groups_unchanged() const {
    for (size_t g = 0; g < param_groups_.size(); ++g)
      if (param_groups_[g].params.size() != group_sizes_[g])
        throw std::logic_error("optimizer: the parameters of param group " + std::to_string(g) +
                               " were changed; only a group's options may change after construction");
  }
  std::vector<ParamGroup<Options>> param_groups_;

 private:
  static std::vector<Tensor> concatenated_params(const std::vector<ParamGroup<Options>>& groups) {
    std::vector<Tensor> out;
    for (const auto& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
    return out;
  }
  std::vector<size_t> group_sizes_;
};

// torch.optim's range checks for one hyperparameter, with its ValueError texts ("Invalid learning rate:
// nan"), prefixed by the optimizer's name. Written as `low <= value` (and `value < high`) so that NaN,
// which compares false to everything, is refused too. Each throws std::invalid_argument.
void check_at_least_zero(const char* optimizer, const char* what, double value);  // "learning rate", ...
void check_beta(const char* optimizer, int index, double beta);                   // 0 <= beta < 1
void check_not_nan(const char* optimizer, const char* what, double value);

}  // namespace bytegrad::optim
