// Training-step time: the seed MLP (Linear(n,n,bias=false) -> Linear(n,1,bias=false) -> sum, backward)
// at n = 256, 1024, 4096, on cuda when a GPU is present (else sim). Each step is timed to completion
// (the device is synchronized), median of many steps after warm-up.
// Beside it, the step's floor: its two n x n x n float32 products alone (the forward h = x W1^T and the
// weight gradient grad_h^T x), run back to back the same way. Everything else in the step (the thin
// products, the sum, the gradient accumulation, the engine) is the difference between the two columns.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <string>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

namespace {

double median_step_us(Device d, int64_t n, int steps) {
  manual_seed(0);
  nn::Linear linear1(n, n, false, device(d));
  nn::Linear linear2(n, 1, false, device(d));
  Tensor inputs = ones({n, n}, device(d));
  auto step = [&] {
    linear1.zero_grad();
    linear2.zero_grad();
    Tensor loss = sum(linear2(linear1(inputs)));
    loss.backward();
    synchronize(d);
  };
  for (int i = 0; i < 10; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double median_big_products_us(Device d, int64_t n, int steps) {
  manual_seed(0);
  NoGradGuard no_grad;
  const Tensor w = randn({n, n}, device(d));
  const Tensor x = ones({n, n}, device(d));
  const Tensor grad_h = randn({n, n}, device(d));
  auto products = [&] {
    Tensor h = mm(x, w.t());
    Tensor w_grad = mm(grad_h.t(), x);
    synchronize(d);
  };
  for (int i = 0; i < 10; ++i) products();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto start = std::chrono::steady_clock::now();
    products();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

// bench_training [DEVICE [N [STEPS]]]: the default device (cuda where a GPU is present), or the one named
// (e.g. meta: the engine's own cost per step, with no kernel time to hide it); sizes 256, 1024 and 4096, or
// only N; STEPS timed steps per size (default 200 on cuda and meta, fewer on cpu and sim).
int main(int argc, char** argv) {
  const Device d = argc > 1 ? Device::parse(argv[1]) : default_device();
  const std::vector<int64_t> sizes =
      argc > 2 ? std::vector<int64_t>{std::stoll(argv[2])} : std::vector<int64_t>{256, 1024, 4096};
  fmt::print("seed MLP training step on {} (median of timed steps, device synchronized)\n", d.str());
  fmt::print("{:>6} {:>12} {:>22} {:>10}\n", "n", "us/step", "us two n^3 products", "ratio");
  for (int64_t n : sizes) {
    const int steps = argc > 3                                                   ? std::stoi(argv[3])
                      : d.type == DeviceType::cuda || d.type == DeviceType::meta ? 200
                                                                                 : (n >= 4096 ? 3 : 20);
    const double step = median_step_us(d, n, steps);
    const double floor = median_big_products_us(d, n, steps);
    fmt::print("{:>6} {:>12.1f} {:>22.1f} {:>10.2f}\n", n, step, floor, step / floor);
    std::fflush(stdout);
  }
  return 0;
}
