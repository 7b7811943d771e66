// nanoGPT's GPT-2 training loop (shared/golden/gpt2/gpt2_scenarios.py's train()), written in bytegrad: the
// model built on the CPU and moved to the device, AdamW with nanoGPT's two parameter groups, then steps of
// forward, backward, optimizer step and zero_grad(set_to_none=True) with logits and loss dropped. The golden
// programs (g_gpt2_*, held to shared/golden/gpt2/) and the estimator (bytegrad-estimate) run it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bytegrad/distributed/ddp.h"
#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/distributed/zero.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/optim/optimizer.h"
#include "programs/scenario.h"
#include "programs/training_estimates.h"

namespace bytegrad::programs {

enum class GPTOptimizer { adamw, adam, sgd };

// Data parallel: the model under DistributedDataParallel (a "wrapped" mark after wrapping), with
// ZeroRedundancyOptimizer over one group of the same optimizer when zero1, and each rank's data drawn after
// manual_seed(100 + rank) (tools/probes/ddp_probe.py). Without a group (bytegrad-estimate --ddp) this
// device is rank `rank` of `world_size` on the fake backend (its collectives allocate what NCCL's would
// and move nothing), and the old buckets at the rebuild are held, as when NCCL's watchdog has not looked
// yet (the larger figure). With a group (programs/ddp_programs.h) the run is that group's rank on its
// device, and rank and world_size are not read.
struct GPTDataParallel {
  int world_size = 2;
  int rank = 0;
  distributed::DDPOptions ddp;
  bool zero1 = false;
  distributed::ZeroOptions zero;
  distributed::ProcessGroup* group = nullptr;
};

// FSDP2: fully_shard on each transformer block, then the root (programs/fsdp_programs.h's nanoGPT), after
// the model is built and moved to the device, with each rank's data drawn after manual_seed(100 + rank) and
// a "sharded" mark after sharding. Without a group (bytegrad-estimate --fsdp) this device is rank `rank` of
// `world_size` on the fake backend; with one, that group's rank.
struct GPTFullyShard {
  int world_size = 2;
  int rank = 0;
  distributed::FullyShardOptions options;
  distributed::ProcessGroup* group = nullptr;
};

struct GPTTraining {
  nn::GPTConfig config;
  int64_t batch = 4;
  int64_t seq = 256;
  GPTOptimizer optimizer = GPTOptimizer::adamw;
  bool foreach = true;  // PyTorch's default on CUDA (foreach=None)
  int steps = 2;
  // The forward inside torch.autocast(device_type="cuda", dtype=amp) when set (bfloat16 in the goldens).
  std::optional<ScalarType> amp;
  // Data parallel (bytegrad-estimate --ddp): see GPTDataParallel.
  std::optional<GPTDataParallel> data_parallel;
  // FSDP2 (bytegrad-estimate --fsdp): see GPTFullyShard. Not with data_parallel.
  std::optional<GPTFullyShard> fully_shard;
};

// nanoGPT's configure_optimizers groups with PyTorch's defaults for what it does not set: weight decay 0.1
// on the parameters of 2+ dims, 0 on the rest; lr 6e-4, betas (0.9, 0.95). adam: torch.optim.Adam with the
// same groups (L2 decay into the gradient); sgd: torch.optim.SGD(lr 6e-4, momentum 0.9) with the groups.
// Runs on r's device and marks "model", "data", then s<i>_forward, s<i>_backward, s<i>_step,
// s<i>_zero_grad for each step (r may be null: no marks).
void train_gpt(const GPTTraining& training, ScenarioRecorder* r, Device on);
// The same loop with mark(label) called at each mark.
void train_gpt(const GPTTraining& training, const std::function<void(const std::string&)>& mark, Device on);
// The optimizer train_gpt makes for `model` (nanoGPT's two groups).
std::unique_ptr<optim::Optimizer> make_gpt_optimizer(const nn::GPT& model, const GPTTraining& training);

// train_gpt on meta (training_estimates.h: a fresh process, PyTorch's default cuBLAS workspaces unless
// default_workspace is false, limit_bytes > 0 caps the allocator as set_per_process_memory_fraction does);
// with marks, its figures at each of train_gpt's marks are recorded there too.
TrainingPeak estimate_gpt_training(const GPTTraining& training, bool default_workspace = true, int64_t limit_bytes = 0,
                                   ScenarioRecorder* marks = nullptr);
// The largest batch whose run fits under limit_bytes (0 when even batch 1 does not) and the batches below it
// that do not (training_estimates.h's largest_fitting_batch). With fully_shard (no group): a batch fits when
// it fits on rank 0 and on the last rank, the ranks whose shards differ.
BatchSearch max_gpt_batch(GPTTraining training, int64_t limit_bytes, bool default_workspace = true);

// The golden programs: tiny (2 layers, 2 heads, 64 wide, vocabulary 512, block 64) at batch 4 x 64, and
// GPT-2 small (12, 12, 768, 50257, 1024) at batch 4 x 256, fp32, slow attention, AdamW foreach.
void g_gpt2_tiny_fp32(ScenarioRecorder& r);
void g_gpt2_small_fp32(ScenarioRecorder& r);
// The same with the forward under bfloat16 autocast.
void g_gpt2_tiny_bf16(ScenarioRecorder& r);
void g_gpt2_small_bf16(ScenarioRecorder& r);
// GPT-2 small under bfloat16 autocast with scaled_dot_product_attention (nanoGPT's flash branch).
void g_gpt2_small_bf16_sdpa(ScenarioRecorder& r);

nn::GPTConfig gpt2_tiny_config();
nn::GPTConfig gpt2_small_config();

}  // namespace bytegrad::programs
