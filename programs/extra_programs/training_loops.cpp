// Training loops: optimizers over several steps, gradient accumulation. Transcribed from
// tools/probes/pytorch_extra_scenarios.py; the figures at every mark equal PyTorch's
// (tests/programs/check_programs.cpp).
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "programs/extra_programs.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::programs {

std::shared_ptr<nn::Sequential> mlp(Device on, const std::vector<int64_t>& sizes, bool inplace) {
  auto model = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    model->push_back(std::make_shared<nn::Linear>(sizes[i], sizes[i + 1], true, device(on)));
    if (i + 2 < sizes.size()) model->push_back(std::make_shared<nn::ReLU>(inplace));
  }
  return model;
}

void x_mlp_adam_train(ScenarioRecorder& r) {
  const Device on = r.device();
  auto model = mlp(on, {256, 512, 10});
  r.mark("model");
  Tensor x = randn({128, 256}, device(on));
  Tensor y = randint(0, 10, {128}, TensorOptions{ScalarType::int64, on});
  optim::Adam opt(model->parameters(), 1e-3);  // single-tensor Adam (PyTorch: foreach=False)
  r.mark("data");
  Tensor out, loss;  // live across iterations, as Python's names: the previous step's are freed on rebinding
  for (int it = 0; it < 3; ++it) {
    const std::string i = std::to_string(it);
    out = (*model)(x);
    r.mark("forward" + i);
    loss = cross_entropy(out, y);
    r.mark("loss" + i);
    loss.backward();
    r.mark("backward" + i);
    opt.step();  // first step: exp_avg and exp_avg_sq for every parameter
    r.mark("step" + i);
    opt.zero_grad();
    r.mark("zero_grad" + i);
  }
}

void x_mlp_sgd_momentum_mse(ScenarioRecorder& r) {
  const Device on = r.device();
  auto model = mlp(on, {300, 700, 700, 5});
  Tensor x = randn({200, 300}, device(on));
  Tensor t = randn({200, 5}, device(on));
  optim::SGD opt(model->parameters(), 0.01, /*momentum=*/0.9);
  r.mark("setup");
  Tensor loss;
  for (int it = 0; it < 3; ++it) {
    const std::string i = std::to_string(it);
    loss = mse_loss((*model)(x), t);  // the model's output is a temporary: only mse_loss's saved copy lives
    r.mark("loss" + i);
    loss.backward();
    r.mark("backward" + i);
    opt.step();  // first step: one momentum buffer per parameter
    r.mark("step" + i);
    opt.zero_grad(/*set_to_none=*/true);
    r.mark("zero_grad" + i);
  }
}

void x_grad_accumulation(ScenarioRecorder& r) {
  const Device on = r.device();
  auto model = mlp(on, {512, 512, 1});
  optim::SGD opt(model->parameters(), 0.01);
  std::vector<Tensor> batches;
  batches.reserve(4);
  for (int i = 0; i < 4; ++i) batches.push_back(randn({64, 512}, device(on)));
  r.mark("setup");
  Tensor loss;
  for (int rnd = 0; rnd < 2; ++rnd) {
    for (size_t i = 0; i < batches.size(); ++i) {
      loss = (*model)(batches[i]).mean() / 4;
      loss.backward();  // micro-batches after the first accumulate into .grad in place
      r.mark("round" + std::to_string(rnd) + "_micro" + std::to_string(i));
    }
    opt.step();
    r.mark("round" + std::to_string(rnd) + "_step");
    opt.zero_grad(/*set_to_none=*/false);  // grads kept, zeroed in place
    r.mark("round" + std::to_string(rnd) + "_zero_grad_keep");
  }
  loss = Tensor();  // del loss
  r.mark("del_loss");
}

void x_seed_mlp_bias_adam_default(ScenarioRecorder& r) {
  const Device on = r.device();
  auto lin1 = std::make_shared<nn::Linear>(1024, 1024, true, device(on));
  auto lin2 = std::make_shared<nn::Linear>(1024, 1, true, device(on));
  std::vector<Tensor> params = lin1->parameters();
  for (const Tensor& p : lin2->parameters()) params.push_back(p);
  // PyTorch's default on CUDA is the foreach path (the program does not pass foreach=False).
  optim::Adam opt(params, optim::AdamOptions{.lr = 1e-3, .foreach = true});
  Tensor x = ones({1024, 1024}, device(on));
  r.mark("setup");
  Tensor loss;
  for (int it = 0; it < 2; ++it) {
    const std::string i = std::to_string(it);
    loss = (*lin2)((*lin1)(x)).sum();
    loss.backward();
    r.mark("backward" + i);
    opt.step();
    r.mark("step" + i);
    opt.zero_grad();
    r.mark("zero_grad" + i);
  }
}

}  // namespace bytegrad::programs
