// Adam / AdamW / SGD steps against float64 references computed here, and small training loops on sim.
#include <cmath>
#include <memory>
#include <string>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"
#include "tests/support/tiny_regression.h"

using namespace bytegrad;
using namespace bytegrad::testing;
using bytegrad::optim::Adam;
using bytegrad::optim::AdamW;
using bytegrad::optim::SGD;

namespace {

// Two Adam steps in float64 with gradients g1 then g2 (decoupled: AdamW's decay).
std::vector<double> reference_adam(std::vector<double> p, const std::vector<double>& g1, const std::vector<double>& g2,
                                   double lr, double b1, double b2, double eps, double wd, bool decoupled) {
  std::vector<double> m(p.size(), 0.0), v(p.size(), 0.0);
  const std::vector<double>* grads[2] = {&g1, &g2};
  for (int step = 1; step <= 2; ++step) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = (*grads[step - 1])[i];
      if (wd != 0) {
        if (decoupled) p[i] *= 1 - lr * wd;
        else g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
  return p;
}

}  // namespace

TEST_CASE("two Adam and AdamW steps match a float64 reference") {
  fresh(kSim);
  const std::vector<double> p0 = {0.5, -1.25, 2.0, 0.0, -0.3, 1.7};
  const std::vector<double> g1 = {0.1, -0.2, 0.05, 1.5, -0.7, 0.0};
  const std::vector<double> g2 = {-0.3, 0.4, 0.2, -1.0, 0.9, 0.01};
  for (bool decoupled : {false, true}) {
    const Tensor p = from_vector(p0, {6}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    std::unique_ptr<Adam> opt =
        decoupled ? std::make_unique<AdamW>(std::vector<Tensor>{p}, 0.1, std::pair{0.9, 0.99}, 1e-8, 0.1)
                  : std::make_unique<Adam>(std::vector<Tensor>{p}, 0.1, std::pair{0.9, 0.99}, 1e-8, 0.1);
    p.set_grad(from_vector(g1, {6}, TensorOptions{ScalarType::float32, kSim}));
    opt->step();
    p.set_grad(from_vector(g2, {6}, TensorOptions{ScalarType::float32, kSim}));
    opt->step();
    const auto want = reference_adam(p0, g1, g2, 0.1, 0.9, 0.99, 1e-8, 0.1, decoupled);
    CHECK(max_abs_diff(p.tolist(), want) < 1e-5);  // float32 arithmetic on values of order 1
    CHECK(opt->state(0).step == 2);
  }
}

TEST_CASE("SGD with momentum and nesterov matches a float64 reference") {
  fresh(kSim);
  const std::vector<double> p0 = {1.0, -2.0, 0.5};
  const std::vector<double> g1 = {0.5, 0.25, -1.0}, g2 = {-0.5, 1.0, 0.125};
  const Tensor p = from_vector(p0, {3}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
  SGD sgd({p}, 0.1, 0.9, 0.0, 0.01, true);
  std::vector<double> want = p0, buf(3);
  for (int step = 0; step < 2; ++step) {
    const auto& g = step == 0 ? g1 : g2;
    p.set_grad(from_vector(g, {3}, TensorOptions{ScalarType::float64, kSim}));
    sgd.step();
    for (size_t i = 0; i < 3; ++i) {
      const double d = g[i] + 0.01 * want[i];
      buf[i] = step == 0 ? d : 0.9 * buf[i] + d;
      want[i] -= 0.1 * (d + 0.9 * buf[i]);
    }
  }
  CHECK(max_abs_diff(p.tolist(), want) < 1e-14);
}

TEST_CASE("a tiny MLP regression trains below its threshold with Adam and with SGD on sim") {
  fresh(kSim);
  for (TinyOptimizer which : {TinyOptimizer::adam, TinyOptimizer::sgd_momentum}) {
    const TrainingLosses losses = train_tiny_regression(kSim, which);
    MESSAGE("sim, " << std::string(which == TinyOptimizer::adam ? "Adam" : "SGD") << ": loss " << losses.first << " -> "
                    << losses.last);
    CHECK(losses.first > 1.0);  // the target's variance is about 1 + 4 + 0.25 + 9
    CHECK(losses.last < 0.05);  // the stated threshold
  }
}
