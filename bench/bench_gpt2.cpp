// nanoGPT's GPT-2 small training step in fp32 on the default device (cuda where a GPU is present): forward
// with the loss, backward, AdamW (foreach, nanoGPT's two groups), zero_grad(set_to_none=True); median of
// synchronized steps after warm-up, at 4 x 256 and 8 x 1024 tokens. bench/pytorch_gpt2_step.py times
// PyTorch's eager step the same way, for the same table.
//   bench_gpt2 [DEVICE [STEPS [fp32|bf16|bf16_sdpa [BATCHxSEQ...]]]]   (bf16: the forward under bf16 autocast;
//   _sdpa: with scaled_dot_product_attention, as pytorch_gpt2_step.py's same argument; BATCHxSEQ: the sizes
//   to run instead of 4x256 and 8x1024)
// With BYTEGRAD_PROFILE_KERNELS=1 it also prints, per size, where the timed steps' GPU time went
// (kernels/kernel_profile.h: per backend call and per autograd node; bench/pytorch_gpt2_profile.py prints
// PyTorch's side). The profiler's events slow the steps a little: take timings from a run without it.
// With BYTEGRAD_BENCH_STEP_TIMES=1 it prints each timed step's host time up to its final synchronize and the
// spread of the whole steps' times (is a slow run slow in every step, and on the host or the GPU?).
// With BYTEGRAD_BENCH_TRACE=PREFIX it writes each size's allocator trace (action, requested bytes, block bytes,
// tag; no addresses, which differ between devices) to PREFIX.<batch>x<seq>.txt, to find where two devices'
// (or two builds') figures part.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/kernels/kernel_profile.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/history.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/tensor.h"
#include "gpt2_bench_step.h"

using namespace bytegrad;

namespace {

double median_step_ms(Device d, int64_t batch, int64_t seq, int steps, const std::string& mode) {
  manual_seed(1337);
  auto model = bench::gpt2_small_on(d, mode);
  bench::Gpt2TrainingStep step(model, d, mode, batch, seq);
  std::vector<double> host_ms;
  bool timed = false;
  const double ms = bench::median_step_ms(
      [&] {
        step();
        if (timed) host_ms.push_back(step.last_host_ms());
      },
      steps,
      [&] {
        timed = true;
        if (kernel_profiling_enabled()) kernel_profile_reset();
      });
  if (std::getenv("BYTEGRAD_BENCH_STEP_TIMES")) {
    fmt::print("{} x {} tokens, host ms per step up to the final synchronize:", batch, seq);
    for (double h : host_ms) fmt::print(" {:.2f}", h);
    fmt::print("\n");
  }
  if (kernel_profiling_enabled()) fmt::print("{} x {} tokens:\n{}\n", batch, seq, kernel_profile_report(steps));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const Device d = argc > 1 ? Device::parse(argv[1]) : default_device();
  const int steps = argc > 2 ? std::stoi(argv[2]) : 20;
  const std::string mode = argc > 3 ? argv[3] : "fp32";
  if (mode != "fp32" && mode != "bf16" && mode != "bf16_sdpa") {
    fmt::print(stderr, "bench_gpt2: mode '{}': expected fp32, bf16 or bf16_sdpa\n", mode);
    return 2;
  }
  fmt::print("GPT-2 small {} training step on {} (AdamW foreach; median of {} synchronized steps)\n", mode, d.str(),
             steps);
  fmt::print("{:>10} {:>12} {:>16}\n", "tokens", "ms/step", "peak allocated");
  // Token counts as BATCHxSEQ after the mode (default: 4x256 and 8x1024).
  std::vector<std::pair<int64_t, int64_t>> token_counts;
  for (int i = 4; i < argc; ++i) {
    const std::string text = argv[i];
    const size_t x = text.find('x');
    size_t batch_end = 0, seq_end = 0;
    int64_t batch = 0, seq = 0;
    try {
      if (x != std::string::npos) {
        batch = std::stoll(text.substr(0, x), &batch_end);
        seq = std::stoll(text.substr(x + 1), &seq_end);
      }
    } catch (const std::exception&) {
      batch_end = 0;
    }
    if (x == std::string::npos || batch_end != x || seq_end != text.size() - x - 1 || batch <= 0 || seq <= 0) {
      fmt::print(stderr, "bench_gpt2: '{}': expected BATCHxSEQ, as 4x256\n", text);
      return 2;
    }
    token_counts.emplace_back(batch, seq);
  }
  if (token_counts.empty()) token_counts = {{4, 256}, {8, 1024}};
  const char* trace_prefix = std::getenv("BYTEGRAD_BENCH_TRACE");
  for (auto [batch, seq] : token_counts) {
    reset_peak_memory_stats(d);
    if (trace_prefix) caching_allocator(d).record_history(true);
    const double ms = median_step_ms(d, batch, seq, steps, mode);
    fmt::print("{:>10} {:>12.2f} {:>16}\n", fmt::format("{}x{}", batch, seq), ms, max_memory_allocated(d));
    if (trace_prefix) {
      const std::string path = fmt::format("{}.{}x{}.txt", trace_prefix, batch, seq);
      std::FILE* out = std::fopen(path.c_str(), "w");
      if (!out) {
        fmt::print(stderr, "bench_gpt2: cannot write {}\n", path);
        return 1;
      }
      for (const TraceEntry& e : caching_allocator(d).snapshot().trace)
        fmt::print(out, "{} {} {} {}\n", trace_action_name(e.action), e.size, e.block_size, e.tag);
      std::fclose(out);
      caching_allocator(d).record_history(false);
    }
    std::fflush(stdout);
  }
  return 0;
}
