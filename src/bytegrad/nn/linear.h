// Linear, as torch.nn.Linear.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

// y = x W^T + b. Weight and bias start as PyTorch's: uniform in (-1/sqrt(in), 1/sqrt(in)) (nn/init.h).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions options = {});
  // With a bias, as nn.Linear(in, out, device=...): Linear(4, 8, kSim), Linear(4, 8, {.device = kSim}).
  Linear(int64_t in_features, int64_t out_features, TensorOptions options)
      : Linear(in_features, out_features, true, options) {}
  Linear(int64_t in_features, int64_t out_features, Device device)
      : Linear(in_features, out_features, true, TensorOptions{}.with_device(device)) {}
  Tensor forward(const Tensor& input) override;
  // torch.nn.Linear.reset_parameters: the weight and bias drawn again, in place, as the constructor draws
  // them (after to_empty on a model built on meta; nothing is allocated).
  void reset_parameters();
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  Tensor weight_;
  Tensor bias_;
};

}  // namespace bytegrad::nn
