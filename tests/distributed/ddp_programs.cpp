// DistributedDataParallel and ZeroRedundancyOptimizer against PyTorch 2.11 on two H100s with NCCL:
// tools/probes/ddp_probe.py's 14 programs (programs/ddp_programs.h), each recorded twice in fresh processes
// (tests/data/pytorch_probes/ddp_n2/<program>.n2.run<R>.rank<K>.json). Every rank's figures at every mark
// are held to that rank's recordings: where PyTorch's two runs agree, exactly; where they differ (a
// bucket whose all-reduce nobody waited for is released when NCCL's watchdog thread happens to notice it
// completed, and GPT-2's backward allocates two gradients of parallel branches in either order), equal
// to one of the two. Run on the threads backend (both ranks, sim and meta) and the fake backend (each rank
// alone).
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/history.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "programs/checks.h"
#include "programs/ddp_programs.h"
#include "programs/gpt2_programs.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;

namespace {

struct Mark {
  std::string label;
  std::map<std::string, int64_t> figures;
};
using Marks = std::vector<Mark>;

Marks recorded(const std::string& program, int run, int rank, int world = 2) {
  const json::Value doc = testing::probe_recording("ddp", program, world, run, rank);
  Marks out;
  for (const json::Value& m : doc["marks"].items) out.push_back({m["label"].string(), testing::recorded_figures(m)});
  return out;
}

Mark mark_now(const std::string& label, Device device) { return {label, testing::figures_now(device)}; }

// Every figure of every mark that differs.
struct Comparison {
  std::vector<std::string> differences;
};

Comparison compare(const Marks& ours, const Marks& want, const std::vector<std::string>& only_figures = {}) {
  Comparison c;
  if (ours.size() != want.size()) {
    c.differences.push_back(std::to_string(ours.size()) + " marks, the recording has " + std::to_string(want.size()));
    return c;
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    if (ours[i].label != want[i].label) {
      c.differences.push_back("mark " + std::to_string(i) + " is " + ours[i].label + ", recorded " + want[i].label);
      return c;
    }
    for (const auto& [name, key] : testing::probe_figure_keys()) {
      if (!only_figures.empty() && std::find(only_figures.begin(), only_figures.end(), name) == only_figures.end())
        continue;
      const int64_t got = ours[i].figures.at(name), a = want[i].figures.at(name);
      if (got != a)
        c.differences.push_back(ours[i].label + " " + name + ": got " + std::to_string(got) + ", want " +
                                std::to_string(a));
    }
  }
  return c;
}

using testing::DefaultWorkspaces;

using Timing = std::optional<int>;  // ProcessGroupOptions::unwaited_release_after

std::string timing_name(Timing t) {
  return t ? "released at the " + std::to_string(*t) + ". collective after completion" : "never released";
}

std::vector<Marks> run_on_threads(const std::string& program, DeviceType type, Timing timing, int world = 2) {
  DefaultWorkspaces workspaces;
  testing::FreshRankDevices fresh(world, type);
  std::vector<Marks> marks(static_cast<size_t>(world));
  ProcessGroupOptions options;
  options.unwaited_release_after = timing;
  run_ranks(
      world, type,
      [&](ProcessGroup& pg) {
        programs::run_ddp_program(
            program, pg, [&](const std::string& label) { marks[pg.rank()].push_back(mark_now(label, pg.device())); });
      },
      options);
  return marks;
}

using TieOrder = CachingAllocator::TieOrder;

Marks run_alone(const std::string& program, int rank, Timing timing, int world = 2,
                TieOrder ties = TieOrder::lowest_address) {
  DefaultWorkspaces workspaces;
  const Device device{DeviceType::meta, 0};
  testing::FreshDevice fresh(device, testing::small_card());
  caching_allocator(device).set_tie_order(ties);
  clear_blas_workspaces();
  ProcessGroupOptions options;
  options.unwaited_release_after = timing;
  auto pg = make_fake_process_group(rank, world, device, options);
  Marks marks;
  // BYTEGRAD_DDP_TRACE=<file>: writes this run's allocator trace, a line per entry: action, requested bytes,
  // stream, address and tag (tools/probes/ddp_placement.py reads it beside the recordings with addresses).
  const char* trace_file = std::getenv("BYTEGRAD_DDP_TRACE");
  if (trace_file) caching_allocator(device).record_history(true);
  programs::run_ddp_program(program, *pg, [&](const std::string& label) { marks.push_back(mark_now(label, device)); });
  if (trace_file) {
    std::ofstream out(std::string(trace_file) + "." + program + ".rank" + std::to_string(rank) +
                      (timing ? "." + std::to_string(*timing) : ".never"));
    for (const TraceEntry& e : caching_allocator(device).snapshot().trace)
      out << trace_action_name(e.action) << " " << e.size << " " << e.stream << " " << e.address << " " << e.tag
          << "\n";
    caching_allocator(device).record_history(false);
  }
  clear_blas_workspaces();
  return marks;
}

// The one freedom PyTorch's runs have: when NCCL's watchdog noticed the unwaited all-reduces complete.
const std::vector<Timing>& timings() {
  static const std::vector<Timing> all = {1, 2, 3, 4, 5, 6, std::nullopt};
  return all;
}

// Each rank of each recorded run must be reproduced mark for mark, every figure, by one watchdog timing
// (rank alone on the fake backend, meta); the threads backend (both ranks together, on meta and on sim
// where values are computed) must give the fake backend's figures under the first and last timings.
void check_program(const std::string& program, bool sim_too, const std::vector<std::string>& only_figures = {},
                   const std::vector<Timing>& timings_tried = timings(), int world = 2) {
  CAPTURE(program);
  std::map<std::pair<int, size_t>, Marks> cache;  // (rank, timing index), run when first needed
  auto alone = [&](int rank, size_t t) -> const Marks& {
    auto it = cache.find({rank, t});
    if (it == cache.end())
      it = cache.emplace(std::make_pair(rank, t), run_alone(program, rank, timings_tried[t], world)).first;
    return it->second;
  };
  for (int run = 0; run < 2; ++run)
    for (int rank = 0; rank < world; ++rank) {
      const Marks want = recorded(program, run, rank, world);
      std::string closest;
      size_t fewest = SIZE_MAX;
      bool reproduced = false;
      for (size_t t = 0; t < timings_tried.size() && !reproduced; ++t) {
        const Comparison c = compare(alone(rank, t), want, only_figures);
        if (c.differences.empty()) {
          reproduced = true;
          if (std::getenv("BYTEGRAD_DDP_VERBOSE"))
            std::cout << program << " run " << run << " rank " << rank << ": " << timing_name(timings_tried[t]) << "\n";
        } else if (c.differences.size() < fewest) {
          fewest = c.differences.size();
          closest = timing_name(timings_tried[t]) + ":";
          for (const std::string& d : c.differences) closest += "\n  " + d;
        }
      }
      CHECK_MESSAGE(reproduced, program << " run " << run << " rank " << rank
                                        << ": no watchdog timing reproduces it; the closest, " << closest);
    }
  for (DeviceType type : sim_too ? std::vector{DeviceType::sim, DeviceType::meta} : std::vector{DeviceType::meta})
    for (size_t t : {size_t{0}, timings_tried.size() - 1}) {
      const auto together = run_on_threads(program, type, timings_tried[t], world);
      for (int rank = 0; rank < world; ++rank) {
        const Comparison c = compare(together[rank], alone(rank, t));
        std::string all;
        for (const std::string& d : c.differences) all += "\n  " + d;
        CHECK_MESSAGE(c.differences.empty(), program << " rank " << rank << " on threads ("
                                                     << (type == DeviceType::sim ? "sim" : "meta") << ", "
                                                     << timing_name(timings_tried[t]) << ") differs from fake:" << all);
      }
    }
}

// Every figure of every mark of each recorded run and rank, held to bytegrad's two outcomes of placement
// ties: the run with ties to the lowest address and the one with ties to the highest (CachingAllocator::
// TieOrder), under the first watchdog timing that gives PyTorch's requested bytes and block counts at every
// mark. Up to the first mark where those two runs part, every figure must be one of theirs; from there on the
// layout of free blocks depends on which of equal free blocks in different segments best fit took, so the
// figures that depend on where blocks sit (allocated, active, inactive_split, reserved, segments and their
// peaks and counts) are placement-dependent there and reported, not held, while the bytes requested and the
// block counts stay exact. Prints, per run and rank, the mark where placement enters, how many figures from
// there on are still one of bytegrad's two, and the first that are not.
void check_every_figure(const std::string& program, const std::vector<Timing>& timings_tried, int world = 2) {
  CAPTURE(program);
  const std::vector<std::string> held = {"requested", "blocks"};
  for (int run = 0; run < 2; ++run)
    for (int rank = 0; rank < world; ++rank) {
      const Marks want = recorded(program, run, rank, world);
      std::optional<Timing> timing;
      Marks low;
      for (Timing t : timings_tried) {
        low = run_alone(program, rank, t, world, TieOrder::lowest_address);
        if (compare(low, want, held).differences.empty()) {
          timing = t;
          break;
        }
      }
      REQUIRE_MESSAGE(timing.has_value(), program << " run " << run << " rank " << rank
                                                  << ": no watchdog timing gives the requested bytes and blocks");
      const Marks high = run_alone(program, rank, *timing, world, TieOrder::highest_address);
      REQUIRE(low.size() == want.size());
      REQUIRE(high.size() == want.size());
      size_t parted = want.size();  // the first mark where the two tie orders give different figures
      for (size_t i = 0; i < want.size() && parted == want.size(); ++i)
        if (low[i].figures != high[i].figures) parted = i;
      int exact = 0, dependent = 0;
      std::vector<std::string> shown;
      for (size_t i = 0; i < want.size(); ++i)
        for (const auto& [name, key] : testing::probe_figure_keys()) {
          const int64_t w = want[i].figures.at(name), lo = low[i].figures.at(name), hi = high[i].figures.at(name);
          if (lo == w || hi == w) {
            ++exact;
            continue;
          }
          const std::string line = want[i].label + " " + name + ": PyTorch " + std::to_string(w) + ", bytegrad " +
                                   std::to_string(lo) + " or " + std::to_string(hi);
          const bool placement = std::find(held.begin(), held.end(), name) == held.end();
          CHECK_MESSAGE((i >= parted && placement), program << " run " << run << " rank " << rank
                                                            << ", a figure neither tie order gives: " << line);
          ++dependent;
          if (shown.size() < 3) shown.push_back(line);
        }
      std::string text = program + " run " + std::to_string(run) + " rank " + std::to_string(rank) + " (" +
                         timing_name(*timing) + "): placement ties part the two orders at " +
                         (parted < want.size() ? want[parted].label : std::string("no mark")) + "; " +
                         std::to_string(exact) + " figures one of bytegrad's two, " + std::to_string(dependent) +
                         " placement-dependent";
      for (const std::string& line : shown) text += "\n  " + line;
      MESSAGE(text);
    }
}

}  // namespace

TEST_CASE("DDP of an MLP as PyTorch on two H100s: default, bucket views, 1 MiB cap, unused, static, no_sync") {
  for (const char* program :
       {"mlp_ddp", "mlp_ddp_bucket_view", "mlp_ddp_cap1", "mlp_ddp_unused", "mlp_ddp_static", "mlp_ddp_no_sync"})
    check_program(program, true);
}

TEST_CASE("ZeroRedundancyOptimizer over an MLP as PyTorch on two H100s: each rank's partition of Adam's state") {
  check_program("mlp_zero1", true);
}

// parameters_as_bucket_view (recorded on two H200s with the same probe, torch 2.11.0+cu130, NCCL 2.28.9):
// the constructor's flat bucket per rank, the parameters re-pointed into it, one broadcast per rank after
// the step. nanoGPT tiny: every figure of every mark of both ranks and runs. The MLP: rank 0 exact; rank 1
// has PyTorch's sequence of allocations and frees to the last mark (all 233 events, sizes and order) and
// every figure but inactive_split, which from s1_backward on is 2 MiB higher here (75100160 against
// 73003008): one request is served from another free block than PyTorch's (the placement gap of issue 31),
// so the MLP is held on the other figures.
TEST_CASE("ZeroRedundancyOptimizer with parameters_as_bucket_view as PyTorch on two GPUs: MLP and nanoGPT tiny") {
  check_program("gpt2_tiny_zero1_bucket_view", true);
  check_program("mlp_zero1_bucket_view", true,
                {"allocated", "reserved", "max_allocated", "max_reserved", "active", "segments", "blocks", "requested",
                 "num_device_alloc", "num_device_free"});
}

TEST_CASE("DDP of nanoGPT tiny as PyTorch on two H100s, with and without bucket views") {
  for (const char* program : {"gpt2_tiny_ddp", "gpt2_tiny_ddp_bucket_view"}) check_program(program, true);
}

// tests/data/pytorch_probes/ddp_n4: the same probe with torchrun on four GPUs (the machine lent was four
// H200s; the allocator's rules and these programs' figures do not depend on the card). Four ranks on the
// threads backend on meta, and each alone on the fake backend.
TEST_CASE("DDP and ZeRO-1 on four GPUs: the MLP programs and nanoGPT tiny, every rank") {
  for (const char* program : {"mlp_ddp", "mlp_ddp_bucket_view", "mlp_ddp_cap1", "mlp_ddp_unused", "mlp_ddp_static",
                              "mlp_ddp_no_sync", "mlp_zero1", "gpt2_tiny_ddp", "gpt2_tiny_ddp_bucket_view"})
    check_program(program, false, {}, timings(), 4);
}

namespace {

// Runs the DDP programs as `world` ranks on `world` GPUs with NCCL and compares each rank with the fake
// backend's figures under every watchdog timing.
void check_programs_on_cuda(int world) {
  CAPTURE(world);
  for (const char* program :
       {"mlp_ddp", "mlp_ddp_bucket_view", "mlp_ddp_cap1", "mlp_ddp_unused", "mlp_ddp_static", "mlp_ddp_no_sync",
        "mlp_zero1", "gpt2_tiny_ddp", "gpt2_tiny_ddp_bucket_view", "gpt2_small_ddp_bucket_view"}) {
    CAPTURE(program);
    std::vector<Marks> on_cuda(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) programs::fresh_process_state(Device{DeviceType::cuda, r});  // as a new process
    {
      DefaultWorkspaces workspaces;
      run_ranks(world, DeviceType::cuda, [&](ProcessGroup& pg) {
        programs::run_ddp_program(program, pg, [&](const std::string& label) {
          on_cuda[static_cast<size_t>(pg.rank())].push_back(mark_now(label, pg.device()));
        });
      });
    }
    for (int rank = 0; rank < world; ++rank) {
      bool reproduced = false;
      std::string closest;
      for (Timing t : timings()) {
        const Comparison c = compare(on_cuda[static_cast<size_t>(rank)], run_alone(program, rank, t, world));
        if (c.differences.empty()) {
          reproduced = true;
          MESSAGE(program << " rank " << rank << " on cuda: " << timing_name(t));
          break;
        }
        if (closest.empty())
          for (const std::string& d : c.differences) closest += "\n  " + d;
      }
      CHECK_MESSAGE(reproduced,
                    program << " rank " << rank << " on cuda matches no timing; against the first:" << closest);
    }
  }
}

}  // namespace

// On two GPUs with NCCL (ctest distributed_programs_cuda, label multigpu), and on four where the machine has
// them: each rank's figures equal the fake backend's under one watchdog timing, and so PyTorch's recordings
// wherever those are reproduced.
TEST_CASE("DDP and ZeRO-1 programs on two GPUs (and four) with NCCL give the figures of one watchdog timing") {
  if (cuda_device_count() < 2) {
    MESSAGE("skipped: needs 2 GPUs, found " << cuda_device_count());
    return;
  }
  for (const int world : {2, 4}) {
    if (cuda_device_count() < world) {
      MESSAGE("not run on " << world << " GPUs: found " << cuda_device_count());
      continue;
    }
    check_programs_on_cuda(world);
  }
}

TEST_CASE("debug: one GPT-2 small program alone" * doctest::skip()) {
  const char* program = std::getenv("BYTEGRAD_DDP_PROGRAM");
  REQUIRE(program != nullptr);
  run_alone(program, 0, 1);
}

// GPT-2 small with bucket views is exact at every mark. Without them (per-parameter gradients beside the
// buckets, and ZeRO-1 which uses DDP the same way) the bytes requested and the block counts are PyTorch's at
// every mark, but from the first backward on one request is served by a different free block (kept whole
// where PyTorch splits one), as in the single-GPU programs issue 31 tracks: PyTorch's own two runs place
// these differently too (their inactive_split differs from the first backward). Every other figure is held by
// check_every_figure: exact through s0_forward, and from s0_backward on, where bytegrad's two tie orders part,
// reported as placement-dependent (neither order gives PyTorch's s0_backward inactive_split, 814013952 in one
// run and 826596864 in the other). PyTorch's recordings with addresses (docs/evidence/ddp_addresses/, read by
// tools/probes/ddp_placement.py) show why: PyTorch breaks every tie by its segments' addresses, and where one
// 32 MiB pair of forward segments lands depends on the host's address map. With the NCCL communicator's layout
// in the model, the processes whose host left that pair no slot are exact (the next test case); the others
// are held here. Slow (ctest label `slow`).
TEST_CASE("DDP and ZeRO-1 of GPT-2 small (124M) as PyTorch on two H100s, on meta") {
  check_program("gpt2_small_ddp_bucket_view", false);
  check_program("gpt2_small_ddp_bucket_view", false, {}, timings(), 4);  // and on four
  // ZeRO-1's step issues one broadcast per parameter (149 here): the watchdog can look many collectives later.
  std::vector<Timing> many;
  for (int k = 1; k <= 400; ++k) many.push_back(k);
  many.push_back(std::nullopt);
  for (const char* program : {"gpt2_small_ddp", "gpt2_small_zero1"}) {
    check_program(program, false, {"requested", "blocks"}, many);
    check_every_figure(program, many);
    // Four H200s (session 27): PyTorch bistable as on two (s0_backward inactive_split 814013952 in 10 of the
    // 16 processes, 826596864 in 6); requested bytes and blocks exact on every rank.
    check_program(program, false, {"requested", "blocks"}, many, 4);
  }
}

// The processes among those recordings whose host map left no free 32 MiB slot above the ranges DDP's
// construction leaves (docs/evidence/ddp_addresses/, session 26; their s0_backward inactive_split is
// 826596864), on two GPUs and on four (the same layout: NCCL's communicator leaves the same ranges): bytegrad's
// placement model, with the NCCL communicator's layout (kNcclCommunicator), gives every figure at every mark of each,
// on its rank alone under one watchdog timing. In the others a forward segment pair takes such a slot, which the model
// cannot know.
TEST_CASE("GPT-2 small without bucket views and ZeRO-1: every figure where the host left no slot") {
  std::vector<Timing> many;
  for (int k = 1; k <= 400; ++k) many.push_back(k);
  many.push_back(std::nullopt);
  struct Process {
    const char* program;
    int run, rank, world = 2;
  };
  for (const Process& p :
       {Process{"gpt2_small_ddp", 1, 0}, Process{"gpt2_small_ddp", 1, 1}, Process{"gpt2_small_zero1", 0, 0},
        Process{"gpt2_small_zero1", 1, 0}, Process{"gpt2_small_zero1", 1, 1},
        // on four H200s (ddp_n4/, session 27): 6 of the 16 processes
        Process{"gpt2_small_ddp", 1, 0, 4}, Process{"gpt2_small_ddp", 1, 3, 4}, Process{"gpt2_small_zero1", 0, 2, 4},
        Process{"gpt2_small_zero1", 0, 3, 4}, Process{"gpt2_small_zero1", 1, 0, 4},
        Process{"gpt2_small_zero1", 1, 3, 4}}) {
    const std::string program = p.program;
    CAPTURE(program);
    CAPTURE(p.run);
    CAPTURE(p.rank);
    CAPTURE(p.world);
    const Marks want = recorded(program, p.run, p.rank, p.world);
    std::string closest;
    size_t fewest = SIZE_MAX;
    bool reproduced = false;
    for (Timing t : many) {
      const Marks ours = run_alone(program, p.rank, t, p.world);
      if (!compare(ours, want, {"requested", "blocks"}).differences.empty()) continue;  // not this timing
      const Comparison c = compare(ours, want);
      if (c.differences.empty()) {
        reproduced = true;
        break;
      }
      if (c.differences.size() < fewest) {
        fewest = c.differences.size();
        closest = timing_name(t) + ":";
        for (const std::string& d : c.differences) closest += "\n  " + d;
      }
    }
    CHECK_MESSAGE(reproduced, "no watchdog timing gives every figure; the closest, " << closest);
  }
}

// bytegrad-estimate --ddp 2 (programs::estimate_gpt_training with data_parallel): nanoGPT's loop as one rank
// of two on the fake backend, on meta. Through the first step (before the rebuild, where the watchdog's
// timing enters) its marks are the recordings': every figure with bucket views; with ZeRO-1 the requested
// bytes and block counts (the placement gap above), for rank 0 and rank 1, whose optimizer state differs.
TEST_CASE("bytegrad-estimate --ddp 2: the first step's figures are PyTorch's, per rank under ZeRO-1") {
  struct Case {
    const char* recording;
    bool zero1;
    int rank;
    std::vector<std::string> figures;  // empty: all
  };
  for (const Case& c :
       {Case{"gpt2_small_ddp_bucket_view", false, 0, {}}, Case{"gpt2_small_zero1", true, 0, {"requested", "blocks"}},
        Case{"gpt2_small_zero1", true, 1, {"requested", "blocks"}}}) {
    CAPTURE(c.recording);
    CAPTURE(c.rank);
    programs::GPTTraining t{.config = programs::gpt2_small_config(), .batch = 4, .seq = 256};
    t.data_parallel = programs::GPTDataParallel{};
    t.data_parallel->rank = c.rank;
    t.data_parallel->ddp.gradient_as_bucket_view = !c.zero1;
    t.data_parallel->zero1 = c.zero1;
    programs::ScenarioRecorder marks("estimate", Device{DeviceType::meta, 0});
    programs::estimate_gpt_training(t, /*default_workspace=*/true, 0, &marks);
    const Marks want = recorded(c.recording, 0, c.rank);
    int compared = 0;
    for (const programs::GoldenStep& got : marks.steps()) {
      if (got.label.rfind("s1_", 0) == 0) break;
      const auto it = std::find_if(want.begin(), want.end(), [&](const Mark& m) { return m.label == got.label; });
      REQUIRE_MESSAGE(it != want.end(), "no recorded mark " << got.label);
      for (const programs::StepField& f : programs::golden_step_fields()) {
        if (!c.figures.empty() && std::find(c.figures.begin(), c.figures.end(), f.name) == c.figures.end()) continue;
        CHECK_MESSAGE(got.*f.member == it->figures.at(f.name), got.label << " " << f.name);
        ++compared;
      }
    }
    CHECK(compared >= 6);  // model, data and the four s0 marks
  }
}
