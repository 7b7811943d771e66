#include "bytegrad/nn/tanh.h"

#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

}  // namespace bytegrad::nn
