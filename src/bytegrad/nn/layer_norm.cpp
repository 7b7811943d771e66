#include "bytegrad/nn/layer_norm.h"

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias, TensorOptions options)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (normalized_shape_.empty())
    throw std::invalid_argument("LayerNorm: normalized_shape must have at least one dimension");
  for (int64_t s : normalized_shape_)
    if (s < 0)
      throw std::invalid_argument(
          fmt::format("LayerNorm: normalized_shape {} has a negative size", shape_str(normalized_shape_)));
  if (!is_floating_point(options.resolved_dtype()))
    throw std::invalid_argument(fmt::format("LayerNorm: parameters must be floating point, got {}",
                                            scalar_type_name(options.resolved_dtype())));
  if (elementwise_affine) {
    AllocationScope scope("parameter");
    weight_ = register_parameter("weight", ones(normalized_shape_, options));
    if (bias) bias_ = register_parameter("bias", zeros(normalized_shape_, options));
  }
}

void LayerNorm::reset_parameters() {
  NoGradGuard no_grad;
  if (weight_.defined()) weight_.fill_(1.0);
  if (bias_.defined()) bias_.zero_();
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape_, weight_.defined() ? std::optional<Tensor>(weight_) : std::nullopt,
                    bias_.defined() ? std::optional<Tensor>(bias_) : std::nullopt, eps_);
}

}  // namespace bytegrad::nn
