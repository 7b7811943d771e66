// Tanh, as torch.nn.Tanh: forward is the op tanh (tensor/ops.h); no parameters.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

class Tanh : public Module {  // TanhBackward0 saves the result
 public:
  Tensor forward(const Tensor& input) override;
};

}  // namespace bytegrad::nn
