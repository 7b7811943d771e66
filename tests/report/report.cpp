// The history's categories (memory/history.h) and the report's replay of the allocator (reports/memory_report.h):
//  - a Linear + Adam step on sim with history on: the categories of chosen entries are what the program did
//    to those blocks, and at every entry the recorded bytes per category sum to the allocated bytes replayed
//    from the entries' block bytes, and equal the bytes per category replayed entry by entry;
//  - the memory_viz export writes those categories (and "unknown" for entries about no block);
//  - every golden seed program on meta: the allocator's state replayed from the history at each mark's entry
//    has the golden file's reserved, allocated, segments and blocks, and the mark's categories; the state
//    after the last entry is the snapshot's;
//  - a two-stream program on sim: the replayed segments carry their streams, and a block freed while its
//    other stream still has queued work (record_stream) is pending from its free_requested to its
//    free_completed, before the history and after it alike.
// Its own process, as tests/ledger (a program run on meta can shift where a later one's segments land).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/reports/memory_report.h"
#include "bytegrad/reports/memory_story.h"
#include "bytegrad/reports/memory_viz.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/fresh_device.h"
#include "bytegrad/testing/stream_work.h"
#include "programs/checks.h"
#include "programs/registry.h"

using namespace bytegrad;
using namespace bytegrad::programs;

namespace {

int64_t sum(const CategoryBytes& bytes) {
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  return total;
}

uintptr_t address_of(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

// The category a block has after each entry about it from `from` on: its alloc's, then each change's; a free
// ends the list.
std::vector<MemoryCategory> categories_of(const std::vector<TraceEntry>& trace, uintptr_t address, size_t from = 0) {
  std::vector<MemoryCategory> seen;
  for (size_t i = from; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.address != address) continue;
    if (e.action == TraceAction::alloc) seen = {e.category};
    else if (e.action == TraceAction::category) seen.push_back(e.category);
    else if (e.action == TraceAction::free_requested) seen.clear();
  }
  return seen;
}

size_t first_index(const std::vector<TraceEntry>& trace, TraceAction action, uintptr_t address) {
  for (size_t i = 0; i < trace.size(); ++i)
    if (trace[i].action == action && trace[i].address == address) return i;
  return trace.size();
}

}  // namespace

TEST_CASE("history: a Linear + Adam step on sim, each block's category as the program made it") {
  GoldenConditions conditions(kSim);
  CachingAllocator& allocator = caching_allocator(kSim);
  allocator.record_history(true);
  manual_seed(0);
  nn::Linear linear(64, 32, kSim);                // weight 32*64*4 = 8192 B; bias 32*4 = 128 B -> 512
  Tensor x = randn({16, 64}, device(kSim));       // 16*64*4 = 4096
  Tensor target = randn({16, 32}, device(kSim));  // 16*32*4 = 2048
  optim::Adam adam(linear.parameters(), 1e-3);
  Tensor out = linear(x);  // 16*32*4 = 2048, saved by mse_loss's node
  Tensor loss = mse_loss(out, target);
  loss.backward();
  adam.step();
  const MemorySnapshot snap = allocator.snapshot();
  allocator.record_history(false);
  const std::vector<TraceEntry>& trace = snap.trace;
  REQUIRE(!trace.empty());

  const int64_t parameters = 8192 + 512;
  // Parameters: allocated, then registered by the module (a category entry, or born one).
  CHECK(categories_of(trace, address_of(linear.weight())).back() == MemoryCategory::parameter);
  CHECK(categories_of(trace, address_of(linear.bias())).back() == MemoryCategory::parameter);
  // The input is a leaf: `other` all its life (a leaf saved by a node is not an activation).
  CHECK(categories_of(trace, address_of(x)) == std::vector<MemoryCategory>{MemoryCategory::other});
  // The Linear's output: made by the forward as `other`, an activation while mse_loss's node keeps it, and
  // `other` again once backward released the node's saved tensors.
  const size_t out_alloc = first_index(trace, TraceAction::alloc, address_of(out));
  REQUIRE(out_alloc < trace.size());
  CHECK(trace[out_alloc].tag == "linear");
  CHECK(trace[out_alloc].block_size == 2048);
  CHECK(categories_of(trace, address_of(out), out_alloc) ==
        std::vector<MemoryCategory>{MemoryCategory::other, MemoryCategory::activation, MemoryCategory::other});
  // The weight's gradient: born in backward as a gradient in flight, then the leaf's .grad.
  const Tensor grad = linear.weight().grad();
  REQUIRE(grad.defined());
  const std::vector<MemoryCategory> grad_categories = categories_of(trace, address_of(grad));
  REQUIRE(!grad_categories.empty());
  CHECK(grad_categories.front() == MemoryCategory::autograd_temporary);
  CHECK(grad_categories.back() == MemoryCategory::gradient);
  // Adam's state: exp_avg and exp_avg_sq per parameter, born optimizer_state.
  for (size_t p = 0; p < 2; ++p) {
    CHECK(categories_of(trace, address_of(adam.state(p).exp_avg)) ==
          std::vector<MemoryCategory>{MemoryCategory::optimizer_state});
    CHECK(categories_of(trace, address_of(adam.state(p).exp_avg_sq)) ==
          std::vector<MemoryCategory>{MemoryCategory::optimizer_state});
  }

  // At every entry: the recorded bytes per category sum to the allocated bytes replayed from the entries
  // (block bytes; the device was fresh, so the history starts from 0), and equal the categories replayed
  // entry by entry (alloc, free, and the category entries' moves).
  const AllocatorState before = allocator_state_before_history(snap);
  CHECK(before.blocks.empty());
  CHECK(before.segments.empty());
  AllocatorState state = before;
  int64_t allocated = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    CAPTURE(i);
    CAPTURE(trace_action_name(e.action));
    if (e.action == TraceAction::alloc) allocated += static_cast<int64_t>(e.block_size);
    if (e.action == TraceAction::free_requested) allocated -= static_cast<int64_t>(e.block_size);
    CHECK(sum(e.category_bytes) == allocated);
    apply_trace_entry(state, e);
    CHECK(state.bytes == e.category_bytes);
  }
  // And the end is the allocator's: its figures and its categories.
  CHECK(allocated == allocator.memory_allocated());
  CHECK(trace.back().category_bytes == allocator.category_bytes());
  const CategoryBytes end = allocator.category_bytes();
  CHECK(end[static_cast<size_t>(MemoryCategory::parameter)] == parameters);
  CHECK(end[static_cast<size_t>(MemoryCategory::gradient)] == parameters);
  CHECK(end[static_cast<size_t>(MemoryCategory::optimizer_state)] == 2 * parameters);

  // memory_viz: alloc and free entries carry their category in the viewer's field; entries about no block
  // say "unknown"; bytegrad's own category entries are left out.
  const json::Value doc = json::parse(memory_viz_json(snap));
  const json::Value& exported = doc.find("device_traces")->items.at(0);
  size_t expected = 0, unknown = 0;
  for (const TraceEntry& e : trace) expected += e.action != TraceAction::category;
  REQUIRE(exported.items.size() == expected);
  size_t k = 0;
  for (const TraceEntry& e : trace) {
    if (e.action == TraceAction::category) continue;
    const json::Value& entry = exported.items[k++];
    const std::string category = entry.find("category")->text;
    if (e.action == TraceAction::alloc || e.action == TraceAction::free_requested ||
        e.action == TraceAction::free_completed) {
      CHECK(category == category_name(e.category));
    } else {
      CHECK(category == "unknown");
      ++unknown;
    }
  }
  CHECK(unknown > 0);  // the viewer needs one
}

TEST_CASE("history: nothing is recorded while history is off") {
  GoldenConditions conditions(kSim);
  CachingAllocator& allocator = caching_allocator(kSim);
  nn::Linear linear(8, 8, kSim);
  Tensor y = linear(randn({4, 8}, device(kSim)));
  CHECK(allocator.snapshot().trace.empty());
}

TEST_CASE("report: the allocator's state replayed at every mark of every golden program equals the golden") {
  for (Workspaces workspaces : {Workspaces::none, Workspaces::none_expandable_segments}) {
    const bool expandable = workspaces == Workspaces::none_expandable_segments;
    for (const Program& program : seed_programs()) {
      if (!program.has_golden) continue;
      CAPTURE(program.name);
      CAPTURE(expandable);
      const std::vector<GoldenStep> want = golden(program.name, workspaces);
      GoldenConditions conditions(kMeta, workspaces);
      std::vector<StoryMark> marks;
      MemorySnapshot snap;
      {
        MemoryStory story(kMeta);
        ScenarioRecorder recorder(program.name, kMeta);
        recorder.on_mark([&](const GoldenStep& s) { story.mark(s.label); });
        program.run(recorder);
        marks = story.marks();
        snap = caching_allocator(kMeta).snapshot();
      }
      REQUIRE(marks.size() == want.size());
      const AllocatorState before = allocator_state_before_history(snap);
      AllocatorState state = before;
      size_t next = 0;
      for (size_t m = 0; m < marks.size(); ++m) {
        CAPTURE(marks[m].label);
        CHECK(marks[m].label == want[m].label);
        CHECK(marks[m].allocated == want[m].allocated);
        CHECK(sum(marks[m].ledger) == marks[m].allocated);
        if (marks[m].event < 0) continue;  // before the device was reconfigured
        for (; next <= static_cast<size_t>(marks[m].event); ++next) apply_trace_entry(state, snap.trace[next]);
        CHECK(state.reserved() == want[m].reserved);
        CHECK(state.allocated() == want[m].allocated);
        CHECK(static_cast<int64_t>(state.blocks.size()) == want[m].blocks);
        if (!expandable) CHECK(static_cast<int64_t>(state.segments.size()) == want[m].segments);
        CHECK(state.bytes == marks[m].ledger);
        CHECK(state.bytes == snap.trace[static_cast<size_t>(marks[m].event)].category_bytes);
      }
      // After the last entry: the snapshot's segments and live blocks.
      for (; next < snap.trace.size(); ++next) apply_trace_entry(state, snap.trace[next]);
      size_t live = 0;
      for (const SegmentInfo& s : snap.segments) {
        auto it = state.segments.find(s.address);
        REQUIRE(it != state.segments.end());
        CHECK(it->second.size == s.total_size);
        for (const BlockInfo& b : s.blocks) {
          if (b.state == BlockState::inactive) continue;
          ++live;
          auto block = state.blocks.find(b.address);
          REQUIRE(block != state.blocks.end());
          CHECK(block->second.size == b.size);
          CHECK(block->second.requested == b.requested_size);
          CHECK(block->second.category == b.category);
        }
      }
      CHECK(state.segments.size() == snap.segments.size());
      CHECK(state.blocks.size() == live);
    }
  }
}

TEST_CASE("report: a deferred cross-stream free is pending in the replayed state; segments keep their stream") {
  testing::FreshDevice fresh(kSim);
  CachingAllocator& allocator = caching_allocator(kSim);
  Stream side = get_stream_from_pool(kSim);
  constexpr size_t kBlock = size_t{1} << 22, kSegment = 20 << 20;  // 2^20 floats; a 1-10 MiB request's segment
  Tensor early = empty({1 << 20}, device(kSim));  // made before the history: the state before it must hold it
  side.wait_stream(current_stream(kSim));
  testing::queue_busy_work(side);
  early.record_stream(side);
  early = Tensor();  // pending before the history starts
  allocator.record_history(true);
  Tensor y;
  {
    StreamGuard on_side(side);
    y = empty({1 << 20}, device(kSim));  // the side stream's own segment
  }
  Tensor x = empty({1 << 20}, device(kSim));
  x.record_stream(side);
  x = Tensor();
  const MemorySnapshot snap = allocator.snapshot();
  allocator.record_history(false);

  const AllocatorState before = allocator_state_before_history(snap);
  CHECK(before.pending.size() == 1);  // `early`
  CHECK(before.pending_bytes() == static_cast<int64_t>(kBlock));
  CHECK(before.allocated() == 0);
  AllocatorState state = before;
  size_t requested = 0;
  for (const TraceEntry& e : snap.trace) {
    apply_trace_entry(state, e);
    if (e.action == TraceAction::free_requested) {
      CHECK(e.free_deferred);
      ++requested;
      CHECK(state.pending.count(e.address) == 1);
    }
  }
  REQUIRE(requested == 1);  // x
  // early stayed pending through y's and x's mallocs (the side stream is still busy); x is pending too.
  CHECK(state.pending_bytes() == static_cast<int64_t>(2 * kBlock));
  CHECK(state.allocated() == static_cast<int64_t>(kBlock));  // y
  CHECK(state.reserved() == static_cast<int64_t>(2 * kSegment));
  REQUIRE(state.segments.size() == 2);
  for (const auto& [address, segment] : state.segments) {
    CAPTURE(address);
    const bool is_sides = address <= address_of(y) && address_of(y) < address + segment.size;
    CHECK(segment.stream == (is_sides ? side.id() : StreamId{0}));
  }
  CHECK(state.blocks.at(address_of(y)).stream == side.id());
  synchronize(kSim);
}
