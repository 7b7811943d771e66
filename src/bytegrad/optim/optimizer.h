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
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/tensor/tensor_dict.h"

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

// One parameter's entry in an optimizer's state_dict (PyTorch's optimizer.state_dict()["state"][index]).
struct ParamState {
  std::optional<int64_t> step;  // Adam's step count (PyTorch keeps a CPU float32 tensor: no device memory)
  TensorDict tensors;           // exp_avg, exp_avg_sq[, max_exp_avg_sq] or momentum_buffer, in PyTorch's order
};

// One param group in a state_dict: its options as PyTorch names them ("lr", "betas", "initial_lr" once a
// scheduler set it, ...) and its parameters as indices into the optimizer's parameters, counted across
// the groups in order (PyTorch's "params": [0, 1], [2, 3, 4]).
struct ParamGroupState {
  json::Value options;  // an object
  std::vector<int64_t> params;
};

// PyTorch's optimizer.state_dict(): the state of every parameter that has some (by index), and the groups.
struct OptimizerStateDict {
  std::map<int64_t, ParamState> state;
  std::vector<ParamGroupState> param_groups;
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

  // The state and the groups' options, as PyTorch's state_dict(): the tensors are the optimizer's own
  // (handles sharing its storage; nothing is copied or allocated), as PyTorch's are.
  OptimizerStateDict state_dict() const;
  // PyTorch's load_state_dict: the groups' options become the dict's (each group keeps its parameters) and
  // the state is replaced. Each state tensor becomes tensor.to(param's device, param's dtype), as PyTorch
  // casts it: one already there is shared, not copied (allocating nothing); any other is a new block on
  // the parameter's device. The old state is freed after the new one is made. Everything is checked first
  // and nothing changes on an error (std::invalid_argument naming the group, index and key): the number of
  // groups and each group's size (PyTorch's texts), each group's options, an index no group lists, a
  // missing or unknown key, a state tensor whose shape is not its parameter's or whose dtype is not
  // floating for a floating parameter.
  void load_state_dict(const OptimizerStateDict& state_dict);

 protected:
  // The pieces each optimizer gives state_dict and load_state_dict.
  virtual std::vector<size_t> group_sizes() const = 0;
  virtual json::Value group_options(size_t group) const = 0;
  virtual std::optional<ParamState> param_state(size_t param_index) const = 0;
  // What a parameter's state must hold under `options` (its group's, as loaded): a "step" or not, and which
  // tensors.
  struct StateKeys {
    bool step = false;
    std::vector<std::string> tensors;
  };
  virtual StateKeys state_keys(const json::Value& options) const = 0;
  // Checks every group's options (throwing std::invalid_argument naming the group) without changing anything.
  virtual void check_group_options(const std::vector<json::Value>& options) const = 0;
  // Takes the checked options and state (one entry per parameter, cast already); cannot fail.
  virtual void replace_state(const std::vector<json::Value>& options, std::vector<std::optional<ParamState>> state) = 0;

  // PyTorch's add_param_group rule: params_ is the groups' parameters concatenated (each group ends at the
  // matching entry of group_ends); a tensor in two groups would be stepped twice with two states.
  void check_groups_disjoint(const std::vector<size_t>& group_ends) const;
  // What the ledger and reports call parameter `param_index`'s state `key` ("0.weight.exp_avg"): the name a
  // module gave the parameter, else "param<index>" (its index in params(), as state_dict() numbers it).
  // State is allocated inside a TensorNameScope of this name.
  std::string state_name(size_t param_index, std::string_view key) const;
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
  std::vector<size_t> group_sizes() const override { return group_sizes_; }
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

// Helpers for options held as JSON: a number written as Python's repr writes it (shortest round trip),
// and readers that throw std::invalid_argument naming the group and key.
json::Value json_number(double value);
// The keys every PyTorch 2.11 optimizer's param group dict has after its own hyperparameters, in its order:
// "maximize", "foreach", "capturable" (only the optimizers that have it), "differentiable", "fused".
void add_flag_options(json::Value& group, bool foreach, bool has_capturable);
double option_number(const json::Value& options, size_t group, const char* key);
bool option_bool(const json::Value& options, size_t group, const char* key, bool absent);
std::optional<double> option_initial_lr(const json::Value& options, size_t group);
// Refuses a PyTorch option bytegrad's optimizers do not have when it asks for the unsupported behaviour
// ("maximize": true, "fused": true, ...): absent, false and null are accepted.
void refuse_true_option(const json::Value& options, size_t group, const char* key);

}  // namespace bytegrad::optim
