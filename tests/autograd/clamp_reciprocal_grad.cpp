// Gradients of reciprocal and the clamps by hand (the table-driven gradcheck covers them in float64), the
// node names PyTorch gives them, and what bytegrad refuses where a graph is needed: the in-place clamps,
// vector_norm with ord 1 or inf, and foreach_norm; each works under a NoGradGuard.
#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

namespace {

Tensor leaf(std::vector<double> values) {
  const auto n = static_cast<int64_t>(values.size());
  return from_vector(values, {n}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
}

}  // namespace

TEST_CASE("reciprocal and clamp: gradients by hand and PyTorch's node names") {
  Tensor x = leaf({2.0, -0.5});
  Tensor r = reciprocal(x);
  CHECK(r.grad_fn_name() == "ReciprocalBackward0");
  r.sum().backward();
  CHECK(x.grad().tolist() == std::vector<double>{-0.25, -4.0});  // -1 / x^2

  // The bounds themselves pass the gradient (the subgradient 1), outside it is 0.
  Tensor y = leaf({-2.0, -1.0, 0.0, 1.0, 2.0});
  Tensor c = clamp(y, -1.0, 1.0);
  CHECK(c.grad_fn_name() == "ClampBackward1");
  c.sum().backward();
  CHECK(y.grad().tolist() == std::vector<double>{0, 1, 1, 1, 0});

  Tensor z = leaf({-2.0, 0.0, 2.0});
  Tensor lo = clamp_min(z, 0.0);
  CHECK(lo.grad_fn_name() == "ClampMinBackward0");
  Tensor hi = clamp_max(z, 0.0);
  CHECK(hi.grad_fn_name() == "ClampMaxBackward0");
  (lo + hi * 10.0).sum().backward();
  CHECK(z.grad().tolist() == std::vector<double>{10, 11, 1});
}

TEST_CASE("in-place clamps, vector_norm ord 1/inf and foreach_norm are refused where a graph is needed") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = leaf({-2.0, 3.0});
  Tensor y = x * 1.0;  // not a leaf: in-place ops are otherwise allowed on it
  CHECK_THROWS_WITH_AS(y.clamp_(-1.0, 1.0), doctest::Contains("clamp_: in place"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(y.clamp_min_(0.0), doctest::Contains("not differentiable in bytegrad"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(clamp_max_(y, 0.0), doctest::Contains("clamp_max_"), std::invalid_argument);
  CHECK(y.tolist() == std::vector<double>{-2.0, 3.0});  // nothing written
  CHECK_THROWS_WITH_AS(vector_norm(x, inf), doctest::Contains("ord=inf has no gradient in bytegrad"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(foreach_norm({x}), doctest::Contains("foreach_norm has no gradient"), std::invalid_argument);
  CHECK(vector_norm(x, 2.0).grad_fn_name() == "LinalgVectorNormBackward0");
  {
    NoGradGuard no_grad;
    CHECK(vector_norm(x, inf).item() == 3.0);
    CHECK(vector_norm(x, 1.0).item() == 5.0);
    CHECK(foreach_norm({x}, inf)[0].item() == 3.0);
    y.clamp_(-1.0, 1.0);
    CHECK(y.tolist() == std::vector<double>{-1.0, 1.0});
  }
}
