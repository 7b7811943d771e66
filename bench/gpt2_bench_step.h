// What the GPT-2 benchmarks (bench_gpt2, bench_ddp_gpt2, bench_fsdp_gpt2) time, written once: nanoGPT's
// training step, and the median of timed steps after a warm-up.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::bench {

// GPT as nanoGPT (and the PyTorch baselines) make it: built on the CPU with PyTorch's initialization, then
// moved to `device`, so the device sees .to()'s allocations only (built there, the head's weight would be
// made and dropped for the tie, and its segment stay cached). On meta it is built on a meta device no run
// measures, as the golden programs do (no arithmetic for 124M random draws).
inline std::shared_ptr<nn::GPT> gpt2_on(Device device, const nn::GPTConfig& config) {
  const Device build_on = device.type == DeviceType::meta ? Device{DeviceType::meta, 100 + device.index} : kCpu;
  auto model = std::make_shared<nn::GPT>(config, TensorOptions{}.with_device(build_on));
  model->to(device);
  return model;
}

// GPT-2 small, with SDPA for mode "bf16_sdpa".
inline std::shared_ptr<nn::GPT> gpt2_small_on(Device device, const std::string& mode) {
  nn::GPTConfig config;
  if (mode == "bf16_sdpa") config.attention = nn::AttentionKind::sdpa;
  return gpt2_on(device, config);
}

// nanoGPT's step on `device`: AdamW foreach with its two groups (weight decay 0.1 on parameters of two or more
// dimensions, 0 on the rest; lr 6e-4, betas 0.9 and 0.95) over the model's parameters as they are when the
// step is made (the shards, once sharded), one random batch of tokens, bf16 autocast unless `mode` is "fp32",
// zero_grad(set_to_none), then a synchronize so that each step is timed whole.
class Gpt2TrainingStep {
 public:
  // Runs the model's forward: DDP's or FSDP's forward(callable) around it, or the call itself.
  using Forward = std::function<nn::GPT::Output(const std::function<nn::GPT::Output()>&)>;

  Gpt2TrainingStep(std::shared_ptr<nn::GPT> model, Device device, std::string mode, int64_t batch, int64_t seq,
                   Forward forward = {})
      : model_(std::move(model)), device_(device), mode_(std::move(mode)), forward_(std::move(forward)) {
    std::vector<Tensor> decay, no_decay;
    for (const Tensor& p : model_->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    optim::AdamOptions with_decay{.lr = 6e-4, .betas = {0.9, 0.95}, .foreach = true}, without_decay = with_decay;
    with_decay.weight_decay = 0.1;
    without_decay.weight_decay = 0.0;
    optimizer_ = std::make_unique<optim::AdamW>(
        std::vector<optim::AdamParamGroup>{{decay, with_decay}, {no_decay, without_decay}});
    const TensorOptions int64_on{ScalarType::int64, device_};
    const int64_t vocab = model_->config().vocab_size;
    x_ = randint(0, vocab, {batch, seq}, int64_on);
    y_ = randint(0, vocab, {batch, seq}, int64_on);
  }

  void operator()() {
    const auto start = std::chrono::steady_clock::now();
    nn::GPT::Output out;
    {
      std::optional<AutocastGuard> autocast;
      if (mode_ != "fp32") autocast.emplace(device_.type, ScalarType::bfloat16);
      auto plain = [&] { return model_->forward(x_, y_); };
      out = forward_ ? forward_(plain) : plain();
    }
    out.loss.backward();
    optimizer_->step();
    optimizer_->zero_grad(true);
    const auto enqueued = std::chrono::steady_clock::now();
    synchronize(device_);
    last_host_ms_ = std::chrono::duration<double, std::milli>(enqueued - start).count();
  }

  // The last step's time on the host up to its final synchronize: the step's host cost where the GPU keeps up.
  double last_host_ms() const { return last_host_ms_; }

 private:
  std::shared_ptr<nn::GPT> model_;
  Device device_;
  std::string mode_;
  Forward forward_;
  std::unique_ptr<optim::AdamW> optimizer_;
  Tensor x_, y_;
  double last_host_ms_ = 0;
};

// Runs `step` 3 times to warm up, calls `after_warmup`, then times `steps` more: their median in milliseconds.
template <typename Step>
double median_step_ms(Step&& step, int steps, const std::function<void()>& after_warmup = {}) {
  for (int i = 0; i < 3; ++i) step();
  if (after_warmup) after_warmup();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  if (std::getenv("BYTEGRAD_BENCH_STEP_TIMES")) {
    std::string line = "ms per step:";
    for (double t : times) line += " " + std::to_string(t).substr(0, 6);
    std::puts(line.c_str());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace bytegrad::bench
