// shared/golden/gpt2/gpt2_scenarios.py's train(), statement by statement.
#include <memory>
#include <utility>
#include <vector>

#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/zero.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/host_work.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "programs/fsdp_programs.h"
#include "programs/gpt2_programs.h"

namespace bytegrad::programs {

nn::GPTConfig gpt2_tiny_config() {
  return {.n_layer = 2, .n_head = 2, .n_embd = 64, .vocab_size = 512, .block_size = 64};
}

nn::GPTConfig gpt2_small_config() {
  return {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .block_size = 1024};
}

std::unique_ptr<optim::Optimizer> make_gpt_optimizer(const nn::GPT& model, const GPTTraining& t) {
  // make_optimizer: [p for p in model.parameters() if p.dim() >= 2], then the rest.
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  if (t.optimizer == GPTOptimizer::sgd) {
    std::vector<Tensor> all = decay;
    all.insert(all.end(), no_decay.begin(), no_decay.end());
    return std::make_unique<optim::SGD>(all, optim::SGDOptions{.lr = 6e-4, .momentum = 0.9, .foreach = t.foreach});
  }
  const optim::AdamOptions base{.lr = 6e-4, .betas = {0.9, 0.95}, .foreach = t.foreach};
  optim::AdamOptions with_decay = base, without_decay = base;
  with_decay.weight_decay = 0.1;
  without_decay.weight_decay = 0.0;
  std::vector<optim::AdamParamGroup> groups = {{decay, with_decay}, {no_decay, without_decay}};
  if (t.optimizer == GPTOptimizer::adam) return std::make_unique<optim::Adam>(std::move(groups));
  return std::make_unique<optim::AdamW>(std::move(groups));
}

void train_gpt(const GPTTraining& t, ScenarioRecorder* r, Device on) {
  train_gpt(
      t,
      [r](const std::string& label) {
        if (r) r->mark(label);
      },
      on);
}

void train_gpt(const GPTTraining& t, const std::function<void(const std::string&)>& mark, Device on) {
  manual_seed(1337);
  // nanoGPT builds the model on the CPU (PyTorch's default initialization) and moves it. On meta no value
  // is ever read, so there it is built on a meta device no run measures instead (no arithmetic: GPT-2
  // small's 124M random draws would take most of the run; and no data-parallel rank uses it); the measured
  // device sees the same .to() allocations.
  const Device build_on =
      on.type == DeviceType::meta ? Device{DeviceType::meta, kHostStandInMetaIndex + on.index} : kCpu;
  // Where .to()'s regions go follows the host work done before (host_work.h): the slow attention's causal
  // mask, torch.tril(torch.ones(block, block)) on the CPU, starts PyTorch's CPU thread pool when it is large
  // enough to run in parallel; the build on meta's stand-in device counts as the CPU's.
  auto model = std::make_shared<nn::GPT>(t.config, TensorOptions{}.with_device(build_on));
  model->to(on);
  mark("model");
  std::unique_ptr<distributed::ProcessGroup> own_group;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  std::optional<distributed::FSDPModule> root;
  if (t.fully_shard) {
    const GPTFullyShard& fs = *t.fully_shard;
    distributed::ProcessGroup* group = fs.group;
    if (!group) {
      own_group = distributed::make_fake_process_group(fs.rank, fs.world_size, on);
      group = own_group.get();
    }
    root = fully_shard_gpt(model, *group, fs.options);
    mark("sharded");
    manual_seed(100 + group->rank());  // each rank its own batch
  } else if (t.data_parallel) {
    const GPTDataParallel& dp = *t.data_parallel;
    distributed::ProcessGroup* group = dp.group;
    if (!group) {
      distributed::ProcessGroupOptions options;
      options.unwaited_release_after = std::nullopt;
      own_group = distributed::make_fake_process_group(dp.rank, dp.world_size, on, options);
      group = own_group.get();
    }
    ddp = std::make_unique<distributed::DistributedDataParallel>(model, *group, dp.ddp);
    mark("wrapped");
    if (dp.zero1) {
      opt = std::make_unique<distributed::ZeroRedundancyOptimizer>(
          ddp->parameters(), *group,
          [&t](std::vector<Tensor> mine) -> std::unique_ptr<optim::Optimizer> {
            const optim::AdamOptions adam{.lr = 6e-4, .betas = {0.9, 0.95}, .weight_decay = 0.1, .foreach = t.foreach};
            if (t.optimizer == GPTOptimizer::sgd)
              return std::make_unique<optim::SGD>(std::move(mine),
                                                  optim::SGDOptions{.lr = 6e-4, .momentum = 0.9, .foreach = t.foreach});
            if (t.optimizer == GPTOptimizer::adam) return std::make_unique<optim::Adam>(std::move(mine), adam);
            return std::make_unique<optim::AdamW>(std::move(mine), adam);
          },
          dp.zero);
    }
    manual_seed(100 + group->rank());  // each rank its own batch
  }
  if (!opt) opt = make_gpt_optimizer(*model, t);
  const TensorOptions int64_on{ScalarType::int64, on};
  Tensor x = randint(0, t.config.vocab_size, {t.batch, t.seq}, int64_on);
  Tensor y = randint(0, t.config.vocab_size, {t.batch, t.seq}, int64_on);
  mark("data");
  for (int i = 0; i < t.steps; ++i) {
    const std::string s = "s" + std::to_string(i);
    nn::GPT::Output out;
    {
      std::optional<AutocastGuard> autocast;  // with torch.autocast(device_type="cuda", dtype=...):
      if (t.amp) autocast.emplace(on.type, *t.amp);
      if (root) out = root->forward([&] { return model->forward(x, y); });
      else out = ddp ? ddp->forward([&] { return model->forward(x, y); }) : model->forward(x, y);
    }  // leaving the region frees the cached weight casts that no node saved
    mark(s + "_forward");
    out.loss.backward();
    mark(s + "_backward");
    opt->step();
    mark(s + "_step");
    opt->zero_grad(/*set_to_none=*/true);
    out = {};  // del logits, loss
    mark(s + "_zero_grad");
  }
}

TrainingPeak estimate_gpt_training(const GPTTraining& t, bool default_workspace, int64_t limit_bytes,
                                   ScenarioRecorder* marks) {
  return estimate_on_meta([&](Device on) { train_gpt(t, marks, on); }, default_workspace, limit_bytes);
}

BatchSearch max_gpt_batch(GPTTraining t, int64_t limit_bytes, bool default_workspace) {
  return largest_fitting_batch([&](int64_t batch) {
    t.batch = batch;
    if (!t.fully_shard || t.fully_shard->group)
      return batch_outcome(estimate_gpt_training(t, default_workspace, limit_bytes));
    BatchOutcome outcome = BatchOutcome::fits;
    for (const int rank : {0, t.fully_shard->world_size - 1}) {
      t.fully_shard->rank = rank;
      outcome = worse(outcome, batch_outcome(estimate_gpt_training(t, default_workspace, limit_bytes)));
      if (outcome == BatchOutcome::over) break;
    }
    return outcome;
  });
}

void g_gpt2_tiny_fp32(ScenarioRecorder& r) {
  train_gpt({.config = gpt2_tiny_config(), .batch = 4, .seq = 64}, &r, r.device());
}

void g_gpt2_small_fp32(ScenarioRecorder& r) {
  train_gpt({.config = gpt2_small_config(), .batch = 4, .seq = 256}, &r, r.device());
}

void g_gpt2_tiny_bf16(ScenarioRecorder& r) {
  train_gpt({.config = gpt2_tiny_config(), .batch = 4, .seq = 64, .amp = ScalarType::bfloat16}, &r, r.device());
}

void g_gpt2_small_bf16_sdpa(ScenarioRecorder& r) {
  nn::GPTConfig config = gpt2_small_config();
  config.attention = nn::AttentionKind::sdpa;
  train_gpt({.config = config, .batch = 4, .seq = 256, .amp = ScalarType::bfloat16}, &r, r.device());
}

void g_gpt2_small_bf16(ScenarioRecorder& r) {
  train_gpt({.config = gpt2_small_config(), .batch = 4, .seq = 256, .amp = ScalarType::bfloat16}, &r, r.device());
}

}  // namespace bytegrad::programs
