// bytegrad-estimate: how much device memory training takes, by running the real training step on meta (every
// allocation PyTorch 2.11's caching allocator would make on an H100, no arithmetic).
//
//   bytegrad-estimate gpt2 [--n-layer N --n-head N --n-embd N --vocab N --block N] --seq T --batch B
//                          [--steps N] [--optimizer adamw|adam|sgd] [--foreach on|off] [--no-workspace]
//                          [--card SIZE|NAME] [--limit SIZE] [--max-batch] [--marks] [--alloc-conf SETTING]
//                          [--amp bf16|fp16|off] [--attention slow|sdpa] [--checkpoint] [--memory-viz FILE]
//                          [--ddp N [--rank R] [--bucket-cap-mb X] [--gradient-as-bucket-view] [--zero1]]
//                          [--fsdp N [--reshard-after-forward true|false|K] [--mixed bf16]]
//
// --amp runs each forward inside torch.autocast(device_type="cuda", dtype=...) (tensor/autocast.h), as
// nanoGPT's train.py does; --attention sdpa calls scaled_dot_product_attention (nanoGPT's flash branch, no
// causal-mask buffer) instead of the explicit softmax(q @ k^T) path; --checkpoint runs each block under
// activation checkpointing (torch.utils.checkpoint, use_reentrant=False).
// nanoGPT's loop (shared/golden/gpt2/gpt2_scenarios.py): the model built and moved, the optimizer (AdamW with
// nanoGPT's two groups by default, PyTorch's foreach path), two steps (--steps N: N) of forward, backward,
// step and zero_grad(set_to_none=True). GPT-2 small's sizes by default (12 layers, 12 heads, 768 wide, vocabulary
// 50257, block 1024), batch 4 x 256 tokens; PyTorch's default cuBLAS workspaces unless --no-workspace
// (CUBLAS_WORKSPACE_CONFIG=:0:0). Prints `peak_allocated <bytes>` and `peak_reserved <bytes>`, each on its
// own line, then the categories at the peak (memory_ledger.h's peak_report). --alloc-conf SETTING runs with
// that allocator setting (BYTEGRAD_ALLOC_CONF's syntax, as PYTORCH_CUDA_ALLOC_CONF: "would
// expandable_segments:True have fit?" is one flag). --card SIZE|NAME runs on a card of that total memory
// ("24GB": 24 * 10^9 bytes; "H100-80GB") less the CUDA context and the driver's share (programs/card.h), and
// --limit SIZE caps the allocator as torch.cuda.set_per_process_memory_fraction does on whatever card runs
// (the modelled H100 80GB without --card); either adds `fits yes|no` (with the out-of-memory report when
// not), and with --max-batch the last line is `max_batch <N>`, the largest batch whose steps fit (0 when
// none does). Sizes: GB = 10^9 bytes, GiB = 2^30 (programs/card.h's parse_byte_size). --marks first prints the figures
// at every mark of the run (model, data, s0_forward, ...) as one JSON document, in the golden files' layout
// (shared/golden/README.md). --memory-viz FILE writes the run's allocator history as a snapshot PyTorch's memory_viz
// viewer opens (reports/memory_viz.h).
// --ddp N: one rank of N under DistributedDataParallel (PyTorch's defaults; --bucket-cap-mb X,
// --gradient-as-bucket-view), on the fake backend: its collectives allocate what NCCL's would; NCCL's own
// buffers are outside the allocator, never in the figures: the peak report's line "outside the allocator:
// NCCL communicator X, ..., ring buffers Y, CUDA context Z" gives the measured model of them, and --card takes
// them off the card with the driver's share. --zero1 uses
// ZeroRedundancyOptimizer, whose optimizer state differs by rank (--rank R, default 0, takes the largest
// parameters first). The old gradient buckets at the rebuild are counted as held (docs/distributed.md).
// --fsdp N: FSDP2 (fully_shard on each block, then the root; programs/fsdp_programs.h) over N ranks on the
// fake backend, run twice, as rank 0 and as rank N-1 (the ranks whose shards differ: the last may hold fewer
// rows); each run's lines follow a `rank R of N` line, and a card or cap fits only when both runs fit.
//
//   bytegrad-estimate mlp [--sizes 784,1024,1024,10] --batch B [--steps N] [--optimizer none|sgd|adam|adamw]
//                         [--foreach on|off] [--inplace-relu] [--no-workspace] [--card SIZE|NAME]
//                         [--limit SIZE] [--max-batch]
//
// An MLP classifier (seed001's kind of question): Linear layers of those sizes with ReLU between, built on the
// device, randn inputs and randint labels, two steps of forward, cross_entropy, backward, optimizer step
// (Adam by default; SGD with momentum 0.9) and zero_grad(set_to_none=True). The same lines are printed.
// --help explains every option. Exit status: 0, or 2 on a bad argument (one line naming it).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>

#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/reports/memory_ledger.h"
#include "bytegrad/reports/memory_viz.h"
#include "bytegrad/memory/out_of_memory.h"
#include "programs/card.h"
#include "programs/gpt2_programs.h"

using namespace bytegrad;
using namespace bytegrad::programs;

namespace {

constexpr const char* kUsage =
    "usage: bytegrad-estimate gpt2 [--n-layer N --n-head N --n-embd N --vocab N --block N] --seq T --batch B\n"
    "                         [--steps N] [--optimizer adamw|adam|sgd] [--foreach on|off] [--no-workspace]\n"
    "                         [--card SIZE|NAME] [--limit SIZE] [--max-batch] [--marks] [--alloc-conf SETTING]\n"
    "                         [--amp bf16|fp16|off] [--attention slow|sdpa] [--checkpoint] [--memory-viz FILE]\n"
    "                         [--ddp N [--rank R] [--bucket-cap-mb X] [--gradient-as-bucket-view] [--zero1]]\n"
    "                         [--fsdp N [--reshard-after-forward true|false|K] [--mixed bf16]]\n"
    "       bytegrad-estimate mlp [--sizes 784,1024,1024,10] --batch B [--steps N] [--optimizer none|sgd|adam|adamw]\n"
    "                         [--foreach on|off] [--inplace-relu] [--no-workspace] [--card SIZE|NAME]\n"
    "                         [--limit SIZE] [--max-batch] [--marks] [--alloc-conf SETTING] [--memory-viz FILE]\n"
    "       bytegrad-estimate --help\n";

// Every option in a sentence (--help).
std::string help_text() {
  return std::string(kUsage) +
         "\n"
         "How much GPU memory training takes, from running the training step itself on bytegrad's meta device:\n"
         "every allocation PyTorch 2.11's caching allocator makes on CUDA, exact to the byte, no values computed.\n"
         "Prints peak_allocated and peak_reserved (bytes: torch.cuda.max_memory_allocated and\n"
         "max_memory_reserved), then the memory by category at the peak and the largest blocks with their owners.\n"
         "\n"
         "Models:\n"
         "  gpt2                   nanoGPT's GPT-2 training loop: the model, AdamW, two steps of forward, backward,\n"
         "                         step and zero_grad (GPT-2 small's sizes unless given).\n"
         "  mlp                    an MLP classifier: Linear layers with ReLU between, cross-entropy, two steps.\n"
         "\n"
         "The run:\n"
         "  --batch B              sequences (gpt2) or samples (mlp) per step (gpt2: 4, mlp: 256 by default).\n"
         "  --seq T                gpt2: tokens per sequence, at most --block (256 by default).\n"
         "  --steps N              training steps, each forward, backward, step and zero_grad (2 by default).\n"
         "  --n-layer N, --n-head N, --n-embd N, --vocab N, --block N\n"
         "                         gpt2: the model's sizes (12, 12, 768, 50257, 1024: GPT-2 small).\n"
         "  --sizes A,B,...        mlp: the layer widths from the input to the classes (784,1024,1024,10).\n"
         "  --inplace-relu         mlp: ReLU(inplace=True), which keeps one activation less per layer.\n"
         "  --optimizer NAME       adamw (gpt2's default), adam (mlp's), or sgd; for mlp also none (no step).\n"
         "  --foreach on|off       the optimizer's multi-tensor path (on: PyTorch's default on CUDA) or per tensor.\n"
         "  --amp bf16|fp16|off    gpt2: the forward under torch.autocast with that dtype (off by default).\n"
         "  --attention slow|sdpa  gpt2: softmax(q @ k^T) written out (slow, the default) or SDPA.\n"
         "  --checkpoint           gpt2: every block under activation checkpointing (use_reentrant=False).\n"
         "  --no-workspace         no cuBLAS workspaces (CUBLAS_WORKSPACE_CONFIG=:0:0); by default PyTorch's\n"
         "                         32 MiB + 1 MiB for each thread that multiplies matrices.\n"
         "  --alloc-conf SETTING   the allocator's settings, as PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True).\n"
         "  --ddp N                gpt2: one rank of N under DistributedDataParallel (NCCL's own buffers are not\n"
         "                         counted).\n"
         "  --rank R               with --ddp: which rank (0 by default; ranks differ only with --zero1).\n"
         "  --bucket-cap-mb X      with --ddp: DDP's gradient bucket size in MiB (25 by default).\n"
         "  --gradient-as-bucket-view\n"
         "                         with --ddp: the gradients are views into DDP's buckets (no separate copy).\n"
         "  --zero1                with --ddp: ZeroRedundancyOptimizer, each rank keeping its share of the state.\n"
         "  --fsdp N               gpt2: FSDP2 over N ranks (fully_shard on each block, then the root), run as\n"
         "                         rank 0 and as rank N-1 (the ranks whose shards differ), each one's peak printed\n"
         "                         after a `rank R of N` line; with --max-batch, the largest batch every rank fits.\n"
         "  --reshard-after-forward true|false|K\n"
         "                         with --fsdp: free each block's gathered parameters after its forward (true,\n"
         "                         PyTorch's default for all but the root) or keep them until backward; K, a\n"
         "                         factor of N: keep 1/K of them after forward, gathered again from K ranks.\n"
         "  --mixed bf16           with --fsdp: MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32).\n"
         "\n"
         "Will it fit:\n" +
         card_help() +
         "  --limit SIZE           an allocator cap, as torch.cuda.set_per_process_memory_fraction(SIZE / total),\n"
         "                         on the --card or, without one, on the modelled H100 80GB. It is not a card\n"
         "                         size: the context and the driver's share are outside the cap. Adds `fits`.\n"
         "  --max-batch            with --card or --limit: also print max_batch, the largest batch that fits\n"
         "                         (near a cap a smaller one can fail: not_fitting_below_max_batch lists those).\n"
         "\n"
         "Sizes: a number and a unit. GB, MB, KB, TB are powers of 1000 (24GB = 24,000,000,000 bytes, as card\n"
         "makers count); GiB, MiB, KiB, TiB are powers of 1024 (24GiB = 25,769,803,776 bytes, 7.4% more, as\n"
         "PyTorch and nvidia-smi count); the unit's case does not matter; no unit means bytes; a bare G, M or K\n"
         "is refused as ambiguous.\n"
         "\n"
         "Output:\n"
         "  --marks                first the figures at every mark of the run, as one JSON document.\n"
         "  --memory-viz FILE      also write the run's allocator history for https://pytorch.org/memory_viz.\n"
         "  --help                 this text.\n"
         "\n"
         "Exit status: 0; 1 when the run does not fit on the modelled card and neither --card nor --limit asked\n"
         "whether it would; 2 for a bad argument.\n";
}

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

// The max_batch line (the output's last), after the batches below it that do not fit, when there are any.
void print_max_batch(const BatchSearch& found) {
  if (!found.not_fitting_below.empty()) {
    std::cout << "not_fitting_below_max_batch";
    for (auto it = found.not_fitting_below.rbegin(); it != found.not_fitting_below.rend(); ++it)
      std::cout << ' ' << *it;
    std::cout << " (the allocator's layout at the cap: these fail where a larger batch fits)\n";
  }
  std::cout << "max_batch " << found.largest << '\n';
}

// NCCL's memory outside the allocator on each rank, from the measured model (distributed/process_group.h): the
// world group, the process's first communicator, with its ring; under --ddp its first collective is DDP's
// broadcast of the module's state. Under --fsdp with a --reshard-after-forward K between 1 and N each block's
// fully_shard call makes its own subgroup of K ranks, used from the first backward, each a later communicator
// with its ring (4 H200s: three per rank for an MLP of three Linears, docs/evidence/nccl_outside/); the root is
// never resharded and never uses its own.
OutsideAllocatorFigures modelled_nccl_for(const GPTTraining& t) {
  OutsideAllocatorFigures figures =
      distributed::modelled_nccl_figures(/*first_in_process=*/true, /*first_broadcast=*/!t.fully_shard);
  if (!t.fully_shard) return figures;
  const auto& reshard = t.fully_shard->options.reshard_after_forward;
  if (reshard && std::holds_alternative<int>(*reshard)) {
    const int k = std::get<int>(*reshard);
    if (k > 1 && k < t.fully_shard->world_size) {
      const OutsideAllocatorFigures subgroup = distributed::modelled_nccl_figures(/*first_in_process=*/false);
      for (OutsideAllocatorPart& part : figures.parts)
        for (const OutsideAllocatorPart& more : subgroup.parts)
          if (more.name == part.name) part.bytes += t.config.n_layer * more.bytes;
    }
  }
  return figures;
}

// The peak report's line on memory outside the allocator: NCCL's modelled parts and the CUDA context. Under
// --card the simulated context holds NCCL's buffers too (the card's room is taken off with them), so they are
// taken out of the context's figure here rather than shown twice.
std::string modelled_outside_line(const GPTTraining& t, bool card_holds_nccl) {
  const OutsideAllocatorFigures nccl = modelled_nccl_for(t);
  const auto [free, total] = mem_get_info(kMeta);
  int64_t context = static_cast<int64_t>(total - free) - memory_reserved(kMeta);
  if (card_holds_nccl)
    for (const OutsideAllocatorPart& part : nccl.parts) context -= part.bytes;
  return outside_allocator_line(nccl, context);
}

// --fsdp N: rank 0 and rank N-1 on the fake backend, one fresh run each; a card or cap fits when both do.
int estimate_fully_sharded(const GPTTraining& t, const std::optional<Card>& card, int64_t limit, bool max_batch,
                           bool default_workspace) {
  const int world = t.fully_shard->world_size;
  const bool asks_fit = limit > 0 || card.has_value();
  bool all_fit = true;
  std::string explanation;
  for (const int rank : {0, world - 1}) {
    GPTTraining mine = t;
    mine.fully_shard->rank = rank;
    const TrainingPeak peak =
        estimate_on_meta([&](Device on) { train_gpt(mine, nullptr, on); }, default_workspace, limit);
    if (peak.out_of_memory && !asks_fit) {
      std::cerr << "bytegrad-estimate: rank " << rank << " of " << world << " does not fit on meta's modelled card ("
                << human_bytes(mem_get_info(kMeta).second)
                << "), so it has no peak to report (--card or --limit print `fits no`): " << peak.message << '\n';
      return 1;
    }
    std::cout << "rank " << rank << " of " << world << '\n'
              << "peak_allocated " << peak.peak_allocated << '\n'
              << "peak_reserved " << peak.peak_reserved << '\n';
    PeakReport report{kMeta, peak.at_peak};
    report.outside_allocator = modelled_outside_line(t, card.has_value());
    std::cout << report;
    if (peak.out_of_memory && all_fit) {
      all_fit = false;
      explanation = "rank " + std::to_string(rank) + ": " + peak.explanation;
    }
  }
  if (card)
    std::cout << "card " << card->name << ": total " << card->total_bytes << " B, CUDA context and driver "
              << card->driver_bytes << " B, left for PyTorch " << human_bytes(card->usable_bytes()) << '\n';
  if (asks_fit) std::cout << "fits " << (all_fit ? "yes" : "no") << '\n' << explanation;
  if (max_batch) print_max_batch(max_gpt_batch(t, limit, default_workspace));
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) return usage_error("which model? (gpt2)");
  const std::string model = argv[1];
  if (model == "-h" || model == "--help") {
    std::cout << help_text();
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
  std::optional<Card> card;
  std::string data_parallel_option;  // the last of --rank, --bucket-cap-mb, ... (each needs --ddp)
  bool ddp_given = false;
  std::string fully_shard_option;  // the last of --reshard-after-forward, --mixed (each needs --fsdp)
  std::optional<std::variant<bool, int>> reshard_after_forward;
  bool mixed_bf16 = false;
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
    else if (arg == "--steps") {
      const int64_t n = positive_integer(arg, value());
      if (n > 1000) return usage_error("--steps " + std::to_string(n) + " is more than 1000");
      t.steps = m.steps = static_cast<int>(n);
    } else if (arg == "--optimizer") {
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
      limit = parse_byte_size("--limit", value());
    } else if (arg == "--card") {
      card = parse_card(value());
    } else if (arg == "-h" || arg == "--help") {
      std::cout << help_text();
      return 0;
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
    } else if (arg == "--fsdp" && gpt) {
      const int64_t n = positive_integer(arg, value());
      if (n < 2) return usage_error("--fsdp needs at least 2 ranks, got " + std::to_string(n));
      t.fully_shard.emplace();
      t.fully_shard->world_size = static_cast<int>(n);
    } else if (arg == "--reshard-after-forward" && gpt) {
      const std::string r = value();
      if (r == "true" || r == "false") reshard_after_forward = r == "true";
      else if (!r.empty() && r.find_first_not_of("0123456789") == std::string::npos && r.size() < 10)
        reshard_after_forward = static_cast<int>(std::stol(r));
      else return usage_error("--reshard-after-forward '" + r + "': expected true, false or a number of ranks");
      fully_shard_option = arg;
    } else if (arg == "--mixed" && gpt) {
      const std::string d = value();
      if (d != "bf16") return usage_error("--mixed '" + d + "': expected bf16");
      mixed_bf16 = true;
      fully_shard_option = arg;
    } else if (arg == "--amp" || arg == "--attention" || arg == "--checkpoint" || arg == "--ddp" || arg == "--rank" ||
               arg == "--bucket-cap-mb" || arg == "--gradient-as-bucket-view" || arg == "--zero1" || arg == "--fsdp" ||
               arg == "--reshard-after-forward" || arg == "--mixed") {
      return usage_error(arg + " is a gpt2 option");
    } else {
      return usage_error("unknown option '" + arg + "'");
    }
  }
  if (gpt && t.seq > t.config.block_size)
    return usage_error("--seq " + std::to_string(t.seq) + " is longer than the block size " +
                       std::to_string(t.config.block_size));
  if (gpt && t.config.n_embd % t.config.n_head != 0) return usage_error("--n-embd must be a multiple of --n-head");
  if (max_batch && limit == 0 && !card) return usage_error("--max-batch needs --card or --limit");
  if (card && limit > card->total_bytes)
    return usage_error("--limit " + std::to_string(limit) + " bytes is more than the --card's " +
                       std::to_string(card->total_bytes));
  // Whether the question is "does it fit" (a card or a cap), rather than "what does it take".
  const bool asks_fit = limit > 0 || card.has_value();
  if (!data_parallel_option.empty() && !ddp_given) return usage_error(data_parallel_option + " needs --ddp N");
  if (!fully_shard_option.empty() && !t.fully_shard) return usage_error(fully_shard_option + " needs --fsdp N");
  if (t.fully_shard && t.data_parallel)
    return usage_error("--fsdp and --ddp are two ways of data parallelism: pick one");
  if (t.fully_shard && (marks || !memory_viz.empty()))
    return usage_error(std::string(marks ? "--marks" : "--memory-viz") + " is not available with --fsdp (two runs)");
  if (t.fully_shard) {
    if (const int* k = reshard_after_forward ? std::get_if<int>(&*reshard_after_forward) : nullptr;
        k != nullptr && (*k < 1 || t.fully_shard->world_size % *k != 0))
      return usage_error("--reshard-after-forward " + std::to_string(*k) + " is not a factor of --fsdp " +
                         std::to_string(t.fully_shard->world_size));
    t.fully_shard->options.reshard_after_forward = reshard_after_forward;
    if (mixed_bf16)
      t.fully_shard->options.mp_policy = {.param_dtype = ScalarType::bfloat16, .reduce_dtype = ScalarType::float32};
  }
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

  // The card: meta's capacity becomes its total, with the driver's share held back as the context is, and
  // under --ddp NCCL's buffers too (the measured model: they live outside the allocator on every rank).
  if (card) {
    int64_t held_back = card->driver_bytes;
    if (t.data_parallel || t.fully_shard)
      for (const OutsideAllocatorPart& part : modelled_nccl_for(t).parts) held_back += part.bytes;
    if (held_back >= card->total_bytes)
      return usage_error("--card " + card->name + " has no memory left after the driver's share and NCCL's buffers");
    configure_simulated_device(kMeta, SimulatedCapacity{.total_bytes = static_cast<size_t>(card->total_bytes),
                                                        .context_bytes = static_cast<size_t>(held_back)});
  }

  if (t.fully_shard) return estimate_fully_sharded(t, card, limit, max_batch, default_workspace);

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
  if (peak.out_of_memory && !asks_fit) {
    // Without --limit the question is "what does it take", and the run did not finish on the modelled card:
    // the peaks so far are not the answer (a model whose first parameter cannot be allocated peaks at 0).
    std::cerr << "bytegrad-estimate: the run does not fit on meta's modelled card ("
              << human_bytes(mem_get_info(kMeta).second) << "), so it has no peak to report (--card or --limit print "
              << "`fits no` and the allocator's report): " << peak.message << '\n';
    return 1;
  }
  if (marks) std::cout << recorder.to_json();
  std::cout << "peak_allocated " << peak.peak_allocated << '\n' << "peak_reserved " << peak.peak_reserved << '\n';
  PeakReport report{kMeta, peak.at_peak};
  if (gpt && t.data_parallel) {
    // The rank's group is gone with the run: NCCL's memory from the model (distributed/process_group.h),
    // beside the modelled card's context, never in the figures above.
    report.outside_allocator = modelled_outside_line(t, card.has_value());
  }
  std::cout << report;
  if ((peak.placement_ties > 0 || peak.early_regions_decided) && !peak.out_of_memory) {
    // Best fit chose between equal free blocks of different segments by address, and PyTorch's addresses come
    // from the driver: the same run with the segments' order reversed shows whether the peaks depend on it.
    // Likewise where the regions reserved before the first launch go (EarlyRegions): the run with the other
    // placement than the host's address map implies, and with both.
    using Early = CachingAllocator::EarlyRegions;
    using Ties = CachingAllocator::TieOrder;
    const auto again = [&](Ties ties, Early early) {
      return estimate_on_meta([&](Device on) { gpt ? train_gpt(t, nullptr, on) : train_mlp(m, nullptr, on); },
                              default_workspace, limit, ties, early);
    };
    const auto outcome = [&](const char* what, const TrainingPeak& other) {
      if (other.peak_allocated == peak.peak_allocated && other.peak_reserved == peak.peak_reserved)
        std::cout << what << ": the same peaks\n";
      else
        std::cout << what << ": peak_allocated " << other.peak_allocated << " peak_reserved " << other.peak_reserved
                  << (other.out_of_memory ? " (out of memory)" : "") << " (PyTorch's run can give either)\n";
    };
    if (peak.placement_ties > 0) {
      std::cout << "placement_ties " << peak.placement_ties
                << " (requests best fit served from equal free blocks in different segments, by address: where "
                   "segments land)\n";
      outcome("with ties the other way", again(Ties::highest_address, Early::as_host_map));
    }
    if (peak.early_regions_decided) {
      std::cout << "early_regions (segments made before the first kernel launch, as .to()'s: the driver puts "
                   "them in holes of the host's address map above the first small segment or below the stretch "
                   "that launch frees)\n";
      const TrainingPeak other = again(Ties::lowest_address, Early::reversed);
      outcome("with them placed the other way", other);
      if (other.placement_ties > 0)
        outcome("with them placed the other way and ties the other way", again(Ties::highest_address, Early::reversed));
    }
  }
  if (card)
    std::cout << "card " << card->name << ": total " << card->total_bytes << " B, CUDA context and driver "
              << card->driver_bytes << " B, left for PyTorch " << human_bytes(card->usable_bytes()) << '\n';
  if (asks_fit) std::cout << "fits " << (peak.out_of_memory ? "no" : "yes") << '\n' << peak.explanation;
  if (max_batch)
    print_max_batch(gpt ? max_gpt_batch(t, limit, default_workspace) : max_mlp_batch(m, limit, default_workspace));
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
