// RMSNorm, as torch.nn.RMSNorm: scales its input's trailing normalized_shape dims by the reciprocal of their
// root mean square, then by weight (ones) when elementwise_affine.
#pragma once

#include <optional>

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

// forward(x) = rms_norm(x, normalized_shape, weight, eps): one output of x's shape and dtype. eps unset means
// the accumulation dtype's machine epsilon, as torch.nn.RMSNorm(eps=None). Memory (PyTorch's fused CUDA
// kernel, see tensor/ops.h fused_rms_norm): the forward also allocates rstd (one float32 per row, float64
// for float64 input); FusedRmsNormBackward0 keeps it with the input and the weight until backward, which
// allocates grad_input and grad_weight (those needed). Under no_grad rstd is freed as soon as forward returns.
// The weight is allocated in the options' dtype and device.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true,
                   TensorOptions options = {});
  // The common 1-d case: RMSNorm(C) normalizes the last dim of size C.
  explicit RMSNorm(int64_t normalized_size, std::optional<double> eps = std::nullopt, bool elementwise_affine = true,
                   TensorOptions options = {})
      : RMSNorm(Shape{normalized_size}, eps, elementwise_affine, options) {}
  Tensor forward(const Tensor& input) override;
  const Shape& normalized_shape() const { return normalized_shape_; }
  std::optional<double> eps() const { return eps_; }
  const Tensor& weight() const { return weight_; }  // undefined without elementwise_affine

 private:
  Shape normalized_shape_;
  std::optional<double> eps_;
  Tensor weight_;
};

}  // namespace bytegrad::nn
