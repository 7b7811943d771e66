#include "bytegrad/nn/sigmoid.h"

#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

}  // namespace bytegrad::nn
