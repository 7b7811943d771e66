// Dropout, as torch.nn.Dropout.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

// dropout(x, p, is_training()): in training (0 < p < 1) one output and one bool mask (the mask is what
// NativeDropoutBackward0 keeps); in eval (or p == 0) the input itself, allocating nothing.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace bytegrad::nn
