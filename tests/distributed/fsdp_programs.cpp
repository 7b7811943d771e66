// FSDP2 (fully_shard) against PyTorch 2.11 on two H200s with NCCL: tools/probes/fsdp_probe.py's programs
// (programs/fsdp_programs.h), recorded once each (tests/data/pytorch_probes/fsdp_n2/<program>.n2.run0.rank<K>
// .json). Every rank alone on the fake backend (meta) is held to its recording: every figure of every mark,
// each side stream's reserved and allocated bytes, and the allocator trace entry by entry. The threads
// backend (both ranks together, on sim where values are computed) must give the fake backend's figures.
// Programs not yet exact are run too and their first difference reported (expected failures).
#include <doctest/doctest.h>

#include <algorithm>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/history.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/outside_allocator.h"
#include "bytegrad/nn/clip_grad.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "programs/checks.h"
#include "programs/fsdp_programs.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;

namespace {

struct Mark {
  std::string label;
  std::map<std::string, int64_t> figures;
  std::map<int, std::pair<int64_t, int64_t>> streams;  // stream ordinal: (reserved, allocated)
};
struct TraceRow {
  std::string action;
  int64_t size = 0;
  int stream = 0;
  bool operator==(const TraceRow&) const = default;
};
struct Run {
  std::vector<Mark> marks;
  std::vector<TraceRow> trace;
};

std::string row_str(const TraceRow& r) {
  return r.action + " " + std::to_string(r.size) + " (stream " + std::to_string(r.stream) + ")";
}

Run recorded(const std::string& program, int rank, int world = 2, int run = 0) {
  const json::Value doc = testing::probe_recording("fsdp", program, world, run, rank);
  Run out;
  for (const json::Value& m : doc["marks"].items) {
    Mark mark{m["label"].string(), testing::recorded_figures(m), {}};
    for (const auto& [ordinal, pair] : m["streams"].members)
      mark.streams[std::stoi(ordinal)] = {pair.items.at(0).integer(), pair.items.at(1).integer()};
    out.marks.push_back(std::move(mark));
  }
  for (const json::Value& e : doc["trace"].items)
    out.trace.push_back({e.items.at(0).string(), e.items.at(1).integer(), static_cast<int>(e.items.at(2).integer())});
  return out;
}

// Streams numbered as the probe numbers them: 0 the default stream, the others by first appearance among
// the segments at a mark, then in the trace.
class StreamOrdinals {
 public:
  int of(StreamId id) {
    auto it = ordinals_.find(id);
    if (it != ordinals_.end()) return it->second;
    const int next = static_cast<int>(ordinals_.size());
    ordinals_[id] = next;
    return next;
  }

 private:
  std::map<StreamId, int> ordinals_{{0, 0}};
};

Mark mark_now(const std::string& label, Device device, StreamOrdinals& ordinals) {
  Mark m{label, testing::figures_now(device), {}};
  for (const SegmentInfo& s : caching_allocator(device).snapshot().segments) {
    auto& entry = m.streams[ordinals.of(s.stream)];
    entry.first += static_cast<int64_t>(s.total_size);
    entry.second += static_cast<int64_t>(s.allocated_size);
  }
  return m;
}

// The probe's trace keeps PyTorch's actions only.
std::vector<TraceRow> trace_now(Device device, StreamOrdinals& ordinals) {
  static const std::set<std::string> pytorch_actions = {
      "alloc",        "free_requested", "free_completed", "segment_alloc",
      "segment_free", "segment_map",    "segment_unmap",  "oom"};
  std::vector<TraceRow> rows;
  for (const TraceEntry& e : caching_allocator(device).snapshot().trace) {
    const std::string action(trace_action_name(e.action));
    if (pytorch_actions.count(action)) rows.push_back({action, static_cast<int64_t>(e.size), ordinals.of(e.stream)});
  }
  return rows;
}

// Every difference of figures and per-stream figures, and the first differing trace entry.
std::vector<std::string> compare(const Run& ours, const Run& want, bool with_trace = true) {
  std::vector<std::string> d;
  if (ours.marks.size() != want.marks.size())
    d.push_back(std::to_string(ours.marks.size()) + " marks, the recording has " + std::to_string(want.marks.size()));
  for (size_t i = 0; i < std::min(ours.marks.size(), want.marks.size()); ++i) {
    const Mark &a = ours.marks[i], &b = want.marks[i];
    if (a.label != b.label) {
      d.push_back("mark " + std::to_string(i) + " is " + a.label + ", recorded " + b.label);
      break;
    }
    for (const auto& [name, key] : testing::probe_figure_keys())
      if (a.figures.at(name) != b.figures.at(name))
        d.push_back(a.label + " " + name + ": got " + std::to_string(a.figures.at(name)) + ", want " +
                    std::to_string(b.figures.at(name)));
    if (a.streams != b.streams) {
      std::string s = a.label + " per stream: got";
      for (const auto& [k, v] : a.streams)
        s += " " + std::to_string(k) + ":[" + std::to_string(v.first) + ", " + std::to_string(v.second) + "]";
      s += ", want";
      for (const auto& [k, v] : b.streams)
        s += " " + std::to_string(k) + ":[" + std::to_string(v.first) + ", " + std::to_string(v.second) + "]";
      d.push_back(s);
    }
  }
  if (with_trace) {
    const size_t n = std::min(ours.trace.size(), want.trace.size());
    size_t i = 0;
    while (i < n && ours.trace[i] == want.trace[i]) ++i;
    if (i < n)
      d.push_back("trace entry " + std::to_string(i) + ": got " + row_str(ours.trace[i]) + ", recorded " +
                  row_str(want.trace[i]));
    else if (ours.trace.size() != want.trace.size())
      d.push_back("trace: " + std::to_string(ours.trace.size()) + " entries, recorded " +
                  std::to_string(want.trace.size()));
  }
  return d;
}

std::string joined(const std::vector<std::string>& lines, size_t most = 12) {
  std::string s;
  for (size_t i = 0; i < lines.size() && i < most; ++i) s += "\n  " + lines[i];
  if (lines.size() > most) s += "\n  ... " + std::to_string(lines.size() - most) + " more";
  return s;
}

using testing::DefaultWorkspaces;

using TieOrder = CachingAllocator::TieOrder;

Run run_alone(const std::string& program, int rank, int world = 2, TieOrder ties = TieOrder::lowest_address) {
  DefaultWorkspaces workspaces;
  const Device device{DeviceType::meta, 0};
  testing::FreshDevice fresh(device, testing::small_card());
  caching_allocator(device).set_tie_order(ties);
  clear_blas_workspaces();
  auto pg = make_fake_process_group(rank, world, device);
  Run run;
  StreamOrdinals ordinals;
  caching_allocator(device).record_history(true);
  programs::run_fsdp_program(
      program, *pg, [&](const std::string& label) { run.marks.push_back(mark_now(label, device, ordinals)); },
      [&] {
        run.trace = trace_now(device, ordinals);
        // BYTEGRAD_FSDP_TRACE=<prefix>: writes this run's trace as <prefix>.<program>.rank<R>, one entry a
        // line with the modelled address last (as the probe's recordings with addresses have it).
        if (const char* prefix = std::getenv("BYTEGRAD_FSDP_TRACE")) {
          std::ofstream out(std::string(prefix) + "." + program + ".rank" + std::to_string(rank));
          for (const TraceEntry& e : caching_allocator(device).snapshot().trace) {
            const std::string action(trace_action_name(e.action));
            if (action == "alloc" || action.starts_with("free_") || action.starts_with("segment_"))
              out << action << " " << e.size << " " << ordinals.of(e.stream) << " " << e.address << "\n";
          }
        }
      });
  caching_allocator(device).record_history(false);
  clear_blas_workspaces();
  return run;
}

// On cuda the GPUs' allocators start afresh as in a new process (fresh_process_state), not on a small card.
std::vector<Run> run_on_threads(const std::string& program, DeviceType type, int world = 2) {
  DefaultWorkspaces workspaces;
  std::optional<testing::FreshRankDevices> fresh;
  if (type == DeviceType::cuda)
    for (int r = 0; r < world; ++r) programs::fresh_process_state(Device{DeviceType::cuda, r});
  else fresh.emplace(world, type);
  std::vector<Run> runs(static_cast<size_t>(world));
  std::vector<StreamOrdinals> ordinals(static_cast<size_t>(world));
  run_ranks(world, type, [&](ProcessGroup& pg) {
    const auto r = static_cast<size_t>(pg.rank());
    caching_allocator(pg.device()).record_history(true);
    programs::run_fsdp_program(
        program, pg,
        [&](const std::string& label) { runs[r].marks.push_back(mark_now(label, pg.device(), ordinals[r])); },
        [&] { runs[r].trace = trace_now(pg.device(), ordinals[r]); });
    caching_allocator(pg.device()).record_history(false);
  });
  return runs;
}

// The programs every rank of which is exact, and those that are not yet, with what is missing.
const std::vector<std::string>& exact_programs() {
  static const std::vector<std::string> names = {"mlp_fsdp",
                                                 "mlp_fsdp_no_reshard",
                                                 "mlp_fsdp_mixed",
                                                 "mlp_fsdp_uneven",
                                                 "mlp_fsdp_meta",
                                                 "mlp_fsdp_reshard_int",
                                                 "gpt2_tiny_fsdp",
                                                 "gpt2_tiny_fsdp_no_reshard",
                                                 "gpt2_tiny_fsdp_mixed",
                                                 "gpt2_tiny_fsdp_clip",
                                                 "gpt2_tiny_fsdp_checkpoint"};
  return names;
}
const std::vector<std::pair<std::string, std::string>>& programs_not_yet_exact() {
  static const std::vector<std::pair<std::string, std::string>> names = {};
  return names;
}

}  // namespace

TEST_CASE("FSDP2 programs exact against PyTorch on two H200s: every mark, every stream, the trace, per rank") {
  for (const std::string& program : exact_programs())
    for (int rank = 0; rank < 2; ++rank) {
      CAPTURE(program);
      CAPTURE(rank);
      const auto d = compare(run_alone(program, rank), recorded(program, rank));
      CHECK_MESSAGE(d.empty(), program << " rank " << rank << " differs from PyTorch:" << joined(d));
    }
}

namespace {

// The trace with each run of consecutive frees (free_requested, free_completed pairs) in one order: where
// PyTorch frees a set of blocks in an order no recording pins (the autocast cache's casts at the region's end,
// freed in its hash map's order of host pointers: rank 0 and rank 1 of one PyTorch run differ), the set is
// what can be held to.
std::vector<TraceRow> frees_as_sets(std::vector<TraceRow> trace) {
  auto is_free = [&](size_t i) { return trace[i].action.starts_with("free_"); };
  for (size_t i = 0; i < trace.size();) {
    size_t end = i;
    while (end < trace.size() && is_free(end)) ++end;
    std::vector<std::pair<TraceRow, TraceRow>> pairs;
    bool paired = (end - i) % 2 == 0;
    for (size_t k = i; paired && k < end; k += 2) {
      paired = trace[k].action == "free_requested" && trace[k + 1].action == "free_completed" &&
               trace[k].size == trace[k + 1].size;
      pairs.push_back({trace[k], trace[k + 1]});
    }
    if (paired && pairs.size() > 1) {
      std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
        return std::pair(a.first.stream, a.first.size) < std::pair(b.first.stream, b.first.size);
      });
      for (size_t k = 0; k < pairs.size(); ++k) {
        trace[i + 2 * k] = pairs[k].first;
        trace[i + 2 * k + 1] = pairs[k].second;
      }
    }
    i = end == i ? i + 1 : end;
  }
  return trace;
}

}  // namespace

// nanoGPT tiny with its forward and loss under bf16 autocast: every mark and stream exact on every rank; in
// the trace the casts the autocast cache frees at the region's end go in PyTorch's hash order, which differs
// between its own ranks and runs (tests/data/pytorch_probes/fsdp_n2/gpt2_tiny_fsdp_amp.*: rank 0 frees a
// 128-byte cast first where rank 1 frees a 384-byte one; fsdp_n4's two runs differ so too), so there the
// trace is held as sets of frees. Two ranks (H200s, once) and four (H200s, twice).
TEST_CASE("FSDP2 under bf16 autocast: every mark and stream exact, the trace up to the autocast cache's order") {
  for (const auto& [world, runs] : {std::pair{2, 1}, std::pair{4, 2}})
    for (int rank = 0; rank < world; ++rank) {
      Run ours = run_alone("gpt2_tiny_fsdp_amp", rank, world);
      ours.trace = frees_as_sets(ours.trace);
      for (int run = 0; run < runs; ++run) {
        CAPTURE(world);
        CAPTURE(rank);
        CAPTURE(run);
        Run want = recorded("gpt2_tiny_fsdp_amp", rank, world, run);
        const auto marks = compare(ours, want, /*with_trace=*/false);
        CHECK_MESSAGE(marks.empty(), "rank " << rank << " of " << world << joined(marks));
        want.trace = frees_as_sets(want.trace);
        const auto d = compare(ours, want);
        CHECK_MESSAGE(d.empty(), "rank " << rank << " of " << world << " differs from PyTorch:" << joined(d));
      }
    }
}

// tests/data/pytorch_probes/fsdp_n4: the same probe with torchrun on four H200s, twice (sessions 24 and 35).
// Each of the four ranks alone on the fake backend, every figure, stream and trace entry. In the MLP programs
// one tie of placement decides `inactive_split` up to the first backward: fc1's 4 MiB weight shard opens a
// 20 MiB segment whose free 16 MiB rest ties with fc1's freed 16 MiB segment for fc2's 16 MiB shard, and best
// fit takes the lower address. PyTorch's 20 MiB segment sits above (T + 104 MiB, in every run and rank of the
// second recording, which has addresses): by then `.to()` has freed fc1's and fc2's CPU weights (80 MiB),
// whose hole above the regions takes the new region (memory/virtual_address_space.h); so does the model's.
TEST_CASE("FSDP2 programs exact against PyTorch on four H200s: every rank, both recorded runs") {
  for (const std::string& program : exact_programs())
    for (int rank = 0; rank < 4; ++rank) {
      const Run ours = run_alone(program, rank, 4);
      for (int run = 0; run < 2; ++run) {
        CAPTURE(program);
        CAPTURE(rank);
        CAPTURE(run);
        const auto d = compare(ours, recorded(program, rank, 4, run));
        CHECK_MESSAGE(d.empty(),
                      program << " rank " << rank << " of 4, run " << run << ", differs from PyTorch:" << joined(d));
      }
    }
}

TEST_CASE("FSDP2 programs not yet exact (expected failures): each still differs, first difference shown") {
  for (const auto& [program, missing] : programs_not_yet_exact())
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<std::string> d;
      try {
        d = compare(run_alone(program, rank), recorded(program, rank));
      } catch (const std::exception& e) {
        d.push_back(std::string("throws: ") + e.what());
      }
      MESSAGE("expected failure: " << program << " rank " << rank << " (" << missing << "):" << joined(d, 4));
      CHECK_MESSAGE(!d.empty(), program << " rank " << rank << " is now exact: move it to exact_programs()");
    }
}

// GPT-2 small (124M; label slow), recorded three times in fresh processes on two ranks, twice on four.
// PyTorch's own runs disagree at `sharded` and after, by 262144 to 1441792 bytes of `allocated` with the
// same block count and the same trace of sizes: the same requests served by blocks split differently, i.e.
// which of two equal free blocks best fit took (placement by address, issue 31). Reported here: which of
// PyTorch's runs each rank equals under each of the allocator's tie orders; held: on four ranks each rank
// equals one of the two runs, and rank 1 of two one of the three.
TEST_CASE("FSDP2 of GPT-2 small as PyTorch on two and four H200s, under either tie order (slow)") {
  struct Case {
    std::string program;
    int world, runs;
  };
  int equal = 0, ranks = 0;
  for (const Case& c : {Case{"gpt2_small_fsdp", 2, 3}, Case{"gpt2_small_fsdp_mixed", 2, 3},
                        Case{"gpt2_small_fsdp", 4, 2}, Case{"gpt2_small_fsdp_mixed", 4, 2}})
    for (int rank = 0; rank < c.world; ++rank) {
      std::string found;
      std::vector<std::string> first;
      for (TieOrder ties : {TieOrder::lowest_address, TieOrder::highest_address}) {
        const Run ours = run_alone(c.program, rank, c.world, ties);
        for (int run = 0; run < c.runs; ++run) {
          auto d = compare(ours, recorded(c.program, rank, c.world, run));
          if (d.empty())
            found += std::string(found.empty() ? "" : ", ") + "run " + std::to_string(run) + " with ties to the " +
                     (ties == TieOrder::lowest_address ? "lowest" : "highest") + " address";
          else if (first.empty()) first = std::move(d);
        }
      }
      ++ranks;
      if (!found.empty()) ++equal;
      // Four ranks, two recorded runs: every rank's figures are one of PyTorch's (sessions 24 and 35).
      if (c.world == 4)
        CHECK_MESSAGE(!found.empty(), c.program << " rank " << rank << " of 4 equals none of PyTorch's runs");
      MESSAGE(c.program << " rank " << rank << " of " << c.world << ": "
                        << (found.empty() ? "none of PyTorch's runs; first:" + joined(first, 4) : "equals " + found));
    }
  MESSAGE(equal << " of " << ranks << " ranks equal one of PyTorch's runs");
  // Rank 1 of two, as before the tie orders existed: a regression guard.
  const Run rank1 = run_alone("gpt2_small_fsdp", 1);
  bool rank1_equal = false;
  for (int run = 0; run < 3; ++run)
    rank1_equal = rank1_equal || compare(rank1, recorded("gpt2_small_fsdp", 1, 2, run)).empty();
  CHECK(rank1_equal);
}

TEST_CASE("FSDP2 on the threads backend gives the fake backend's figures and trace, on sim and meta") {
  for (const std::string& program : exact_programs())
    for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
      const auto together = run_on_threads(program, type);
      for (int rank = 0; rank < 2; ++rank) {
        const auto d = compare(together[static_cast<size_t>(rank)], run_alone(program, rank));
        CHECK_MESSAGE(d.empty(), program << " rank " << rank << " on threads ("
                                         << (type == DeviceType::sim ? "sim" : "meta")
                                         << ") differs from fake:" << joined(d));
      }
    }
}

// reshard_after_forward=2 of 4 (mlp_fsdp_reshard_int): after forward each rank keeps half of each unsharded
// parameter and backward all-gathers it from its pair of ranks ({0, 1} or {2, 3}, subgroups of the group).
// The four ranks together on the threads backend, on sim and on meta, give the fake backend's figures rank
// by rank (which the test above holds to PyTorch's four-H200 recording).
TEST_CASE("FSDP2 resharding to pairs of four ranks on the threads backend gives the fake backend's figures") {
  const std::string program = "mlp_fsdp_reshard_int";
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    const auto together = run_on_threads(program, type, 4);
    for (int rank = 0; rank < 4; ++rank) {
      const auto d = compare(together[static_cast<size_t>(rank)], run_alone(program, rank, 4));
      CHECK_MESSAGE(d.empty(), program << " rank " << rank << " of 4 on threads ("
                                       << (type == DeviceType::sim ? "sim" : "meta")
                                       << ") differs from fake:" << joined(d));
    }
  }
}

namespace {

// What a run holds outside the allocator at each mark: on the fake backend the model's NCCL figures (every
// group on the device, subgroups included), in a recording cudaMemGetInfo's drop since `start` less the
// allocator's reserved bytes (NCCL, the CUDA context's lazily loaded modules, cuBLAS's handles).
std::map<std::string, int64_t> modelled_outside_by_mark(const std::string& program, int rank, int world) {
  const Device device{DeviceType::meta, 0};
  testing::FreshDevice fresh(device, testing::small_card());
  clear_blas_workspaces();
  auto pg = make_fake_process_group(rank, world, device);
  std::map<std::string, int64_t> out;
  programs::run_fsdp_program(
      program, *pg,
      [&](const std::string& label) {
        int64_t bytes = 0;
        if (const auto figures = outside_allocator_figures(device))
          for (const OutsideAllocatorPart& part : figures->parts) bytes += part.bytes;
        out[label] = bytes;
      },
      [] {});
  clear_blas_workspaces();
  return out;
}

std::map<std::string, int64_t> recorded_outside_by_mark(const std::string& program, int rank, int world) {
  const json::Value doc = testing::probe_recording("fsdp", program, world, 0, rank);
  std::map<std::string, int64_t> out;
  const int64_t start = doc["marks"].items.at(0)["device_free"].integer();
  for (const json::Value& m : doc["marks"].items)
    out[m["label"].string()] = start - m["device_free"].integer() - m["reserved"].integer();
  return out;
}

}  // namespace

// reshard_after_forward=2 of 4: each fully_shard call makes its own post-forward subgroup (PyTorch's
// DeviceMesh per call), so the MLP's three Linears are three communicators of two ranks, each made at its
// module's first all-gather in backward with its ring's buffers. Against mlp_fsdp (the same program with
// the default reshard) the recording holds 1524629504 B more outside the allocator from s0_backward on, on
// every rank; the model gives 3 * (205520896 + 301989888) = 1522532352 B, 2 MiB (one of NCCL's 2 MiB
// pages) less: tools/probes/nccl_outside_probe.py saw 484 MiB for one new pair and 486 for another.
TEST_CASE("FSDP2 reshard to pairs of four: each module's subgroup communicator outside the allocator") {
  constexpr int64_t kPerCommunicator = kModelledNcclCommunicatorBytes + kModelledNcclRingBytes;
  constexpr int64_t kNcclPage = 2 * 1024 * 1024;
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    const auto pairs = modelled_outside_by_mark("mlp_fsdp_reshard_int", rank, 4);
    const auto whole = modelled_outside_by_mark("mlp_fsdp", rank, 4);
    const auto pairs_recorded = recorded_outside_by_mark("mlp_fsdp_reshard_int", rank, 4);
    const auto whole_recorded = recorded_outside_by_mark("mlp_fsdp", rank, 4);
    CHECK(pairs.at("s0_forward") == whole.at("s0_forward"));  // no subgroup used yet
    CHECK(pairs_recorded.at("s0_forward") == whole_recorded.at("s0_forward"));
    for (const std::string label : {"s0_backward", "s2_zero_grad"}) {
      CAPTURE(label);
      const int64_t modelled = pairs.at(label) - whole.at(label);
      CHECK(modelled == 3 * kPerCommunicator);
      const int64_t measured = pairs_recorded.at(label) - whole_recorded.at(label);
      CHECK(measured == 1524629504);
      CHECK(measured - modelled <= kNcclPage);
      CHECK(measured >= modelled);
    }
  }
}

namespace {

// 8 -> 7 -> 5: first dimensions two ranks split unevenly (4 + 3 rows, 3 + 2 rows).
class SmallNet : public nn::Module {
 public:
  SmallNet() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 7, kCpu));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(7, 5, kCpu));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*fc1)(x));
    return (*fc2)(h);
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

struct TrainingData {
  TensorDict initial;
  Tensor x, y;  // the whole batch (8 rows), on the CPU
};

TrainingData training_data() {
  manual_seed(11);
  SmallNet net;
  TrainingData d;
  for (const auto& [name, t] : net.state_dict()) d.initial.insert_or_assign(name, t.clone());
  d.x = randn({8, 8}, TensorOptions{}.with_device(kCpu));
  d.y = randint(0, 5, {8}, TensorOptions{ScalarType::int64, kCpu});
  return d;
}

// Three Adam steps on rows [begin, begin + count); with a group, under fully_shard (each Linear, then the
// root); with max_norm, the gradients clipped to it before each step. Returns each parameter's values this
// rank holds (its shard's rows under FSDP).
std::vector<std::vector<double>> train_small(const TrainingData& d, Device device, ProcessGroup* pg, int64_t begin,
                                             int64_t count, std::optional<double> max_norm = std::nullopt,
                                             const FullyShardOptions& options = {}) {
  auto net = std::make_shared<SmallNet>();
  net->load_state_dict(d.initial);
  net->to(device);
  if (pg) {
    fully_shard(net->fc1, *pg, options);
    fully_shard(net->fc2, *pg, options);
    fully_shard(net, *pg, options);
  }
  optim::Adam opt(net->parameters(), optim::AdamOptions{.lr = 0.01});
  const Tensor x = d.x.narrow(0, begin, count).to(device);
  const Tensor y = d.y.narrow(0, begin, count).to(device);
  for (int step = 0; step < 3; ++step) {
    cross_entropy((*net)(x), y).backward();
    if (max_norm) (void)nn::utils::clip_grad_norm_(net->parameters(), *max_norm);
    opt.step();
    opt.zero_grad();
  }
  return testing::parameter_values(net->parameters());
}

// Whether two FSDP ranks on half batches end with the rows of one rank's parameters trained on the whole
// batch (the largest difference of any value); with max_norm, both clip their gradients to it first.
double fsdp_versus_one_rank(std::optional<double> max_norm, DeviceType type = DeviceType::sim) {
  const TrainingData d = training_data();
  std::vector<std::vector<double>> whole;
  if (type == DeviceType::cuda) {  // the GPUs as they are (their allocators are not swapped for a small card)
    whole = train_small(d, Device{type, 0}, nullptr, 0, 8, max_norm);
  } else {
    testing::FreshDevice one(Device{type, 0}, testing::small_card());
    whole = train_small(d, Device{type, 0}, nullptr, 0, 8, max_norm);
  }
  std::optional<testing::FreshRankDevices> fresh;
  if (type != DeviceType::cuda) fresh.emplace(2, type);
  std::vector<std::vector<std::vector<double>>> ranks(2);
  run_ranks(2, type, [&](ProcessGroup& pg) {
    ranks[static_cast<size_t>(pg.rank())] = train_small(d, pg.device(), &pg, pg.rank() * 4, 4, max_norm);
  });
  // Parameters in order fc1.weight (7 x 8), fc1.bias (7), fc2.weight (5 x 7), fc2.bias (5): rank r holds rows
  // [r * ceil(d0 / 2), ...) of each.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{7, 8}, {7, 1}, {5, 7}, {5, 1}};
  double worst = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [rows, row] = shapes[i];
    for (int r = 0; r < 2; ++r) {
      const int64_t first = r * fsdp_padded_rows(rows, 2), local = fsdp_local_rows(rows, 2, r);
      const auto& mine = ranks[static_cast<size_t>(r)][i];
      REQUIRE(static_cast<int64_t>(mine.size()) == local * row);
      for (int64_t k = 0; k < local * row; ++k)
        worst =
            std::max(worst, std::abs(mine[static_cast<size_t>(k)] - whole[i][static_cast<size_t>(first * row + k)]));
    }
  }
  return worst;
}

}  // namespace

// Four ranks on quarter batches, resharding to pairs after forward (reshard_after_forward=2) and to all four
// (true): the same shards to float tolerance (backward gathers from the pair instead of the four).
TEST_CASE("four FSDP ranks resharding to pairs train as with resharding to all four") {
  const TrainingData d = training_data();
  std::vector<std::vector<std::vector<std::vector<double>>>> trained(2,
                                                                     std::vector<std::vector<std::vector<double>>>(4));
  for (size_t k = 0; k < 2; ++k) {
    testing::FreshRankDevices fresh(4, DeviceType::sim);
    const FullyShardOptions options{.reshard_after_forward =
                                        k == 0 ? std::variant<bool, int>(2) : std::variant<bool, int>(true)};
    run_ranks(4, DeviceType::sim, [&](ProcessGroup& pg) {
      trained[k][static_cast<size_t>(pg.rank())] =
          train_small(d, pg.device(), &pg, pg.rank() * 2, 2, std::nullopt, options);
    });
  }
  double worst = 0;
  for (size_t r = 0; r < 4; ++r) {
    REQUIRE(trained[0][r].size() == trained[1][r].size());
    for (size_t i = 0; i < trained[0][r].size(); ++i) {
      REQUIRE(trained[0][r][i].size() == trained[1][r][i].size());
      for (size_t k = 0; k < trained[0][r][i].size(); ++k)
        worst = std::max(worst, std::abs(trained[0][r][i][k] - trained[1][r][i][k]));
    }
  }
  CHECK(worst < 1e-6);
  // And they trained: rank 0's first weights moved from their initial values.
  CHECK(std::abs(trained[0][0][0][0] - d.initial.at("fc1.weight").view({-1}).narrow(0, 0, 1).item()) > 1e-4);
}

TEST_CASE("two FSDP ranks on half batches hold the rows of one rank's parameters trained on the whole batch") {
  CHECK(fsdp_versus_one_rank(std::nullopt) < 1e-6);
}

// Clipped to 0.05, below the gradients' own norm: clip_grad_norm_ over shards all-reduces the norm, so each
// rank scales its shard as one rank scales the whole gradient. Without the all-reduce each rank would clip
// by its shard's norm alone and the values would part.
TEST_CASE("clip_grad_norm_ over FSDP shards clips as one rank clips the whole gradients") {
  CHECK(fsdp_versus_one_rank(0.05) < 1e-6);
}

TEST_CASE("fully_shard refuses a module off the group's device, a second call, and a 0-dimensional parameter") {
  testing::FreshRankDevices fresh(2, DeviceType::sim);
  std::vector<std::vector<std::string>> errors(2);
  run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
    auto& mine = errors[static_cast<size_t>(pg.rank())];
    auto on_cpu = std::make_shared<nn::Linear>(4, 4, kCpu);
    try {
      fully_shard(on_cpu, pg);
    } catch (const std::invalid_argument& e) {
      mine.push_back(e.what());
    }
    auto twice = std::make_shared<nn::Linear>(4, 4, pg.device());
    fully_shard(twice, pg);
    try {
      fully_shard(twice, pg);
    } catch (const std::invalid_argument& e) {
      mine.push_back(e.what());
    }
    struct Scalar : nn::Module {
      explicit Scalar(Device d) { register_parameter("scale", ones({}, TensorOptions{}.with_device(d))); }
      Tensor forward(const Tensor& x) override { return x; }
    };
    try {
      fully_shard(std::make_shared<Scalar>(pg.device()), pg);
    } catch (const std::invalid_argument& e) {
      mine.push_back(e.what());
    }
  });
  for (const auto& mine : errors) {
    REQUIRE(mine.size() == 3);
    CHECK(mine[0].find("parameter 'weight' is on cpu") != std::string::npos);
    CHECK(mine[1].find("already given to fully_shard") != std::string::npos);
    CHECK(mine[2].find("parameter 'scale' has 0 dimensions") != std::string::npos);
  }
}

TEST_CASE("fully_shard: reshard_after_forward as an int is a factor of the world; meta is materialised first") {
  testing::FreshRankDevices fresh(2, DeviceType::sim);
  std::vector<std::vector<std::string>> errors(2);
  std::vector<int> shown(2, 0), local_rows(2, 0);
  run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
    auto& mine = errors[static_cast<size_t>(pg.rank())];
    for (const int size : {0, 3, 4}) {
      try {
        fully_shard(std::make_shared<nn::Linear>(4, 4, pg.device()), pg, {.reshard_after_forward = size});
      } catch (const std::invalid_argument& e) {
        mine.push_back(e.what());
      }
    }
    // 1 keeps the gathered parameters after forward (false), 2 (the world) frees them (true): accepted.
    fully_shard(std::make_shared<nn::Linear>(4, 4, pg.device()), pg, {.reshard_after_forward = 1});
    fully_shard(std::make_shared<nn::Linear>(4, 4, pg.device()), pg, {.reshard_after_forward = 2});
    // Built on meta and sharded there: the first forward refuses until to_empty. Three rows split 2 + 1:
    // rank 1's one-row shard is padded again to two after to_empty.
    auto on_meta = std::make_shared<nn::Linear>(4, 3, Device{DeviceType::meta, 50 + pg.rank()});
    fully_shard(on_meta, pg);
    const Tensor x = ones({2, 4}, TensorOptions{}.with_device(pg.device()));
    try {
      (*on_meta)(x);
    } catch (const std::runtime_error& e) {
      mine.push_back(e.what());
    }
    on_meta->to_empty(pg.device());
    on_meta->reset_parameters();
    local_rows[static_cast<size_t>(pg.rank())] = static_cast<int>(on_meta->weight().size(0));
    shown[static_cast<size_t>(pg.rank())] = static_cast<int>((*on_meta)(x).size(1));
  });
  for (size_t r = 0; r < 2; ++r) {
    const auto& mine = errors[r];
    REQUIRE(mine.size() == 4);
    CHECK(mine[0].find("a factor of the group's 2 ranks from 1 to 2, not 0") != std::string::npos);
    CHECK(mine[1].find("a factor of the group's 2 ranks from 1 to 2, not 3") != std::string::npos);
    CHECK(mine[2].find("a factor of the group's 2 ranks from 1 to 2, not 4") != std::string::npos);
    CHECK(mine[3].find("parameter 'weight' is still on meta") != std::string::npos);
    CHECK(local_rows[r] == (r == 0 ? 2 : 1));
    CHECK(shown[r] == 3);
  }
}

// On two GPUs with NCCL (ctest distributed_fsdp_cuda, label multigpu): both ranks run together as threads,
// each program's every figure, per-stream figure and trace entry per rank equal to the fake backend's
// (and so to PyTorch's recordings for the exact programs). GPT-2 small is compared with PyTorch's three
// runs and reported (placement, see above). Then the training check of the sim case above, on the GPUs.
TEST_CASE("FSDP2 programs on two GPUs with NCCL give the fake backend's figures and trace" * doctest::timeout(600)) {
  if (cuda_device_count() < 2) {
    MESSAGE("skipped: needs 2 GPUs, found " << cuda_device_count());
    return;
  }
  std::vector<std::string> programs = exact_programs();
  programs.emplace_back("gpt2_small_fsdp");
  for (const std::string& program : programs) {
    CAPTURE(program);
    const std::vector<Run> on_cuda = run_on_threads(program, DeviceType::cuda);
    for (int rank = 0; rank < 2; ++rank) {
      const Run& ours = on_cuda[static_cast<size_t>(rank)];
      const auto d = compare(ours, run_alone(program, rank));
      CHECK_MESSAGE(d.empty(), program << " rank " << rank << " on cuda differs from fake:" << joined(d));
      if (program == "gpt2_small_fsdp")
        for (int run = 0; run < 3; ++run)
          MESSAGE(program << " rank " << rank << " on cuda against PyTorch's run " << run << ": "
                          << std::string(compare(ours, recorded(program, rank, 2, run)).empty() ? "equal" : "differs"));
    }
  }
  for (int r = 0; r < 2; ++r) programs::fresh_process_state(Device{DeviceType::cuda, r});
  CHECK(fsdp_versus_one_rank(std::nullopt, DeviceType::cuda) < 1e-5);
  CHECK(fsdp_versus_one_rank(0.05, DeviceType::cuda) < 1e-5);
}
