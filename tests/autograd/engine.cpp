// Engine semantics: releasing saved tensors, retain_graph, version checks, grad mode, detach, .grad.
#include <doctest/doctest.h>

#include <string>

#include "bytegrad/autograd/accumulate_grad.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("a second backward through a freed graph is an error; retain_graph keeps it") {
  Tensor x = randn({3}, device(kCpu)).requires_grad_();
  Tensor y = sum(x * x);
  y.backward();
  try {
    y.backward();
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    CHECK(contains(e.what(), "Trying to backward through the graph a second time"));
    CHECK(contains(e.what(), "retain_graph=True"));
  }
  Tensor z = sum(x * x);
  x.set_grad(Tensor());
  z.backward(Tensor(), /*retain_graph=*/true);
  std::vector<double> once = x.grad().tolist();
  z.backward();
  std::vector<double> twice = x.grad().tolist();
  for (size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
}

TEST_CASE("using a saved tensor modified in place names the tensor, the node and the versions") {
  Tensor x = randn({2, 3}, device(kCpu)).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = sigmoid(h);  // SigmoidBackward0 saves its result y
  y.mul_(3.0);            // version 0 -> 1
  try {
    sum(y).backward();
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    CAPTURE(e.what());
    CHECK(contains(e.what(), "modified by an inplace operation"));
    CHECK(contains(e.what(), "[2, 3]"));
    CHECK(contains(e.what(), "float32"));
    CHECK(contains(e.what(), "SigmoidBackward0"));
    CHECK(contains(e.what(), "version 1"));
    CHECK(contains(e.what(), "version 0"));
  }
}

TEST_CASE("in-place ops on leaves that require grad are refused; on non-leaves they rebase history") {
  Tensor w = randn({4}, device(kCpu)).requires_grad_();
  CHECK_THROWS_WITH_AS(w.relu_(), doctest::Contains("leaf tensor that requires grad"), std::runtime_error);
  Tensor h = w * 1.0;
  h.relu_();
  CHECK(h.grad_fn_name() == "ReluBackward0");
  sum(h).backward();
  std::vector<double> g = w.grad().tolist(), values = w.tolist();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (values[i] > 0 ? 1.0 : 0.0));
}

TEST_CASE("no_grad records nothing; detach shares storage without history") {
  Tensor w = randn({3, 3}, device(kCpu)).requires_grad_();
  {
    NoGradGuard no_grad;
    Tensor y = w * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    {
      EnableGradGuard enable;
      CHECK((w * 2.0).requires_grad());
    }
  }
  Tensor d = w.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.shares_storage_with(w));
  CHECK(d.data_ptr() == w.data_ptr());
}

TEST_CASE("backward needs a scalar root or an explicit gradient") {
  Tensor w = randn({3}, device(kCpu)).requires_grad_();
  Tensor y = w * 2.0;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("only for scalar outputs"), std::runtime_error);
  y.backward(ones({3}, device(kCpu)));
  for (double g : w.grad().tolist()) CHECK(g == 2.0);
  Tensor plain = ones({1}, device(kCpu));
  CHECK_THROWS_WITH_AS(plain.backward(), doctest::Contains("does not require grad"), std::runtime_error);
}

TEST_CASE("the gradient layout contract ignores strides of size-1 dimensions") {
  Tensor w = empty({1, 4}, device(kCpu));
  CHECK(obeys_layout_contract(empty({4, 1}, device(kCpu)).t(), w));  // (1, 4) with strides (1, 1)
  CHECK_FALSE(obeys_layout_contract(empty({4, 1}, device(kCpu)).expand({4, 4}).t().slice(0, 0, 1), w));
  Tensor m = empty({3, 4}, device(kCpu));
  CHECK_FALSE(obeys_layout_contract(empty({4, 3}, device(kCpu)).t(), m));
}
