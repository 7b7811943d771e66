// torch.nn.utils.clip_grad_norm_ and clip_grad_value_: rescale or clamp the parameters' gradients in place,
// between backward() and the optimizer's step(). Both run under a NoGradGuard and skip parameters without a
// gradient, as PyTorch's.
//
// Device memory (PyTorch 2.11 on the H100, tests/data/pytorch_probes/clip_grad.jsonl), gradients grouped by
// device and dtype; the foreach path (PyTorch's default where the device supports it: cuda, sim, meta here;
// never cpu) for one group of n gradients:
//   foreach_norm: a zeroed scratch of n * max_chunks float32 (max_chunks = ceil(largest numel / 65536)),
//                 the n 0-d norms, the scratch freed;
//   stack(norms) (n elements), vector_norm of it (the 0-d total norm, returned), the stack and the n norms
//   freed; then total_norm + 1e-6, its reciprocal, reciprocal * max_norm (clip_coef: Python's
//   `max_norm / tensor` is reciprocal() * max_norm), the reciprocal and the sum freed; clamp(clip_coef,
//   max=1) (clip_coef_clamped); _foreach_mul_ of the gradients by it (nothing allocated); clip_coef and
//   clip_coef_clamped freed. Only the total norm stays.
// With foreach=false each gradient's vector_norm in turn (its reduction's scratch included) replaces
// foreach_norm; the rest is the same, the gradients multiplied one by one. clip_grad_value_ allocates nothing.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad::nn::utils {

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)), total_norm being the norm of order
// norm_type (2, 1 or inf; others are refused) of all gradients together, and returns total_norm (a 0-d
// tensor on the first gradient's device; a cpu float32 0 when no parameter has a gradient).
// error_if_nonfinite: a NaN or infinite total norm is a std::runtime_error and no gradient is changed.
// foreach: nullopt uses the multi-tensor ops where the device supports them; true insists on them (a
// std::runtime_error on cpu); false computes gradient by gradient.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, std::optional<bool> foreach = std::nullopt);
Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, std::optional<bool> foreach = std::nullopt);

// Clamps every gradient into [-clip_value, clip_value] in place.
// Gradients sharded over a process group (FSDP's; DTensor gradients in PyTorch): the norms computed from this
// rank's shards are partial, and PyTorch 2.11 makes their stack whole as DTensor redistributes a
// _NormPartial to Replicate: the p-th powers, an all-reduce of a copy (sum; max for inf), the p-th root.
// The total norm and the clip coefficient are then the same on every rank. distributed/fsdp.h installs the
// lookup, which gives a parameter's reducer (an empty one for an unsharded parameter); mixing sharded and
// unsharded gradients in one call is refused, as PyTorch refuses stacking DTensors with tensors.
using ShardedNormReducer = std::function<Tensor(const Tensor& stacked_local_norms, double norm_type)>;
using ShardedNormLookup = ShardedNormReducer (*)(const Tensor& parameter);
void set_sharded_norm_lookup(ShardedNormLookup lookup);

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value,
                      std::optional<bool> foreach = std::nullopt);
void clip_grad_value_(const Tensor& parameter, double clip_value, std::optional<bool> foreach = std::nullopt);

}  // namespace bytegrad::nn::utils
