// GPT-2 small data-parallel training step on N GPUs (issue 27): nanoGPT's model under DistributedDataParallel
// on the nccl backend, one process per GPU as torchrun runs PyTorch's, AdamW foreach with nanoGPT's groups,
// zero_grad(set_to_none=True). Every rank trains on its own B x T batch (weak scaling), so the ideal N-rank
// step takes as long as the one-GPU step; efficiency = one-GPU step / N-rank step. It also times one
// all_reduce of the whole gradient (124M floats) on its own: what DDP would add to the step if none of its
// bucket all-reduces overlapped backward. bench/pytorch_ddp_step.py measures PyTorch's
// DDP the same way; run both in the same call.
//   bytegrad-launch --nproc-per-node N bench_ddp_gpt2 [STEPS [fp32|bf16_sdpa [BATCH [SEQ]]]]
//   (defaults: 20, bf16_sdpa, 8, 1024)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/distributed/ddp.h"
#include "bytegrad/distributed/init.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/tensor.h"
#include "gpt2_bench_step.h"

using namespace bytegrad;

namespace {

struct Setup {
  int steps;
  std::string mode;
  int64_t batch, seq;
};

// One rank's median step (distributed: under DDP on `group`; otherwise alone on `d`).
double gpt2_step_ms(Device d, const Setup& s, distributed::ProcessGroup* group) {
  manual_seed(1337);
  auto model = bench::gpt2_small_on(d, s.mode);
  std::optional<distributed::DistributedDataParallel> ddp;
  if (group != nullptr) ddp.emplace(model, *group);
  bench::Gpt2TrainingStep::Forward forward;
  if (ddp) forward = [&](const std::function<nn::GPT::Output()>& plain) { return ddp->forward(plain); };
  return bench::median_step_ms(bench::Gpt2TrainingStep(model, d, s.mode, s.batch, s.seq, forward), s.steps);
}

double all_reduce_ms(distributed::ProcessGroup& group, int steps) {
  const int64_t gradient_floats = 124439808;  // GPT-2 small's parameters (wte tied to lm_head)
  Tensor flat = zeros({gradient_floats}, TensorOptions{ScalarType::float32, group.device()});
  return bench::median_step_ms(
      [&] {
        group.all_reduce(flat);
        synchronize(group.device());
      },
      steps);
}

}  // namespace

// The largest of every rank's `value` (each rank's median differs a little).
double max_over_ranks(distributed::ProcessGroup& group, double value) {
  Tensor t = full({1}, value, TensorOptions{ScalarType::float64, group.device()});
  group.all_reduce(t, distributed::ReduceOp::max);
  return t.item<double>();
}

int main(int argc, char** argv) {
  if (!cuda_is_available()) {
    fmt::print("bench_ddp_gpt2: no GPU here; nothing to time\n");
    return 0;
  }
  const Setup s{argc > 1 ? std::stoi(argv[1]) : 20, argc > 2 ? argv[2] : "bf16_sdpa",
                argc > 3 ? std::stoll(argv[3]) : 8, argc > 4 ? std::stoll(argv[4]) : 1024};
  if (s.mode != "fp32" && s.mode != "bf16_sdpa") {
    fmt::print(stderr, "bench_ddp_gpt2: mode '{}': expected fp32 or bf16_sdpa\n", s.mode);
    return 2;
  }
  auto group = distributed::init_process_group("nccl");
  const bool leader = group->rank() == 0;
  const double one_gpu = leader ? gpt2_step_ms(group->device(), s, nullptr) : 0.0;
  group->barrier();
  const double reduce = max_over_ranks(*group, all_reduce_ms(*group, s.steps));
  const double rank_ms = gpt2_step_ms(group->device(), s, group.get());
  const double slowest = max_over_ranks(*group, rank_ms);
  if (leader) {
    fmt::print("GPT-2 small {} step, {}x{} tokens per GPU (AdamW foreach; median of {} synchronized steps)\n", s.mode,
               s.batch, s.seq, s.steps);
    fmt::print("one GPU, no DDP: {:.2f} ms\n", one_gpu);
    fmt::print("{} ranks under DDP: {:.2f} ms (slowest rank; rank 0 {:.2f})\n", group->size(), slowest, rank_ms);
    fmt::print("one all_reduce of the whole gradient alone: {:.2f} ms\n", reduce);
    fmt::print("scaling efficiency {:.1f}%; DDP adds {:.2f} ms per step\n", 100.0 * one_gpu / slowest,
               slowest - one_gpu);
  }
  return 0;
}
