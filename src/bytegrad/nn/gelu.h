// GELU, as torch.nn.GELU: forward is the op gelu (tensor/ops.h); no parameters.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

class GELU : public Module {  // exact (erf) form; GeluBackward0 saves the input
 public:
  Tensor forward(const Tensor& input) override;
};

}  // namespace bytegrad::nn
