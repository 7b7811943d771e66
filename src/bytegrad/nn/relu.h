// ReLU, as torch.nn.ReLU.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

// inplace: rectifies the input itself (relu_) and returns it.
class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : inplace_(inplace) {}
  Tensor forward(const Tensor& input) override;

 private:
  bool inplace_;
};

}  // namespace bytegrad::nn
