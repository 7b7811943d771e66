// Errors name the op and the offending operands' shapes and dtypes.
#include <doctest/doctest.h>

#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("nll_loss and cross_entropy reject bad targets with messages naming shapes and dtypes") {
  fresh(kSim);
  const Tensor log_probs = zeros({4, 5}, TensorOptions{ScalarType::float32, kSim});
  const Tensor float_target = zeros({4}, TensorOptions{ScalarType::float32, kSim});
  std::string e = error_of([&] { nll_loss(log_probs, float_target); });
  CHECK(contains(e, "nll_loss"));
  CHECK(contains(e, "int64"));
  CHECK(contains(e, "float32"));
  CHECK(contains(e, "[4]"));

  const Tensor short_target = zeros({3}, TensorOptions{ScalarType::int64, kSim});
  e = error_of([&] { cross_entropy(log_probs, short_target); });
  CHECK(contains(e, "size mismatch"));
  CHECK(contains(e, "[4, 5]"));
  CHECK(contains(e, "[3]"));

  e = error_of([&] { nll_loss(zeros({2, 3, 4}, TensorOptions{ScalarType::float32, kSim}), short_target); });
  CHECK(contains(e, "1-d (C) or 2-d (N, C)"));
  CHECK(contains(e, "[2, 3, 4]"));

  e = error_of([&] { nll_loss(log_probs, zeros({4, 1}, TensorOptions{ScalarType::int64, kSim})); });
  CHECK(contains(e, "multi-target"));

  e = error_of([&] {
    nll_loss(zeros({4, 5}, TensorOptions{ScalarType::int64, kSim}), zeros({4}, TensorOptions{ScalarType::int64, kSim}));
  });
  CHECK(contains(e, "floating-point"));

  // A target outside [0, C) (and not ignore_index) is an error on the cpu backend (sim).
  const Tensor bad = tensor({0.0, 5.0, 1.0, 2.0}, TensorOptions{ScalarType::int64, kSim});
  e = error_of([&] { nll_loss(log_probs, bad); });
  CHECK(contains(e, "target 5 is out of bounds"));
}

TEST_CASE("mse_loss rejects shapes that do not broadcast, and mismatched dtypes") {
  fresh(kSim);
  const Tensor a = zeros({4, 5}, TensorOptions{ScalarType::float32, kSim});
  // (4, 5) against (4,): trailing sizes 5 and 4 differ and neither is 1 (PyTorch warns, then
  // broadcast_tensors refuses them).
  std::string e = error_of([&] { mse_loss(a, zeros({4}, TensorOptions{ScalarType::float32, kSim})); });
  CHECK(contains(e, "mse_loss"));
  CHECK(contains(e, "cannot be broadcast"));
  CHECK(contains(e, "[4, 5]"));
  CHECK(contains(e, "[4]"));
  e = error_of([&] { mse_loss(a, zeros({4, 5}, TensorOptions{ScalarType::float64, kSim})); });
  CHECK(contains(e, "float64"));
}
