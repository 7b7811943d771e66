#include "bytegrad/nn/linear.h"

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/init.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, TensorOptions options) {
  const double bound = init::fan_in_bound(in_features);
  weight_ =
      register_parameter("weight", init::uniform_(init::empty_parameter({out_features, in_features}, options), bound));
  if (bias) bias_ = register_parameter("bias", init::uniform_(init::empty_parameter({out_features}, options), bound));
}

void Linear::reset_parameters() {
  NoGradGuard no_grad;
  // The bound comes from the weight's columns (in_features), which sharding by rows leaves whole.
  const double bound = init::fan_in_bound(weight_.size(1));
  init::uniform_(weight_, bound);
  if (bias_.defined()) init::uniform_(bias_, bound);
}

Tensor Linear::forward(const Tensor& input) {
  return linear(input, weight_, bias_.defined() ? std::optional<Tensor>(bias_) : std::nullopt);
}

}  // namespace bytegrad::nn
