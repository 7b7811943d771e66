// A first training loop: a two-layer MLP learning a random regression on the default device (cuda where a
// GPU is present, else sim), printing after each phase what it added to memory_allocated() and why.
//   build/examples/training_loop [cuda|sim|meta]
#include <cstdio>
#include <memory>
#include <string>

#include <bytegrad/bytegrad.h>

using namespace bytegrad;

namespace {

int64_t previous = 0;
void report(const char* phase, Device on, const char* why) {
  const int64_t now = memory_allocated(on);
  std::printf("%-12s allocated %-26s %s%s\n", phase, human_bytes(now).c_str(), now >= previous ? "+" : "",
              (human_bytes(now - previous) + "  " + why).c_str());
  previous = now;
}

}  // namespace

int main(int argc, char** argv) {
  const Device on = argc > 1 ? Device::parse(argv[1]) : default_device();
  set_blas_workspace_config(":0:0");  // no cuBLAS workspaces: only the tensors below count
  std::printf("training a 512-1024-1 MLP on %s\n", on.str().c_str());

  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(512, 1024, true, device(on)));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(1024, 1, true, device(on)));
  report("model", on, "weights and biases: (512*1024 + 1024 + 1024 + 1) floats");

  optim::Adam optimizer(model->parameters(), 1e-3);
  Tensor x = randn({256, 512}, device(on));
  Tensor target = randn({256, 1}, device(on));
  report("data", on, "inputs 256x512 and targets 256x1");

  Tensor loss;
  for (int step = 0; step < 3; ++step) {
    std::printf("-- step %d\n", step);
    loss = mse_loss((*model)(x), target);
    report("forward", on, "activations autograd saved for backward, and the loss");
    loss.backward();
    report("backward", on, "a .grad per parameter; the saved activations are released");
    optimizer.step();
    report("step", on, step == 0 ? "Adam's exp_avg and exp_avg_sq: two buffers per parameter" : "(state exists)");
    optimizer.zero_grad();  // set_to_none=True, PyTorch's default
    report("zero_grad", on, "the gradients are freed");
    if (on.type != DeviceType::meta) std::printf("   loss %.4f\n", loss.item());  // meta tensors have no values
  }
  std::printf("peak %s, reserved %s\n", human_bytes(max_memory_allocated(on)).c_str(),
              human_bytes(memory_reserved(on)).c_str());
  return 0;
}
