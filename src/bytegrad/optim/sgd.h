#pragma once

#include <vector>

#include "bytegrad/optim/optimizer.h"

namespace bytegrad::optim {

// torch.optim.SGD, _single_tensor_sgd. Per parameter and step, in parameter order:
//  - weight_decay != 0: grad = grad.add(param, alpha=wd), a param-sized temporary (freed when the next
//    parameter's turn begins, or when step returns);
//  - momentum != 0, first step: buf = clone(grad), the persistent momentum buffer (param-sized); later
//    steps update it in place (mul_, add_);
//  - nesterov: grad = grad.add(buf, alpha=momentum), another temporary (the weight-decay one, if any, is
//    freed as soon as it is allocated);
//  - param.add_(grad, alpha=-lr) in place.
// Multi-tensor (foreach=true), _multi_tensor_sgd: weight_decay != 0 makes the list grads + wd * params
// (one temporary per parameter, all alive; dropped, last parameter first, when the momentum buffers take
// their place or when step returns); momentum buffers are created (clone) or updated in place exactly as
// above; nesterov adds the buffers into the gradients in place (into .grad itself when there is no weight
// decay, as PyTorch does).
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool foreach = false;  // PyTorch's multi-tensor path (its default on CUDA)
};

using SGDParamGroup = ParamGroup<SGDOptions>;

// One param group (param_groups()[0]).
class SGD : public GroupedOptimizer<SGDOptions> {
 public:
  SGD(std::vector<Tensor> params, double lr = 1e-3, double momentum = 0.0, double dampening = 0.0,
      double weight_decay = 0.0, bool nesterov = false);
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  void step() override;
  // Undefined until the parameter's first step with momentum.
  const Tensor& momentum_buffer(size_t param_index) const { return momentum_buffers_.at(param_index); }

 private:
  static void check_options(const SGDOptions& options);
  static SGDOptions options_from_json(const json::Value& options, size_t group);
  void load_options();
  void single_tensor_step();
  void multi_tensor_step();
  // state_dict and load_state_dict's pieces (optimizer.h)
  json::Value group_options(size_t group) const override;
  std::optional<ParamState> param_state(size_t param_index) const override;
  StateKeys state_keys(const json::Value& options) const override;
  void check_group_options(const std::vector<json::Value>& options) const override;
  void replace_state(const std::vector<json::Value>& options, std::vector<std::optional<ParamState>> state) override;
  double lr_ = 0, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false, foreach_ = false;
  std::vector<Tensor> momentum_buffers_;
};

}  // namespace bytegrad::optim
