#include "bytegrad/nn/rms_norm.h"

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine, TensorOptions options)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (normalized_shape_.empty())
    throw std::invalid_argument("RMSNorm: normalized_shape must have at least one dimension");
  for (int64_t s : normalized_shape_)
    if (s < 0)
      throw std::invalid_argument(
          fmt::format("RMSNorm: normalized_shape {} has a negative size", shape_str(normalized_shape_)));
  if (!is_floating_point(options.resolved_dtype()))
    throw std::invalid_argument(
        fmt::format("RMSNorm: the weight must be floating point, got {}", scalar_type_name(options.resolved_dtype())));
  if (elementwise_affine) {
    AllocationScope scope("parameter");
    weight_ = register_parameter("weight", ones(normalized_shape_, options));
  }
}

Tensor RMSNorm::forward(const Tensor& input) {
  return rms_norm(input, normalized_shape_, weight_.defined() ? std::optional<Tensor>(weight_) : std::nullopt, eps_);
}

}  // namespace bytegrad::nn
