// The "training trains" task shared by the sim suite (tests/optim) and the GPU suite (tests/cuda): a tiny
// MLP (4 -> 32 -> ReLU -> 1) fitted by MSE to a linear target, y = x . (1, -2, 0.5, 3) + 0.25, with Adam or
// with SGD + momentum, 300 full-batch steps.
#pragma once

#include <memory>

#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::testing {

enum class TinyOptimizer { adam, sgd_momentum };

struct TrainingLosses {
  double first = 0;  // the loss before any step: about the target's variance, 1 + 4 + 0.25 + 9
  double last = 0;   // after 300 steps
};

inline TrainingLosses train_tiny_regression(Device d, TinyOptimizer which, int steps = 300) {
  manual_seed(7);
  const TensorOptions opts{ScalarType::float32, d};
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 32, true, opts), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 1, true, opts)});
  const Tensor x = randn({128, 4}, opts);
  const Tensor y = matmul(x, from_vector({1.0, -2.0, 0.5, 3.0}, {4, 1}, opts)) + 0.25;
  std::unique_ptr<optim::Optimizer> opt;
  if (which == TinyOptimizer::adam) opt = std::make_unique<optim::Adam>(model->parameters(), 1e-2);
  else opt = std::make_unique<optim::SGD>(model->parameters(), 0.05, 0.9);
  TrainingLosses losses;
  for (int step = 0; step < steps; ++step) {
    opt->zero_grad();
    Tensor loss = mse_loss((*model)(x), y);
    if (step == 0) losses.first = loss.item();
    losses.last = loss.item();
    loss.backward();
    opt->step();
  }
  return losses;
}

}  // namespace bytegrad::testing
