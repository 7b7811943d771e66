// GPT-2 small sharded training step on N GPUs (issue 28): nanoGPT's model under FSDP2 (fully_shard on each
// transformer block, then the root; reshard_after_forward left at its default) on the nccl backend, one
// process per GPU as torchrun runs PyTorch's, AdamW foreach with nanoGPT's groups over the shards,
// zero_grad(set_to_none=True). Every rank trains on its own B x T batch (weak scaling), so the ideal N-rank
// step takes as long as the one-GPU step without FSDP; efficiency = one-GPU step / N-rank step. It also
// times one all_gather of the whole model and one reduce_scatter of the whole gradient on their own: a
// step of FSDP2 runs about two of the first (forward, and backward but for the root) and one of the second,
// which the step hides behind compute as far as its side streams overlap. Each rank's peak allocated and
// reserved bytes over the FSDP run are printed too. bench/pytorch_fsdp_step.py measures PyTorch's FSDP2 the
// same way; run both in the same call (tools/gpu_checks.sh OUT build bench_fsdp).
//   bytegrad-launch --nproc-per-node N bench_fsdp_gpt2 [STEPS [fp32|bf16_sdpa [BATCH [SEQ]]]] [--tiny]
//   bench_fsdp_gpt2 [STEPS [MODE [BATCH [SEQ]]]] --threads N [--tiny]   (N ranks as threads on sim:0..N-1)
//   (defaults: 20, bf16_sdpa, 8, 1024; --tiny: nanoGPT tiny, 2 layers, 2 heads, 64 wide, vocabulary 512,
//   block 64, for checking the code path without a GPU)
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/distributed/init.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/tensor.h"
#include "gpt2_bench_step.h"

using namespace bytegrad;

namespace {

struct Setup {
  int steps = 20;
  std::string mode = "bf16_sdpa";
  int64_t batch = 8, seq = 1024;
  bool tiny = false;
  int threads = 0;  // > 0: that many ranks as threads on sim (the threads backend); 0: nccl, one per process
  nn::GPTConfig config() const {
    nn::GPTConfig c;  // GPT-2 small
    if (tiny) c = nn::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 64, .vocab_size = 512, .block_size = 64};
    if (mode == "bf16_sdpa") c.attention = nn::AttentionKind::sdpa;
    return c;
  }
};

const char* const kUsage =
    "usage: bench_fsdp_gpt2 [STEPS [fp32|bf16_sdpa [BATCH [SEQ]]]] [--tiny] [--threads N]\n"
    "  under bytegrad-launch (nccl, one GPU per process), or with --threads N: N ranks as threads on sim\n";

// `text` as a whole number, or an error naming `what`.
int64_t number(const std::string& text, const char* what) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, value);
  if (text.empty() || parsed.ec != std::errc() || parsed.ptr != end)
    throw std::invalid_argument(std::string(what) + " '" + text + "': expected a whole number");
  return value;
}

Setup parse(int argc, char** argv) {
  Setup s;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tiny") {
      s.tiny = true;
    } else if (a == "--threads") {
      if (i + 1 >= argc) throw std::invalid_argument("--threads needs a number of ranks");
      s.threads = static_cast<int>(number(argv[++i], "--threads"));
      if (s.threads < 1) throw std::invalid_argument("--threads: expected at least 1 rank");
    } else if (a.rfind("--", 0) == 0) {
      throw std::invalid_argument("unknown option '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() > 4) throw std::invalid_argument("too many arguments");
  if (!positional.empty()) s.steps = static_cast<int>(number(positional[0], "STEPS"));
  if (positional.size() > 1) s.mode = positional[1];
  if (positional.size() > 2) s.batch = number(positional[2], "BATCH");
  if (positional.size() > 3) s.seq = number(positional[3], "SEQ");
  if (s.mode != "fp32" && s.mode != "bf16_sdpa")
    throw std::invalid_argument("mode '" + s.mode + "': expected fp32 or bf16_sdpa");
  if (s.steps < 1 || s.batch < 1 || s.seq < 1) throw std::invalid_argument("STEPS, BATCH and SEQ must be positive");
  if (s.seq > s.config().block_size)
    throw std::invalid_argument("SEQ " + std::to_string(s.seq) + " exceeds the model's block size " +
                                std::to_string(s.config().block_size));
  return s;
}

// nanoGPT's parameter count (wte tied to lm_head): 124,439,808 for GPT-2 small.
int64_t gpt_parameters(const nn::GPTConfig& c) {
  const int64_t e = c.n_embd;
  return c.vocab_size * e + c.block_size * e + c.n_layer * (12 * e * e + 13 * e) + 2 * e;
}

// One rank's median step (distributed: under FSDP2 on `group`; otherwise alone on `d`).
double gpt2_step_ms(Device d, const Setup& s, distributed::ProcessGroup* group) {
  manual_seed(1337);
  const nn::GPTConfig config = s.config();
  auto model = bench::gpt2_on(d, config);  // on the CPU, then moved to this rank's device, as PyTorch's step
  std::optional<distributed::FSDPModule> root;
  if (group != nullptr) {
    // fully_shard on each transformer block ("transformer.h.<i>"), then on the root, as PyTorch's examples.
    for (const auto& [name, m] : model->named_modules()) {
      if (name.rfind("transformer.h.", 0) != 0 || name.find('.', 14) != std::string::npos) continue;
      distributed::fully_shard(std::shared_ptr<nn::Module>(model, m), *group);  // owned by the model
    }
    root.emplace(distributed::fully_shard(model, *group));
  }
  bench::Gpt2TrainingStep::Forward forward;  // the optimizer below holds the shards, once sharded
  if (root) forward = [&](const std::function<nn::GPT::Output()>& plain) { return root->forward(plain); };
  return bench::median_step_ms(bench::Gpt2TrainingStep(model, d, s.mode, s.batch, s.seq, forward), s.steps);
}

struct CommTimes {
  double all_gather_ms, reduce_scatter_ms;
};

// One all_gather_into_tensor of the whole model and one reduce_scatter_tensor of the whole gradient (fp32,
// rounded up to a multiple of the world size), each alone.
CommTimes comm_ms(distributed::ProcessGroup& group, const Setup& s) {
  const int64_t world = group.size();
  const int64_t shard = (gpt_parameters(s.config()) + world - 1) / world;
  const TensorOptions f32{ScalarType::float32, group.device()};
  Tensor full = zeros({shard * world}, f32);
  Tensor part = zeros({shard}, f32);
  CommTimes t{};
  t.all_gather_ms = bench::median_step_ms(
      [&] {
        group.all_gather_into_tensor(full, part);
        synchronize(group.device());
      },
      s.steps);
  t.reduce_scatter_ms = bench::median_step_ms(
      [&] {
        group.reduce_scatter_tensor(part, full, distributed::ReduceOp::avg);
        synchronize(group.device());
      },
      s.steps);
  return t;
}

// Every rank's `values`, rank by rank (rank 0's first), on every rank.
std::vector<double> gather_values(distributed::ProcessGroup& group, const std::vector<double>& values) {
  const auto n = static_cast<int64_t>(values.size());
  const TensorOptions f64{ScalarType::float64, group.device()};
  Tensor mine = zeros({n}, f64);
  fill_from_host(mine, values);
  Tensor all = zeros({n * group.size()}, f64);
  group.all_gather_into_tensor(all, mine);
  return all.tolist();
}

// The whole benchmark as one rank; rank 0 prints.
void run_rank(distributed::ProcessGroup& group, const Setup& s) {
  const Device d = group.device();
  const bool leader = group.rank() == 0;
  double one_gpu = 0.0;
  int64_t one_allocated = 0, one_reserved = 0;
  if (leader) {
    reset_peak_memory_stats(d);
    one_gpu = gpt2_step_ms(d, s, nullptr);
    one_allocated = max_memory_allocated(d);
    one_reserved = max_memory_reserved(d);
  }
  group.barrier();
  const CommTimes comm = comm_ms(group, s);
  empty_cache(d);
  reset_peak_memory_stats(d);
  const double rank_ms = gpt2_step_ms(d, s, &group);
  const std::vector<double> ranks =
      gather_values(group, {rank_ms, static_cast<double>(max_memory_allocated(d)),
                            static_cast<double>(max_memory_reserved(d)), comm.all_gather_ms, comm.reduce_scatter_ms});
  if (!leader) return;
  const int world = group.size();
  double slowest = 0, all_gather = 0, reduce_scatter = 0, peak_allocated = 0, peak_reserved = 0;
  for (int r = 0; r < world; ++r) {
    const double* v = &ranks[static_cast<size_t>(r) * 5];
    slowest = std::max(slowest, v[0]);
    peak_allocated = std::max(peak_allocated, v[1]);
    peak_reserved = std::max(peak_reserved, v[2]);
    all_gather = std::max(all_gather, v[3]);
    reduce_scatter = std::max(reduce_scatter, v[4]);
  }
  const std::string model = s.tiny ? "nanoGPT tiny" : "GPT-2 small";
  fmt::print(
      "bytegrad {} {} step under FSDP2 ({}), {}x{} tokens per GPU (AdamW foreach; median of {} "
      "synchronized steps)\n",
      model, s.mode, group.backend_name(), s.batch, s.seq, s.steps);
  fmt::print("one GPU, no FSDP: {:.2f} ms (peak allocated {}, reserved {})\n", one_gpu, one_allocated, one_reserved);
  fmt::print("{} ranks under FSDP2: {:.2f} ms (slowest rank; rank 0 {:.2f})\n", world, slowest, ranks[0]);
  for (int r = 0; r < world; ++r) {
    const double* v = &ranks[static_cast<size_t>(r) * 5];
    fmt::print("  rank {}: {:.2f} ms, peak allocated {:.0f}, reserved {:.0f}\n", r, v[0], v[1], v[2]);
  }
  fmt::print(
      "one all_gather of the whole model alone: {:.2f} ms; one reduce_scatter of the whole gradient: {:.2f} ms\n",
      all_gather, reduce_scatter);
  fmt::print("scaling efficiency {:.1f}%; FSDP2 adds {:.2f} ms per step\n", 100.0 * one_gpu / slowest,
             slowest - one_gpu);
  // One line for tools/gpu_checks.sh's summary (pytorch_fsdp_step.py prints the same keys).
  fmt::print(
      "result impl=bytegrad model={} mode={} batch={} seq={} world={} one_gpu_ms={:.3f} fsdp_ms={:.3f} "
      "all_gather_ms={:.3f} reduce_scatter_ms={:.3f} peak_allocated_max={:.0f} peak_reserved_max={:.0f}\n",
      s.tiny ? "tiny" : "small", s.mode, s.batch, s.seq, world, one_gpu, slowest, all_gather, reduce_scatter,
      peak_allocated, peak_reserved);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  try {
    s = parse(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_fsdp_gpt2: {}\n{}", e.what(), kUsage);
    return 2;
  }
  try {
    if (s.threads > 0) {
      distributed::run_ranks(s.threads, DeviceType::sim, [&](distributed::ProcessGroup& g) { run_rank(g, s); });
      return 0;
    }
    if (!cuda_is_available()) {
      fmt::print("bench_fsdp_gpt2: no GPU here; nothing to time (--threads N runs the ranks on sim)\n");
      return 0;
    }
    auto group = distributed::init_process_group("nccl");
    run_rank(*group, s);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_fsdp_gpt2: {}\n", e.what());
    return 1;
  }
  return 0;
}
