// scaled_dot_product_attention on cuda: the cuda backend's kernels (kernels/cuda/cuda_attention.cu, and cuDNN's
// for large bf16 calls where the build has it: BYTEGRAD_CUDNN_ATTENTION=0 keeps bytegrad's own, =1 sends every
// call cuDNN takes) forward and forward + backward at GPT-2's attention shapes, causal, in bf16 and fp32;
// bench/pytorch_sdpa.py times PyTorch's (cuDNN for bf16, memory-efficient for fp32 on an H100) on the same
// shapes for the same table.
//   bench_sdpa [STEPS]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/core/device.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

namespace {

template <typename Step>
double median_ms(Device d, int steps, Step&& step) {
  for (int i = 0; i < 3; ++i) step();
  synchronize(d);
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    synchronize(d);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Device d = default_device();
  if (d.type != DeviceType::cuda) {
    fmt::print("bench_sdpa: no GPU, nothing to time\n");
    return 0;
  }
  const int steps = argc > 1 ? std::stoi(argv[1]) : 20;
  fmt::print("scaled_dot_product_attention on {} (causal; median of {} synchronized calls)\n", d.str(), steps);
  fmt::print("{:>22} {:>9} {:>12} {:>16}\n", "B x H x T x D", "dtype", "forward ms", "fwd+bwd ms");
  struct Shape {
    int64_t B, H, T, D;
  };
  for (const Shape s : {Shape{4, 12, 256, 64}, Shape{8, 12, 1024, 64}, Shape{4, 8, 1024, 128}}) {
    for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float32}) {
      // q, k, v as nanoGPT makes them: views of one (B, T, 3C) projection.
      const Tensor qkv =
          randn({s.B, s.T, 3 * s.H * s.D}, TensorOptions{ScalarType::float32, d}).to(dtype).requires_grad_();
      const std::vector<Tensor> parts = qkv.split(s.H * s.D, 2);
      auto heads = [&](const Tensor& t) { return t.view({s.B, s.T, s.H, s.D}).transpose(1, 2); };
      const Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
      const double forward = median_ms(d, steps, [&] {
        NoGradGuard no_grad;
        (void)scaled_dot_product_attention(q, k, v, true);
      });
      const Tensor grad = ones({s.B, s.H, s.T, s.D}, TensorOptions{dtype, d});
      const double both = median_ms(d, steps, [&] {
        Tensor y = scaled_dot_product_attention(q, k, v, true);
        y.backward(grad);
        qkv.set_grad(Tensor());
      });
      fmt::print("{:>22} {:>9} {:>12.3f} {:>16.3f}\n", fmt::format("{}x{}x{}x{}", s.B, s.H, s.T, s.D),
                 scalar_type_name(dtype), forward, both);
      std::fflush(stdout);
    }
  }
  return 0;
}
