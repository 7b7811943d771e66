// PyTorch's _foreach_* ops on lists of tensors that torch.nn.utils.clip_grad_norm_ and clip_grad_value_
// call: _foreach_norm, _foreach_mul_ (by a 0-d tensor) and _foreach_clamp_min_/_max_. The in-place ones
// allocate nothing; _foreach_norm's allocations are PyTorch's multi-tensor kernel's (see foreach_norm).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

// PyTorch's multi_tensor_apply chunk: each tensor is cut into chunks of this many elements, and
// _foreach_norm keeps one partial result per chunk (ForeachReduceOp.cu).
constexpr int64_t kForeachChunkSize = 65536;

void check_tensor_list(const char* name, const std::vector<Tensor>& tensors) {
  if (tensors.empty())
    throw std::invalid_argument(fmt::format("{}: the tensor list must have at least one tensor", name));
  for (const Tensor& t : tensors) check_defined(name, t);
}

// PyTorch's can_use_fast_route (ForeachUtils.h) for one list: one device and one dtype, every tensor
// non-overlapping and dense; and a GPU-like device (on cpu PyTorch always takes the per-tensor path).
bool fast_route(const std::vector<Tensor>& tensors) {
  const Tensor& first = tensors.front();
  if (first.device().type == DeviceType::cpu) return false;
  return std::all_of(tensors.begin(), tensors.end(), [&](const Tensor& t) {
    return t.device() == first.device() && t.dtype() == first.dtype() && is_non_overlapping_and_dense(t);
  });
}

// The math type PyTorch's kernels accumulate a dtype in (toOpMathType): float for the 16-bit floats.
ScalarType opmath_type(ScalarType t) {
  return t == ScalarType::float16 || t == ScalarType::bfloat16 ? ScalarType::float32 : t;
}

}  // namespace

// foreach_tensor_norm_cuda: for ord 1, 2 and inf over a fast-route list of floating tensors, the zeroed
// per-chunk scratch (ntensors * max_chunks elements in the opmath type, max_chunks = ceil(largest numel /
// 65536)), then one 0-d result per tensor in list order; the scratch is freed when the op returns. Any
// other list (another ord, mixed dtypes or devices, strided views, cpu) takes foreach_tensor_norm_slow:
// each tensor's linalg.vector_norm in turn (its output and its reduction's scratch).
std::vector<Tensor> foreach_norm(const std::vector<Tensor>& tensors, double ord) {
  const char* name = "foreach_norm";
  check_tensor_list(name, tensors);
  const bool inf = ord == std::numeric_limits<double>::infinity();
  if (!inf && ord != 1.0 && ord != 2.0)
    throw std::invalid_argument(
        fmt::format("{}: ord={} is not supported by bytegrad (ord 1, 2 and inf are)", name, ord));
  for (const Tensor& t : tensors) {
    if (!is_floating_point(t.dtype()))
      throw std::invalid_argument(fmt::format(
          "{}: {} is not floating point (linalg.vector_norm takes floating tensors; convert with .to(float32))", name,
          describe(t)));
    if (inf && t.numel() == 0)
      throw std::invalid_argument(
          fmt::format("{}: cannot compute the inf norm of {}: the reduction has no identity", name, describe(t)));
    if (AutogradHook* hook = autograd_hook(); hook && !autograd_recording_paused() && hook->needs_graph({t}))
      throw std::invalid_argument(
          fmt::format("{}: {} requires grad, and foreach_norm has no gradient in bytegrad; call it under a NoGradGuard",
                      name, describe(t)));
  }
  if (!fast_route(tensors)) {
    std::vector<Tensor> norms;
    norms.reserve(tensors.size());
    for (const Tensor& t : tensors) norms.push_back(vector_norm(t, ord));
    return norms;
  }
  AllocationScope scope(name);
  const Tensor& first = tensors.front();
  int64_t max_chunks = 0;
  for (const Tensor& t : tensors)
    max_chunks = std::max(max_chunks, (t.numel() + kForeachChunkSize - 1) / kForeachChunkSize);
  const Tensor chunk_partials = zeros({static_cast<int64_t>(tensors.size()) * max_chunks},
                                      TensorOptions{opmath_type(first.dtype()), first.device()});
  std::vector<Tensor> norms;
  norms.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) norms.push_back(empty({}, TensorOptions{first.dtype(), first.device()}));
  // The values: each tensor reduced straight into its result (the chunk partials are PyTorch's kernel's
  // business; bytegrad's kernels need no scratch for them).
  const ReduceOp kernel = inf ? ReduceOp::norm_inf : ord == 1.0 ? ReduceOp::norm_one : ReduceOp::norm;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const Tensor out = norms[i].view(Shape(static_cast<size_t>(t.dim()), 1));
    if (t.numel() == 0) backend_of(t).fill(kv(out), 0.0);
    else backend_of(t).reduce(kernel, kv(out), kv(t));
  }
  return norms;
}

// _foreach_mul_.Tensor: every tensor multiplied in place by `scalar`, a 0-d tensor on their device;
// nothing is allocated.
void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scalar) {
  const char* name = "foreach_mul_";
  check_tensor_list(name, tensors);
  check_defined(name, scalar);
  if (scalar.dim() != 0)
    throw std::invalid_argument(fmt::format("{}: the scalar tensor must be 0-d, got {}", name, describe(scalar)));
  for (const Tensor& t : tensors) t.mul_(scalar);
}

void foreach_clamp_min_(const std::vector<Tensor>& tensors, double min) {
  check_tensor_list("foreach_clamp_min_", tensors);
  for (const Tensor& t : tensors) clamp_min_(t, min);
}

void foreach_clamp_max_(const std::vector<Tensor>& tensors, double max) {
  check_tensor_list("foreach_clamp_max_", tensors);
  for (const Tensor& t : tensors) clamp_max_(t, max);
}

namespace {

void check_amp_scalar(const char* name, const char* what, const Tensor& t, ScalarType dtype) {
  check_defined(name, t);
  if (t.numel() != 1 || t.dtype() != dtype)
    throw std::invalid_argument(
        fmt::format("{}: {} must be a 1-element {} tensor, got {}", name, what, scalar_type_name(dtype), describe(t)));
}

}  // namespace

void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                               const Tensor& inv_scale) {
  const char* name = "amp_foreach_non_finite_check_and_unscale_";
  check_amp_scalar(name, "found_inf", found_inf, ScalarType::float32);
  check_amp_scalar(name, "inv_scale", inv_scale, ScalarType::float32);
  if (grads.empty()) return;
  for (const Tensor& g : grads) {
    check_defined(name, g);
    if (!is_floating_point(g.dtype()))
      throw std::invalid_argument(fmt::format("{}: the gradient {} is not floating point", name, describe(g)));
    if (g.device() != inv_scale.device() || g.device() != found_inf.device())
      throw std::invalid_argument(
          fmt::format("{}: the gradient {} is not on the device of inv_scale and found_inf ({})", name, describe(g),
                      inv_scale.device().str()));
  }
  // On cuda the check and the multiply are one kernel per gradient that writes found_inf on the device
  // (PyTorch's _amp_foreach_non_finite_check_and_unscale_ kernel): nothing is read back to the host.
  if (inv_scale.device().type == DeviceType::cuda) {
    for (const Tensor& g : grads) {
      if (g.numel() > 0) backend_of(g).amp_non_finite_check_and_unscale(kv(g), kv(found_inf), kv(inv_scale));
      g.bump_version();
    }
    found_inf.bump_version();
    return;
  }
  // cpu and sim: the check reads the values before they are scaled (a finite value may overflow once
  // multiplied).
  bool non_finite = false;
  if (!inv_scale.is_meta())
    for (const Tensor& g : grads) {
      if (non_finite) break;
      for (double v : g.tolist())
        if (!std::isfinite(v)) {
          non_finite = true;
          break;
        }
    }
  const Tensor scale = inv_scale.dim() == 0 ? inv_scale : inv_scale.view({});
  foreach_mul_(grads, scale);
  if (non_finite) found_inf.fill_(1.0);
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                       double backoff_factor, int64_t growth_interval) {
  const char* name = "amp_update_scale_";
  check_amp_scalar(name, "scale", scale, ScalarType::float32);
  check_amp_scalar(name, "growth_tracker", growth_tracker, ScalarType::int32);
  check_amp_scalar(name, "found_inf", found_inf, ScalarType::float32);
  if (scale.is_meta()) return;
  if (scale.device().type == DeviceType::cuda) {  // on the device, as PyTorch's kernel: no value read back
    if (found_inf.device() != scale.device() || growth_tracker.device() != scale.device())
      throw std::invalid_argument(fmt::format("{}: scale {}, growth_tracker {} and found_inf {} must share a device",
                                              name, describe(scale), describe(growth_tracker), describe(found_inf)));
    backend_of(scale).amp_update_scale(kv(scale), kv(growth_tracker), kv(found_inf), growth_factor, backoff_factor,
                                       growth_interval);
    scale.bump_version();
    growth_tracker.bump_version();
    return;
  }
  const auto current = static_cast<float>(scale.item());
  const auto tracker = static_cast<int64_t>(growth_tracker.item());
  if (found_inf.item() != 0) {
    scale.fill_(static_cast<float>(static_cast<double>(current) * backoff_factor));
    growth_tracker.fill_(0);
    return;
  }
  const int64_t successful = tracker + 1;
  if (successful == growth_interval) {
    const auto grown = static_cast<float>(static_cast<double>(current) * growth_factor);
    if (std::isfinite(grown)) scale.fill_(grown);  // not past float32's range to inf
    growth_tracker.fill_(0);
  } else {
    growth_tracker.fill_(static_cast<double>(successful));
  }
}

}  // namespace bytegrad
