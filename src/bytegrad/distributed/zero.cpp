#include "bytegrad/distributed/zero.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "bytegrad/autograd/grad_mode.h"

namespace bytegrad::distributed {

namespace {

std::vector<std::vector<Tensor>> partition_parameters(const std::vector<Tensor>& params, int world_size) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<std::vector<Tensor>> out(static_cast<size_t>(world_size));
  std::vector<int64_t> sizes(static_cast<size_t>(world_size), 0);
  for (size_t i : order) {
    const auto rank = static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    out[rank].push_back(params[i]);
    sizes[rank] += params[i].numel();
  }
  return out;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, ProcessGroup& group,
                                                 const LocalOptimizerFactory& make_local, ZeroOptions options)
    : Optimizer(std::move(params)), group_(group), options_(options) {
  if (params_.empty()) throw std::invalid_argument("ZeroRedundancyOptimizer: optimizer got an empty parameter list");
  for (const Tensor& p : params_)
    if (p.device() != group.device())
      throw std::invalid_argument("ZeroRedundancyOptimizer on rank " + std::to_string(group.rank()) +
                                  ": a parameter is on " + p.device().str() + ", but this rank's process group uses " +
                                  group.device().str());
  if (!make_local) throw std::invalid_argument("ZeroRedundancyOptimizer: no local optimizer factory given");
  partition_ = partition_parameters(params_, group.size());
  local_ = make_local(partition_[static_cast<size_t>(group.rank())]);
  if (!local_ && !partition_[static_cast<size_t>(group.rank())].empty())
    throw std::invalid_argument("ZeroRedundancyOptimizer: the factory returned no optimizer for rank " +
                                std::to_string(group.rank()) + "'s parameters");
  trainable_ = trainable_mask();
  if (options_.parameters_as_bucket_view) {
    for (const Tensor& p : params_)
      if (p.dtype() != params_.front().dtype())
        throw std::invalid_argument(
            "ZeroRedundancyOptimizer: parameters_as_bucket_view needs every parameter of one dtype, got " +
            std::string(scalar_type_name(params_.front().dtype())) + " and " +
            std::string(scalar_type_name(p.dtype())));
    build_param_buckets();
  }
}

std::vector<bool> ZeroRedundancyOptimizer::trainable_mask() const {
  std::vector<bool> mask;
  mask.reserve(params_.size());
  for (const Tensor& p : params_) mask.push_back(p.requires_grad());
  return mask;
}

namespace {

// `param.data = replacement`: the handle (shared by the module, DDP and the optimizers) now reads the
// replacement's storage; the old block is freed here when nothing else holds it.
void replace_data(const Tensor& param, const Tensor& replacement) {
  TensorImpl& impl = param.impl();
  impl.storage = replacement.storage();
  impl.sizes = replacement.sizes();
  impl.strides = replacement.strides();
  impl.storage_offset = replacement.storage_offset();
}

}  // namespace

void ZeroRedundancyOptimizer::build_param_buckets() {
  NoGradGuard no_grad;
  // The old buckets are dropped first; each stays alive while a parameter still points into it.
  buckets_.clear();
  bucket_roles_.clear();
  const Device device = group_.device();  // every parameter is there (checked at construction)
  for (size_t rank = 0; rank < partition_.size(); ++rank) {
    int64_t numel = 0;
    std::vector<Tensor> trainable;
    for (const Tensor& p : partition_[rank]) {
      if (!p.requires_grad()) {
        replace_data(p, p.detach().clone());  // out of any old bucket, so the bucket's data is not lost
      } else {
        numel += p.numel();
        trainable.push_back(p);
      }
    }
    Tensor bucket;
    if (numel == 0) {
      bucket = zeros({1}, TensorOptions{}.with_device(device));  // a placeholder to broadcast: float32
    } else {
      bucket = empty({numel}, TensorOptions{trainable.front().dtype(), device});
      int64_t offset = 0;
      for (const Tensor& p : trainable) {
        Tensor slice = bucket.narrow(0, offset, p.numel());
        slice.copy_(p.detach().reshape({-1}));
        replace_data(p, slice.view(p.sizes()));
        offset += p.numel();
      }
    }
    bucket_roles_.emplace_back(bucket, MemoryCategory::parameter,
                               "ZeroRedundancyOptimizer bucket of rank " + std::to_string(rank));
    buckets_.push_back(std::move(bucket));
  }
}

void ZeroRedundancyOptimizer::step() {
  // _local_step: a change of requires_grad since the buckets were built rebuilds them first.
  if (std::vector<bool> mask = trainable_mask(); mask != trainable_) {
    if (options_.parameters_as_bucket_view) build_param_buckets();
    trainable_ = std::move(mask);
  }
  if (local_) local_->step();
  // _sync_params: every parameter (or rank's bucket) from its owner, async and in place, then all waited for.
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (int owner = 0; owner < group_.size(); ++owner) {
    const auto index = static_cast<size_t>(owner);
    if (options_.parameters_as_bucket_view) {
      works.push_back(group_.broadcast(buckets_[index], owner, true));
    } else {
      for (const Tensor& p : partition_[index]) works.push_back(group_.broadcast(p, owner, true));
    }
  }
  for (auto& w : works)
    if (w) w->wait();
}

double ZeroRedundancyOptimizer::lr(size_t group) const { return local_ ? local_->lr(group) : lr_; }

void ZeroRedundancyOptimizer::set_lr(size_t group, double lr) {
  if (local_) local_->set_lr(group, lr);
  lr_ = lr;
}

std::optional<double>& ZeroRedundancyOptimizer::initial_lr(size_t group) {
  return local_ ? local_->initial_lr(group) : initial_lr_;
}

namespace {

[[noreturn]] void refuse_state() {
  throw std::logic_error(
      "ZeroRedundancyOptimizer: state_dict and load_state_dict are not supported yet: each rank holds only its "
      "own partition's optimizer state (PyTorch gathers it on one rank first with consolidate_state_dict)");
}

}  // namespace

json::Value ZeroRedundancyOptimizer::group_options(size_t /*group*/) const { refuse_state(); }
std::optional<optim::ParamState> ZeroRedundancyOptimizer::param_state(size_t /*param_index*/) const { refuse_state(); }
optim::Optimizer::StateKeys ZeroRedundancyOptimizer::state_keys(const json::Value& /*options*/) const {
  refuse_state();
}
void ZeroRedundancyOptimizer::check_group_options(const std::vector<json::Value>& /*options*/) const { refuse_state(); }
void ZeroRedundancyOptimizer::replace_state(const std::vector<json::Value>& /*options*/,
                                            std::vector<std::optional<optim::ParamState>> /*state*/) {
  refuse_state();
}

}  // namespace bytegrad::distributed
