#include "bytegrad/nn/rms_norm.h"

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/nn/norm_arguments.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine, TensorOptions options)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  check_norm_arguments("RMSNorm", normalized_shape_, options.resolved_dtype(), "the weight");
  if (elementwise_affine) {
    AllocationScope scope("parameter");
    weight_ = register_parameter("weight", ones(normalized_shape_, options));
  }
}

Tensor RMSNorm::forward(const Tensor& input) {
  return rms_norm(input, normalized_shape_, weight_.defined() ? std::optional<Tensor>(weight_) : std::nullopt, eps_);
}

}  // namespace bytegrad::nn
