// bytegrad-estimate: how much device memory training takes, by running the real training step on meta (every
// allocation PyTorch 2.11's caching allocator would make on an H100, no arithmetic).
//
//   bytegrad-estimate gpt2 [--n-layer N --n-head N --n-embd N --vocab N --block N] --seq T --batch B
//                          [--optimizer adamw|adam|sgd] [--foreach on|off] [--no-workspace]
//                          [--limit SIZE [--max-batch]] [--marks] [--alloc-conf SETTING]
//                          [--amp bf16|fp16|off] [--attention slow|sdpa] [--checkpoint] [--memory-viz FILE]
//                          [--ddp N [--rank R] [--bucket-cap-mb X] [--gradient-as-bucket-view] [--zero1]]
//
// --amp runs each forward inside torch.autocast(device_type="cuda", dtype=...) (tensor/autocast.h), as
// nanoGPT's train.py does; --attention sdpa calls scaled_dot_product_attention (nanoGPT's flash branch, no
// causal-mask buffer) instead of the explicit softmax(q @ k^T) path; --checkpoint runs each block under
// activation checkpointing (torch.utils.checkpoint, use_reentrant=False).
// nanoGPT's loop (shared/golden/gpt2/gpt2_scenarios.py): the model built and moved, the optimizer (AdamW with
// nanoGPT's two groups by default, PyTorch's foreach path), two steps of forward, backward, step and
// zero_grad(set_to_none=True). GPT-2 small's sizes by default (12 layers, 12 heads, 768 wide, vocabulary
// 50257, block 1024), batch 4 x 256 tokens; PyTorch's default cuBLAS workspaces unless --no-workspace
// (CUBLAS_WORKSPACE_CONFIG=:0:0). Prints `peak_allocated <bytes>` and `peak_reserved <bytes>`, each on its
// own line, then the categories at the peak (memory_ledger.h's peak_report). --alloc-conf SETTING runs with
// that allocator setting (BYTEGRAD_ALLOC_CONF's syntax, as PYTORCH_CUDA_ALLOC_CONF: "would
// expandable_segments:True have fit?" is one flag). --limit SIZE (bytes, or with KiB/MiB/GiB/KB/MB/GB) caps the
// allocator as torch.cuda.set_per_process_memory_fraction does, and adds `fits yes|no` (with the out-of-memory report
// when not); with --max-batch the last line is `max_batch <N>`, the largest batch whose two steps fit (0 when none
// does). --marks first prints the figures at every mark of the run (model, data, s0_forward, ...) as one JSON document,
// in the golden files' layout (shared/golden/README.md). --memory-viz FILE writes the run's allocator history as a
// snapshot PyTorch's memory_viz viewer opens (reports/memory_viz.h).
// --ddp N: one rank of N under DistributedDataParallel (PyTorch's defaults; --bucket-cap-mb X,
// --gradient-as-bucket-view), on the fake backend: its collectives allocate what NCCL's would; NCCL's own
// buffers are outside the allocator, never in the figures: the peak report's line "outside the allocator:
// NCCL communicator X, first all_reduce Y, CUDA context Z" gives the measured model of them. --zero1 uses
// ZeroRedundancyOptimizer, whose optimizer state differs by rank (--rank R, default 0, takes the largest
// parameters first). The old gradient buckets at the rebuild are counted as held (docs/distributed.md).
//
//   bytegrad-estimate mlp [--sizes 784,1024,1024,10] --batch B [--optimizer none|sgd|adam|adamw]
//                         [--foreach on|off] [--inplace-relu] [--no-workspace] [--limit SIZE [--max-batch]]
//
// An MLP classifier (seed001's kind of question): Linear layers of those sizes with ReLU between, built on the
// device, randn inputs and randint labels, two steps of forward, cross_entropy, backward, optimizer step
// (Adam by default; SGD with momentum 0.9) and zero_grad(set_to_none=True). The same lines are printed.
// Exit status: 0, or 2 on a bad argument (one line naming it).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/reports/memory_ledger.h"
#include "bytegrad/reports/memory_viz.h"
#include "bytegrad/memory/out_of_memory.h"
#include "programs/gpt2_programs.h"

using namespace bytegrad;
using namespace bytegrad::programs;

namespace {

constexpr const char* kUsage =
    "usage: bytegrad-estimate gpt2 [--n-layer N --n-head N --n-embd N --vocab N --block N] --seq T --batch B\n"
    "                         [--optimizer adamw|adam|sgd] [--foreach on|off] [--no-workspace]\n"
    "                         [--limit SIZE [--max-batch]] [--marks] [--alloc-conf SETTING]\n"
    "                         [--amp bf16|fp16|off] [--attention slow|sdpa] [--checkpoint] [--memory-viz FILE]\n"
    "       bytegrad-estimate mlp [--sizes 784,1024,1024,10] --batch B [--optimizer none|sgd|adam|adamw]\n"
    "                         [--foreach on|off] [--inplace-relu] [--no-workspace] [--limit SIZE [--max-batch]]\n"
    "                         [--marks] [--alloc-conf SETTING] [--memory-viz FILE]\n";

int usage_error(const std::string& what) {
  std::cerr << "bytegrad-estimate: " << what << '\n' << kUsage;
  return 2;
}

int64_t positive_integer(const std::string& option, const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1)
    throw std::invalid_argument(option + " needs a positive integer, got '" + text + "'");
  return value;
}

int64_t nonnegative_integer(const std::string& option, const std::string& text) {
  return text == "0" ? 0 : positive_integer(option, text);
}

double positive_number(const std::string& option, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value > 0) || !std::isfinite(value))
    throw std::invalid_argument(option + " needs a positive number, got '" + text + "'");
  return value;
}

// "24GiB", "24 GB", "25769803776": bytes, at least one and at most int64's largest. NaN, infinities,
// negative or zero sizes, fractions of a byte and sizes past int64 are refused (each would otherwise turn
// the limit off without a word).
int64_t byte_size(const std::string& text) {
  const std::string expected = "--limit needs a size such as 24GiB (B, KiB, MiB, GiB, KB, MB, GB), got '" + text + "'";
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0) throw std::invalid_argument(expected);
  if (!std::isfinite(number)) throw std::invalid_argument("--limit '" + text + "' is not a finite size");
  if (number <= 0) throw std::invalid_argument("--limit '" + text + "' is not a positive size");
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(unit.begin());
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else throw std::invalid_argument("--limit: unknown unit '" + unit + "' (B, KiB, MiB, GiB, KB, MB, GB)");
  const double bytes = std::floor(number * scale);
  if (bytes < 1) throw std::invalid_argument("--limit '" + text + "' is less than one byte");
  // 2^63 is the first double past int64's range.
  if (!(bytes < 9223372036854775808.0))
    throw std::invalid_argument("--limit '" + text + "' is more bytes than int64 can count (at most 2^63 - 1)");
  return static_cast<int64_t>(bytes);
}

int run(int argc, char** argv) {
  if (argc < 2) return usage_error("which model? (gpt2)");
  const std::string model = argv[1];
  if (model == "-h" || model == "--help") {
    std::cout << kUsage;
    return 0;
  }
  if (model != "gpt2" && model != "mlp") return usage_error("unknown model '" + model + "': expected gpt2 or mlp");
  const bool gpt = model == "gpt2";
  GPTTraining t;  // GPT-2 small, batch 4 x 256, AdamW foreach
  t.config = gpt2_small_config();
  MLPTraining m;  // 784-1024-1024-10, batch 256, Adam foreach
  bool default_workspace = true, max_batch = false, marks = false;
  std::string memory_viz;
  int64_t limit = 0;
  std::string data_parallel_option;  // the last of --rank, --bucket-cap-mb, ... (each needs --ddp)
  bool ddp_given = false;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (!gpt && (arg == "--n-layer" || arg == "--n-head" || arg == "--n-embd" || arg == "--vocab" || arg == "--block" ||
                 arg == "--seq"))
      return usage_error(arg + " is a gpt2 option");
    if (gpt && (arg == "--sizes" || arg == "--inplace-relu")) return usage_error(arg + " is an mlp option");
    if (arg == "--sizes") {
      m.sizes.clear();
      const std::string list = value();
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        m.sizes.push_back(positive_integer("--sizes", list.substr(start, comma - start)));
        start = comma + 1;
      }
      if (m.sizes.size() < 2) return usage_error("--sizes needs at least two sizes (input, classes)");
    } else if (arg == "--inplace-relu") m.inplace_relu = true;
    else if (arg == "--n-layer") t.config.n_layer = positive_integer(arg, value());
    else if (arg == "--n-head") t.config.n_head = positive_integer(arg, value());
    else if (arg == "--n-embd") t.config.n_embd = positive_integer(arg, value());
    else if (arg == "--vocab") t.config.vocab_size = positive_integer(arg, value());
    else if (arg == "--block") t.config.block_size = positive_integer(arg, value());
    else if (arg == "--seq") t.seq = positive_integer(arg, value());
    else if (arg == "--batch") t.batch = m.batch = positive_integer(arg, value());
    else if (arg == "--optimizer") {
      const std::string o = value();
      if (o == "adamw") t.optimizer = GPTOptimizer::adamw, m.optimizer = MLPOptimizer::adamw;
      else if (o == "adam") t.optimizer = GPTOptimizer::adam, m.optimizer = MLPOptimizer::adam;
      else if (o == "sgd") t.optimizer = GPTOptimizer::sgd, m.optimizer = MLPOptimizer::sgd;
      else if (o == "none" && !gpt) m.optimizer = MLPOptimizer::none;
      else return usage_error("--optimizer '" + o + "': expected adamw, adam or sgd" + (gpt ? "" : " or none"));
    } else if (arg == "--foreach") {
      const std::string f = value();
      if (f != "on" && f != "off") return usage_error("--foreach '" + f + "': expected on or off");
      t.foreach = m.foreach = f == "on";
    } else if (arg == "--no-workspace") {
      default_workspace = false;
    } else if (arg == "--limit") {
      limit = byte_size(value());
    } else if (arg == "--max-batch") {
      max_batch = true;
    } else if (arg == "--marks") {
      marks = true;
    } else if (arg == "--memory-viz") {
      memory_viz = value();
    } else if (arg == "--alloc-conf") {
      const std::string setting = value();
      AllocatorConfig::parse(setting);  // a bad setting is named here (std::invalid_argument), before any run
      setenv("BYTEGRAD_ALLOC_CONF", setting.c_str(), 1);
    } else if (arg == "--amp" && gpt) {
      const std::string a = value();
      if (a == "bf16") t.amp = ScalarType::bfloat16;
      else if (a == "fp16") t.amp = ScalarType::float16;
      else if (a == "off") t.amp.reset();
      else return usage_error("--amp '" + a + "': expected bf16, fp16 or off");
    } else if (arg == "--attention" && gpt) {
      const std::string a = value();
      if (a == "slow") t.config.attention = nn::AttentionKind::slow;
      else if (a == "sdpa") t.config.attention = nn::AttentionKind::sdpa;
      else return usage_error("--attention '" + a + "': expected slow or sdpa");
    } else if (arg == "--checkpoint" && gpt) {
      t.config.checkpoint_blocks = true;
    } else if (arg == "--ddp" && gpt) {
      const int64_t n = positive_integer(arg, value());
      if (n < 2) return usage_error("--ddp needs at least 2 ranks, got " + std::to_string(n));
      if (!t.data_parallel) t.data_parallel.emplace();
      t.data_parallel->world_size = static_cast<int>(n);
      ddp_given = true;
    } else if ((arg == "--rank" || arg == "--bucket-cap-mb" || arg == "--gradient-as-bucket-view" ||
                arg == "--zero1") &&
               gpt) {
      if (!t.data_parallel) t.data_parallel.emplace();
      if (arg == "--rank") t.data_parallel->rank = static_cast<int>(nonnegative_integer(arg, value()));
      else if (arg == "--bucket-cap-mb") t.data_parallel->ddp.bucket_cap_mb = positive_number(arg, value());
      else if (arg == "--gradient-as-bucket-view") t.data_parallel->ddp.gradient_as_bucket_view = true;
      else t.data_parallel->zero1 = true;
      data_parallel_option = arg;
    } else if (arg == "--amp" || arg == "--attention" || arg == "--checkpoint" || arg == "--ddp" || arg == "--rank" ||
               arg == "--bucket-cap-mb" || arg == "--gradient-as-bucket-view" || arg == "--zero1") {
      return usage_error(arg + " is a gpt2 option");
    } else {
      return usage_error("unknown option '" + arg + "'");
    }
  }
  if (gpt && t.seq > t.config.block_size)
    return usage_error("--seq " + std::to_string(t.seq) + " is longer than the block size " +
                       std::to_string(t.config.block_size));
  if (gpt && t.config.n_embd % t.config.n_head != 0) return usage_error("--n-embd must be a multiple of --n-head");
  if (max_batch && limit == 0) return usage_error("--max-batch needs --limit");
  if (!data_parallel_option.empty() && !ddp_given) return usage_error(data_parallel_option + " needs --ddp N");
  if (t.data_parallel && t.data_parallel->rank >= t.data_parallel->world_size)
    return usage_error("--rank " + std::to_string(t.data_parallel->rank) + " is not a rank of --ddp " +
                       std::to_string(t.data_parallel->world_size));

  if (!memory_viz.empty()) {
    // Whether the file can be written is known before the run (minutes, for a large model), not after.
    std::ofstream probe(memory_viz, std::ios::binary | std::ios::app);
    if (!probe) {
      std::cerr << "bytegrad-estimate: cannot write the --memory-viz file '" << memory_viz
                << "': " << std::strerror(errno) << '\n';
      return 1;
    }
  }

  ScenarioRecorder recorder(model, kMeta);
  ScenarioRecorder* record = marks ? &recorder : nullptr;
  // The run itself (one estimate_on_meta), recording the allocator's history for --memory-viz.
  const TrainingPeak peak = estimate_on_meta(
      [&](Device on) {
        if (memory_viz.empty()) return gpt ? train_gpt(t, record, on) : train_mlp(m, record, on);
        caching_allocator(on).record_history(true);
        try {
          gpt ? train_gpt(t, record, on) : train_mlp(m, record, on);
        } catch (const OutOfMemoryError&) {
          dump_memory_viz(memory_viz, caching_allocator(on));  // the history up to the failure
          throw;
        }
        dump_memory_viz(memory_viz, caching_allocator(on));
      },
      default_workspace, limit);
  if (peak.out_of_memory && limit == 0) {
    // Without --limit the question is "what does it take", and the run did not finish on the modelled card:
    // the peaks so far are not the answer (a model whose first parameter cannot be allocated peaks at 0).
    std::cerr << "bytegrad-estimate: the run does not fit on meta's modelled card ("
              << human_bytes(mem_get_info(kMeta).second) << "), so it has no peak to report (--limit SIZE prints "
              << "`fits no` and the allocator's report): " << peak.message << '\n';
    return 1;
  }
  if (marks) std::cout << recorder.to_json();
  std::cout << "peak_allocated " << peak.peak_allocated << '\n' << "peak_reserved " << peak.peak_reserved << '\n';
  PeakReport report{kMeta, peak.at_peak};
  if (gpt && t.data_parallel) {
    // The rank's group is gone with the run: NCCL's memory from the model (distributed/process_group.h),
    // beside the modelled card's context, never in the figures above.
    const auto [free, total] = mem_get_info(kMeta);
    report.outside_allocator =
        outside_allocator_line(distributed::modelled_nccl_figures(), total - free - memory_reserved(kMeta));
  }
  std::cout << report;
  if (limit > 0) std::cout << "fits " << (peak.out_of_memory ? "no" : "yes") << '\n' << peak.explanation;
  if (max_batch)
    std::cout << "max_batch "
              << (gpt ? max_gpt_batch(t, limit, default_workspace) : max_mlp_batch(m, limit, default_workspace))
              << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::cerr << "bytegrad-estimate: " << e.what() << '\n';
  }
  return 1;
}
