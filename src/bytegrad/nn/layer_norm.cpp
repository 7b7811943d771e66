#include "bytegrad/nn/layer_norm.h"

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/nn/norm_arguments.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias, TensorOptions options)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  check_norm_arguments("LayerNorm", normalized_shape_, options.resolved_dtype(), "parameters");
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
