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
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad::optim {

// One of PyTorch's param_groups: parameters with their own options (an optimizer's Options struct).
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
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

 protected:
  // PyTorch's add_param_group rule: params_ is the groups' parameters concatenated (each group ends at the
  // matching entry of group_ends); a tensor in two groups would be stepped twice with two states.
  void check_groups_disjoint(const std::vector<size_t>& group_ends) const;
  std::vector<Tensor> params_;
};

// torch.optim's range checks for one hyperparameter, with its ValueError texts ("Invalid learning rate:
// nan"), prefixed by the optimizer's name. Written as `low <= value` (and `value < high`) so that NaN,
// which compares false to everything, is refused too. Each throws std::invalid_argument.
void check_at_least_zero(const char* optimizer, const char* what, double value);  // "learning rate", ...
void check_beta(const char* optimizer, int index, double beta);                   // 0 <= beta < 1
void check_not_nan(const char* optimizer, const char* what, double value);

}  // namespace bytegrad::optim
