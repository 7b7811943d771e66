// cat's gradient for the inputs PyTorch accepts beyond same-dtype, same-rank lists: inputs of two dtypes
// (each gets its slice of the promoted gradient, converted back to its own dtype by the engine, as PyTorch's
// validate_outputs) and legacy empty 1-d inputs (an empty gradient of shape [0], as cat_tensors_backward).
#include <doctest/doctest.h>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

TEST_CASE("cat backward: a float32 and a float64 input, and a legacy empty one") {
  const Tensor a = ones({2, 3}, TensorOptions{ScalarType::float32, kCpu}).requires_grad_();
  const Tensor b = ones({1, 3}, TensorOptions{ScalarType::float64, kCpu}).requires_grad_();
  const Tensor legacy = empty({0}, TensorOptions{ScalarType::float32, kCpu}).requires_grad_();
  const Tensor out = cat({legacy, a, b}, 0);
  REQUIRE(out.dtype() == ScalarType::float64);
  // Weights 0..8 by position: a's gradient is rows 0-1, b's row 2.
  (out * arange(9.0, TensorOptions{ScalarType::float64, kCpu}).view({3, 3})).sum().backward();
  CHECK(a.grad().dtype() == ScalarType::float32);
  CHECK(a.grad().tolist() == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(b.grad().dtype() == ScalarType::float64);
  CHECK(b.grad().tolist() == std::vector<double>{6, 7, 8});
  CHECK(legacy.grad().sizes() == Shape{0});
}
