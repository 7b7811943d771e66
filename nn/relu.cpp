#include "nn/relu.h"

#include "tensor/ops.h"

namespace bytegrad::nn {

Tensor ReLU::forward(const Tensor& input) {
  if (inplace_) {
    input.relu_();
    return input;
  }
  return relu(input);
}

}  // namespace bytegrad::nn
