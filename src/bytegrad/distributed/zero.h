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
//
// parameters_as_bucket_view (PyTorch's _build_param_buckets, run by the constructor after the local
// optimizer is made): for each rank in turn, one flat bucket of that rank's parameters (all on this rank's
// device, one dtype) is allocated, each parameter copied into it and re-pointed at its slice (`param.data =
// bucket[a:b].view_as(param)`), which frees the parameter's old block unless something else holds it; a
// rank owning no parameter gets a float32 `zeros(1)` instead. A parameter that does not require a gradient
// is cloned out of any bucket. The step then broadcasts one bucket per rank instead of one tensor per
// parameter. The buckets are rebuilt when the step finds that the parameters' requires_grad changed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/distributed/process_group.h"
#include "bytegrad/optim/optimizer.h"
#include "bytegrad/tensor/memory_role.h"

namespace bytegrad::distributed {

// PyTorch's keyword arguments (overlap_with_ddp is not built).
struct ZeroOptions {
  bool parameters_as_bucket_view = false;
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // Makes the optimizer of this rank's partition (called once; with an empty list when the rank owns no
  // parameter, in which case it may return nullptr).
  using LocalOptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

  ZeroRedundancyOptimizer(std::vector<Tensor> params, ProcessGroup& group, const LocalOptimizerFactory& make_local,
                          ZeroOptions options = {});

  void step() override;  // the local step, then every parameter (or bucket) broadcast from its owner

  // The parameters each rank owns, in its local optimizer's order.
  const std::vector<std::vector<Tensor>>& partition() const { return partition_; }
  optim::Optimizer* local_optimizer() const { return local_.get(); }
  // With parameters_as_bucket_view, rank r's flat bucket (index r); empty otherwise.
  const std::vector<Tensor>& buckets() const { return buckets_; }

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
  StateKeys state_keys(const json::Value& options) const override;
  void check_group_options(const std::vector<json::Value>& options) const override;
  void replace_state(const std::vector<json::Value>& options,
                     std::vector<std::optional<optim::ParamState>> state) override;

 private:
  ProcessGroup& group_;
  std::vector<std::vector<Tensor>> partition_;
  void build_param_buckets();
  std::vector<bool> trainable_mask() const;

  std::unique_ptr<optim::Optimizer> local_;
  ZeroOptions options_;
  std::vector<Tensor> buckets_;
  std::vector<MemoryRole> bucket_roles_;  // each bucket's block is the parameters' block now
  std::vector<bool> trainable_;
  double lr_ = 0;  // for a rank without a local optimizer
  std::optional<double> initial_lr_;
};

}  // namespace bytegrad::distributed
