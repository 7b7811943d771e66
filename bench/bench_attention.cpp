// Training-step time of the multi-head self-attention block (B=16, L=64, C=256, H=4): forward through
// MultiheadSelfAttention, mse_loss against a fixed random target, backward, zero_grad. On cuda when a
// GPU is present (else sim); each step is timed to completion (the device is synchronized), median of the
// timed steps after warm-up. libtorch's figure for the same step on an H100 is about 1235 us.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/attention.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

namespace {

struct Result {
  double median_us;
  double min_us;
  double peak_mib;
};

Result run(Device d, int64_t B, int64_t L, int64_t C, int64_t H, int warmup, int steps) {
  manual_seed(0);
  nn::MultiheadSelfAttention attn(C, H, true, device(d));
  Tensor x = randn({B, L, C}, device(d));
  Tensor target = randn({B, L, C}, device(d));
  auto step = [&] {
    Tensor loss = mse_loss(attn(x), target);
    loss.backward();
    attn.zero_grad();
    synchronize(d);
  };
  for (int i = 0; i < warmup; ++i) step();
  caching_allocator(d).reset_peak_stats();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front(),
          static_cast<double>(caching_allocator(d).max_memory_allocated()) / (1024.0 * 1024.0)};
}

}  // namespace

int main() {
  const Device d = default_device();
  const bool cuda = d.type == DeviceType::cuda;
  const int warmup = cuda ? 10 : 2, steps = cuda ? 100 : 5;
  fmt::print("MultiheadSelfAttention training step on {} (forward, mse_loss, backward, zero_grad;\n", d.str());
  fmt::print("median of {} steps after {} warm-up, device synchronized)\n", steps, warmup);
  fmt::print("{:>4} {:>4} {:>5} {:>3} {:>12} {:>12} {:>10}\n", "B", "L", "C", "H", "median us", "min us", "peak MiB");
  const Result r = run(d, 16, 64, 256, 4, warmup, steps);
  fmt::print("{:>4} {:>4} {:>5} {:>3} {:>12.1f} {:>12.1f} {:>10.2f}\n", 16, 64, 256, 4, r.median_us, r.min_us,
             r.peak_mib);
  if (cuda) fmt::print("libtorch reference (H100): ~1235 us/step\n");
  std::fflush(stdout);
  return 0;
}
