// Sigmoid, as torch.nn.Sigmoid: forward is the op sigmoid (tensor/ops.h); no parameters.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

class Sigmoid : public Module {  // SigmoidBackward0 saves the result
 public:
  Tensor forward(const Tensor& input) override;
};

}  // namespace bytegrad::nn
