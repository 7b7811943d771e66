// nanoGPT's GPT-2 small training step in fp32 on the default device (cuda where a GPU is present): forward
// with the loss, backward, AdamW (foreach, nanoGPT's two groups), zero_grad(set_to_none=True); median of
// synchronized steps after warm-up, at 4 x 256 and 8 x 1024 tokens. bench/pytorch_gpt2_step.py times
// PyTorch's eager step the same way, for the same table.
//   bench_gpt2 [DEVICE [STEPS]]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/tensor.h"
#include "bench/device_sync.h"

using namespace bytegrad;

namespace {

double median_step_ms(Device d, int64_t batch, int64_t seq, int steps) {
  manual_seed(1337);
  nn::GPTConfig config;  // GPT-2 small
  auto model = std::make_shared<nn::GPT>(config);
  model->to(d);
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamOptions with_decay{.lr = 6e-4, .betas = {0.9, 0.95}, .foreach = true}, without_decay = with_decay;
  with_decay.weight_decay = 0.1;
  without_decay.weight_decay = 0.0;
  optim::AdamW opt(std::vector<optim::AdamParamGroup>{{decay, with_decay}, {no_decay, without_decay}});
  const TensorOptions int64_on{ScalarType::int64, d};
  const Tensor x = randint(0, config.vocab_size, {batch, seq}, int64_on);
  const Tensor y = randint(0, config.vocab_size, {batch, seq}, int64_on);
  auto step = [&] {
    nn::GPT::Output out = model->forward(x, y);
    out.loss.backward();
    opt.step();
    opt.zero_grad(true);
    bench::synchronize(d);
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Device d = argc > 1 ? Device::parse(argv[1]) : default_device();
  const int steps = argc > 2 ? std::stoi(argv[2]) : 20;
  fmt::print("GPT-2 small fp32 training step on {} (AdamW foreach; median of {} synchronized steps)\n", d.str(), steps);
  fmt::print("{:>10} {:>12} {:>16}\n", "tokens", "ms/step", "peak allocated");
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{4, 256}, {8, 1024}}) {
    reset_peak_memory_stats(d);
    const double ms = median_step_ms(d, batch, seq, steps);
    fmt::print("{:>10} {:>12.2f} {:>16}\n", fmt::format("{}x{}", batch, seq), ms, max_memory_allocated(d));
    std::fflush(stdout);
  }
  return 0;
}
