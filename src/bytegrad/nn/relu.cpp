#include "bytegrad/nn/relu.h"

#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Tensor ReLU::forward(const Tensor& input) {
  if (inplace_) {
    input.relu_();
    return input;
  }
  return relu(input);
}

}  // namespace bytegrad::nn
