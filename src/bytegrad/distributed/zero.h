// ZeroRedundancyOptimizer (ZeRO stage 1): torch.distributed.optim.ZeroRedundancyOptimizer for one param
// group. Each rank keeps the optimizer state of its own partition of the parameters only; gradients stay
// whole (DDP all-reduces them), and after each local step every parameter is broadcast from the rank that
// owns it.
//
//   distributed::ZeroRedundancyOptimizer opt(ddp.parameters(), pg, [](std::vector<Tensor> mine) {
//     return std::make_unique<optim::Adam>(std::move(mine), optim::AdamOptions{.lr = 1e-3, .foreach = true});
//   });
//
// Partition (PyTorch's _partition_parameters): parameters sorted by size, largest first (ties in their
// order), each given to the rank with the fewest elements so far (the lowest rank among equals). A rank's
// local optimizer gets its parameters in that order, so its state is allocated in that order at its first
// step. Ranks therefore hold different amounts of optimizer state. The broadcasts after the step allocate
// nothing (async, in place, each waited for).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/distributed/process_group.h"
#include "bytegrad/optim/optimizer.h"

namespace bytegrad::distributed {

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // Makes the optimizer of this rank's partition (called once; with an empty list when the rank owns no
  // parameter, in which case it may return nullptr).
  using LocalOptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

  ZeroRedundancyOptimizer(std::vector<Tensor> params, ProcessGroup& group, const LocalOptimizerFactory& make_local);

  void step() override;  // the local step, then every parameter broadcast from its owner

  // The parameters each rank owns, in its local optimizer's order.
  const std::vector<std::vector<Tensor>>& partition() const { return partition_; }
  optim::Optimizer* local_optimizer() const { return local_.get(); }

  size_t num_param_groups() const override { return 1; }
  double lr(size_t group) const override;
  void set_lr(size_t group, double lr) override;
  std::optional<double>& initial_lr(size_t group) override;

 protected:
  // state_dict / load_state_dict refuse for now (std::logic_error): each rank holds only its partition's
  // state, which PyTorch gathers on one rank first (consolidate_state_dict); not built yet.
  std::vector<size_t> group_sizes() const override { return {params_.size()}; }
  json::Value group_options(size_t group) const override;
  std::optional<optim::ParamState> param_state(size_t param_index) const override;
  std::vector<std::string> state_tensor_keys(const json::Value& options) const override;
  bool state_has_step() const override { return true; }
  void check_group_options(const std::vector<json::Value>& options) const override;
  void replace_state(const std::vector<json::Value>& options,
                     std::vector<std::optional<optim::ParamState>> state) override;

 private:
  ProcessGroup& group_;
  std::vector<std::vector<Tensor>> partition_;
  std::unique_ptr<optim::Optimizer> local_;
  double lr_ = 0;  // for a rank without a local optimizer
  std::optional<double> initial_lr_;
};

}  // namespace bytegrad::distributed
