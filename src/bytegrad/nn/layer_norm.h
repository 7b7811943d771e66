// LayerNorm, as torch.nn.LayerNorm: normalizes over the trailing normalized_shape dims of its input, then
// scales by weight (ones) and shifts by bias (zeros) when elementwise_affine (bias only when bias is true).
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

// forward(x) = layer_norm(x, normalized_shape, weight, bias, eps): one output of x's shape and dtype.
// Memory (PyTorch's CUDA kernel, see tensor/ops.h native_layer_norm): the forward also allocates mean and
// rstd (one float32 per row each, float64 for float64 input); NativeLayerNormBackward0 keeps them with
// the input and parameters until backward, which allocates grad_input, grad_weight, grad_bias (those
// needed) and then releases mean and rstd. Under no_grad they are freed as soon as forward returns.
// Parameters are allocated weight then bias, in the options' dtype and device.
class LayerNorm : public Module {
 public:
  LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true,
            TensorOptions options = {});
  // The common 1-d case: LayerNorm(C) normalizes the last dim of size C.
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true,
                     TensorOptions options = {})
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias, options) {}
  Tensor forward(const Tensor& input) override;
  // torch.nn.LayerNorm.reset_parameters: weight to ones and bias to zeros, in place (nothing allocated).
  void reset_parameters();
  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  const Tensor& weight() const { return weight_; }  // undefined without elementwise_affine
  const Tensor& bias() const { return bias_; }      // undefined without elementwise_affine or bias

 private:
  Shape normalized_shape_;
  double eps_;
  Tensor weight_;
  Tensor bias_;
};

}  // namespace bytegrad::nn
