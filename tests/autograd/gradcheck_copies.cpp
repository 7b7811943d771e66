// The copying ops' gradients against central finite differences (float64): clone and a move between
// devices (cpu -> sim and back: the gradient travels back to the source device). A dtype cast's gradient
// is the incoming one cast back; finite differences through float32 cannot resolve a 1e-6 step, so it is
// checked exactly instead.
#include "bytegrad/autograd/engine.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("clone, to(device) and to(dtype) gradients match finite differences") {
  manual_seed(3);
  const TensorOptions f64_cpu{ScalarType::float64, kCpu};
  check_gradients([](auto& v) { return sum(v[0].clone() * v[0]); }, {randn({3, 4}, f64_cpu)});
  check_gradients([](auto& v) { return sum(v[0].to(kSim) * v[1].to(kSim)).to(kCpu); },
                  {randn({5}, f64_cpu), randn({5}, f64_cpu)});
}

TEST_CASE("a dtype cast's gradient is the incoming gradient, cast back to the source dtype") {
  Tensor x = randn({4}, TensorOptions{ScalarType::float64, kCpu}).requires_grad_();
  sum(x.to(ScalarType::float32) * 3.0).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == ScalarType::float64);
  for (double g : x.grad().tolist()) CHECK(g == 3.0);
}

TEST_CASE("the gradient of a value moved to another device lives on the source device") {
  Tensor x = randn({4}, TensorOptions{ScalarType::float64, kCpu}).requires_grad_();
  sum(x.to(kSim) * 2.0).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == kCpu);
  for (double g : x.grad().tolist()) CHECK(g == 2.0);
}
