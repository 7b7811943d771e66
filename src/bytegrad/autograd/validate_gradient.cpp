#include "bytegrad/autograd/validate_gradient.h"

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

namespace {

std::string describe_expected(const GradientMetadata& m) {
  return fmt::format("shape={}, dtype={}, device={}", shape_str(m.sizes), scalar_type_name(m.dtype), m.device.str());
}

// PyTorch's is_expandable_to(expected, grad): `expected` broadcasts to grad's shape, so grad can be summed
// down to it.
bool expandable_to(const Shape& expected, const Shape& grad) {
  if (expected.size() > grad.size()) return false;
  const size_t lead = grad.size() - expected.size();
  for (size_t d = 0; d < expected.size(); ++d)
    if (expected[d] != grad[lead + d] && expected[d] != 1) return false;
  return true;
}

// Sums a broadcast gradient down to the shape the receiver expects (PyTorch's at::sum_to).
Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.sizes()[d] != 1)) dims.push_back(d);
  }
  if (dims.empty()) return grad.view(shape);
  Tensor reduced = sum(grad, dims, /*keepdim=*/true);
  return lead > 0 ? reduced.view(shape) : reduced;
}

// set_grad: PyTorch's Tensor.grad setter takes a gradient only when dtype, device and size all match.
void check_assigned(const Tensor& grad, const GradientMetadata& expected) {
  const std::string both = fmt::format("(gradient {}; tensor {})", describe(grad), describe_expected(expected));
  if (grad.dtype() != expected.dtype)
    throw std::invalid_argument(fmt::format(
        "set_grad: assigned grad has data of a different type: attempting to assign a gradient with dtype {} to a "
        "tensor with dtype {} {}; convert it with .to({}) first",
        scalar_type_name(grad.dtype()), scalar_type_name(expected.dtype), both, scalar_type_name(expected.dtype)));
  if (grad.device() != expected.device)
    throw std::invalid_argument(fmt::format(
        "set_grad: assigned grad has data located on a different device: attempting to assign a gradient on {} to "
        "a tensor on {} {}",
        grad.device().str(), expected.device.str(), both));
  if (grad.sizes() != expected.sizes)
    throw std::invalid_argument(fmt::format(
        "set_grad: assigned grad has data of a different size: attempting to assign a gradient of size {} to a "
        "tensor of size {} {}",
        shape_str(grad.sizes()), shape_str(expected.sizes), both));
}

}  // namespace

Tensor validate_gradient(Tensor grad, const GradientMetadata& expected, const GradientSource& source) {
  if (source.entry == GradientEntry::assigned) {
    check_assigned(grad, expected);
    return grad;
  }
  const bool from_node = source.entry == GradientEntry::node_output;
  // Every refusal first, so that a refused gradient has allocated nothing.
  auto refuse = [&](const std::string& problem) -> Tensor {
    if (from_node)
      throw std::runtime_error(fmt::format("Function {} returned an invalid gradient at index {} - {} (gradient {})",
                                           source.node, source.index, problem, describe(grad)));
    throw std::invalid_argument(fmt::format("backward: invalid gradient at index {} - {} (gradient {}; root {})",
                                            source.index, problem, describe(grad), describe_expected(expected)));
  };
  if (grad.sizes() != expected.sizes) {
    // backward(gradient) takes only the root's own shape (PyTorch's _make_grads); a node's gradient may be
    // one the receiver's shape broadcasts to, and is summed down.
    if (!from_node)
      refuse(
          fmt::format("Mismatch in shape: grad_output[{0}] has a shape of {1} and output[{0}] has a shape of {2}: "
                      "the gradient does not match the root's shape",
                      source.index, shape_str(grad.sizes()), shape_str(expected.sizes)));
    if (!expandable_to(expected.sizes, grad.sizes()))
      refuse(fmt::format("got {} but expected shape compatible with {}", shape_str(grad.sizes()),
                         shape_str(expected.sizes)));
  }
  // On another device only a 0-d gradient is taken (moved; PyTorch's engine does the same).
  if (grad.device() != expected.device && grad.dim() != 0)
    refuse(fmt::format("expected device {} but got {}", expected.device.str(), grad.device().str()));

  if (grad.sizes() != expected.sizes) grad = sum_to(grad, expected.sizes);
  // Another dtype is converted, e.g. AddBackward0 of float32 + bfloat16 hands its float32 gradient to the
  // bfloat16 side as one new bfloat16 block; the unconverted one is released unless something else holds it.
  if (grad.dtype() != expected.dtype) grad = ops_detail::to_dtype_preserving_strides(grad, expected.dtype);
  if (grad.device() != expected.device) grad = grad.to(expected.device);
  return grad;
}

}  // namespace bytegrad
