#include "bytegrad/nn/gelu.h"

#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Tensor GELU::forward(const Tensor& input) { return gelu(input); }

}  // namespace bytegrad::nn
