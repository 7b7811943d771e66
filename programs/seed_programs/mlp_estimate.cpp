// seed001: estimating an MLP's training memory: parameters, data, activations kept for backward,
// gradients; then the same with in-place ReLU, with activation checkpointing, and without grad.
// The Python (shared/golden/scenarios.py, seed001_mlp_estimate) transcribed statement by statement.
#include <memory>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/checkpoint_sequential.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "programs/seed_programs.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::programs {

namespace {

// Sequential(Linear(784, 1024), ReLU, Linear(1024, 1024), ReLU, Linear(1024, 10)) on the device.
std::shared_ptr<nn::Sequential> make_mlp(Device on, bool inplace_relu) {
  auto linear = [on](int64_t in, int64_t out) { return std::make_shared<nn::Linear>(in, out, true, device(on)); };
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      linear(784, 1024), std::make_shared<nn::ReLU>(inplace_relu), linear(1024, 1024),
      std::make_shared<nn::ReLU>(inplace_relu), linear(1024, 10)});
}

}  // namespace

void run_seed001_mlp_estimate(ScenarioRecorder& r) {
  const Device on = r.device();
  manual_seed(0);
  auto model = make_mlp(on, false);
  r.mark("model");  // parameters: (784*1024 + 1024 + 1024*1024 + 1024 + 1024*10 + 10) * 4 bytes
  Tensor x = randn({256, 784}, device(on));
  Tensor y = randint(0, 10, {256}, TensorOptions{ScalarType::int64, on});
  r.mark("data");
  Tensor out = (*model)(x);
  r.mark("forward");  // each Linear saves its input; each ReLU its output (the same storage as the next input)
  Tensor loss = cross_entropy(out, y);
  r.mark("loss");
  loss.backward();
  r.mark("backward");  // activations released, gradients (one per parameter) kept
  out = Tensor();      // del out, loss
  loss = Tensor();
  r.mark("del_out_loss");
  model->zero_grad(/*set_to_none=*/true);
  r.mark("zero_grad_none");

  auto model2 = make_mlp(on, true);  // ReLU(inplace=True)
  r.mark("model2_inplace");
  out = (*model2)(x);
  r.mark("forward_inplace");
  loss = cross_entropy(out, y);
  loss.backward();
  r.mark("backward_inplace");
  out = Tensor();  // del out, loss, model2
  loss = Tensor();
  model2.reset();
  r.mark("del_model2");

  caching_allocator(on).reset_peak_stats();
  out = nn::checkpoint_sequential(*model, 2, x);
  r.mark("forward_checkpoint");
  loss = cross_entropy(out, y);
  loss.backward();
  r.mark("backward_checkpoint");
  {
    NoGradGuard no_grad;
    out = (*model)(x);
  }
  r.mark("no_grad_forward");
}

}  // namespace bytegrad::programs
