// clip_grad_norm_ and clip_grad_value_ as torch/nn/utils/clip_grad.py computes them: the same ops in the
// same order, so the same allocations (listed in clip_grad.h).
#include "bytegrad/nn/clip_grad.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn::utils {

namespace {

// _group_tensors_by_device_and_dtype: the gradients in groups of one device and dtype, groups in the order
// their first gradient comes.
std::vector<std::vector<Tensor>> group_by_device_and_dtype(const std::vector<Tensor>& grads) {
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& g : grads) {
    bool placed = false;
    for (std::vector<Tensor>& group : groups) {
      if (group.front().device() == g.device() && group.front().dtype() == g.dtype()) {
        group.push_back(g);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({g});
  }
  return groups;
}

std::vector<Tensor> gradients_of(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    if (!p.defined()) throw std::invalid_argument("clip_grad: a parameter in the list is an undefined tensor");
    if (Tensor g = p.grad(); g.defined()) grads.push_back(std::move(g));
  }
  return grads;
}

// _device_has_foreach_support: PyTorch's foreach kernels exist for cuda; sim and meta model it. On cpu
// torch.nn.utils takes the per-gradient path.
bool device_has_foreach_support(Device device) { return device.type != DeviceType::cpu; }

// Whether a group takes the foreach path; foreach=true on a device without it is refused, as PyTorch does.
bool use_foreach(const std::vector<Tensor>& group, std::optional<bool> foreach) {
  const Device device = group.front().device();
  if (foreach.value_or(true) && device_has_foreach_support(device)) return true;
  if (foreach.value_or(false))
    throw std::runtime_error(
        fmt::format("foreach=True was passed, but can't use the foreach API on {} tensors", device.str()));
  return false;
}

std::atomic<ShardedNormLookup> sharded_norm_lookup{nullptr};

// The reducer of the parameters that have gradients: empty when none is sharded.
ShardedNormReducer sharded_reducer_of(const std::vector<Tensor>& parameters) {
  const ShardedNormLookup lookup = sharded_norm_lookup.load();
  if (lookup == nullptr) return {};
  ShardedNormReducer reducer;
  bool any = false, unsharded = false;
  for (const Tensor& p : parameters) {
    if (!p.grad().defined()) continue;
    ShardedNormReducer mine = lookup(p);
    if (mine) {
      if (!reducer) reducer = std::move(mine);
      any = true;
    } else {
      unsharded = true;
    }
  }
  if (any && unsharded)
    throw std::invalid_argument(
        "clip_grad_norm_: some gradients are sharded (fully_shard) and some are not; clip each kind separately");
  return reducer;
}

std::string order_name(double norm_type) {
  return std::isinf(norm_type) ? (norm_type > 0 ? "inf" : "-inf") : fmt::format("{}", norm_type);
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite, std::optional<bool> foreach) {
  if (norm_type != 2.0 && norm_type != 1.0 && norm_type != std::numeric_limits<double>::infinity())
    throw std::invalid_argument(fmt::format(
        "clip_grad_norm_: norm_type={} is not supported by bytegrad (2, 1 and inf are)", order_name(norm_type)));
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(parameters);
  if (grads.empty()) return scalar_tensor(0.0, TensorOptions{ScalarType::float32, kCpu});
  const std::vector<std::vector<Tensor>> groups = group_by_device_and_dtype(grads);
  const ShardedNormReducer reducer = sharded_reducer_of(parameters);

  // _get_total_norm
  std::vector<Tensor> norms;
  for (const std::vector<Tensor>& group : groups) {
    if (use_foreach(group, foreach)) {
      for (Tensor& n : foreach_norm(group, norm_type)) norms.push_back(std::move(n));
    } else {
      for (const Tensor& g : group) norms.push_back(vector_norm(g, norm_type));
    }
  }
  const Device first_device = grads.front().device();
  for (Tensor& n : norms) n = n.to(first_device);
  Tensor total_norm;
  {
    const Tensor stacked = stack(norms);
    if (reducer) {
      const Tensor whole = reducer(stacked, norm_type);  // freed before the stack, once the norm exists
      total_norm = vector_norm(whole, norm_type);
    } else {
      total_norm = vector_norm(stacked, norm_type);
    }
  }
  norms.clear();
  if (error_if_nonfinite) {
    // torch.logical_or(total_norm.isnan(), total_norm.isinf()): isnan is self != self, isinf abs(self) == inf.
    const Tensor is_nan = ne(total_norm, total_norm);
    const Tensor is_inf = eq(abs(total_norm), std::numeric_limits<double>::infinity());
    if (logical_or(is_nan, is_inf).item() != 0.0)
      throw std::runtime_error(fmt::format(
          "The total norm of order {} for gradients from `parameters` is non-finite, so it cannot be clipped. To "
          "disable this error and scale the gradients by the non-finite norm anyway, set "
          "`error_if_nonfinite=false`",
          order_name(norm_type)));
  }

  // _clip_grads_with_norm_: clip_coef = max_norm / (total_norm + 1e-6), Python's float / Tensor being
  // reciprocal() * max_norm; the sum is freed once clip_coef exists.
  Tensor clip_coef;
  {
    const Tensor shifted = total_norm + 1e-6;
    clip_coef = reciprocal(shifted) * max_norm;
  }
  const Tensor clip_coef_clamped = clamp(clip_coef, std::nullopt, 1.0);
  for (const std::vector<Tensor>& group : groups) {
    const Tensor coef = clip_coef_clamped.to(group.front().device());
    if (use_foreach(group, foreach)) {
      foreach_mul_(group, coef);
    } else {
      for (const Tensor& g : group) g.mul_(coef);
    }
  }
  return total_norm;
}

Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite,
                       std::optional<bool> foreach) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite, foreach);
}

void set_sharded_norm_lookup(ShardedNormLookup lookup) { sharded_norm_lookup.store(lookup); }

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value, std::optional<bool> foreach) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = gradients_of(parameters);
  for (const std::vector<Tensor>& group : group_by_device_and_dtype(grads)) {
    if (use_foreach(group, foreach)) {
      foreach_clamp_min_(group, -clip_value);
      foreach_clamp_max_(group, clip_value);
    } else {
      for (const Tensor& g : group) g.clamp_(-clip_value, clip_value);
    }
  }
}

void clip_grad_value_(const Tensor& parameter, double clip_value, std::optional<bool> foreach) {
  clip_grad_value_(std::vector<Tensor>{parameter}, clip_value, foreach);
}

}  // namespace bytegrad::nn::utils
