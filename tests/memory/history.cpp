// The history trace and snapshots (reference sections 10.2, 10.3, 10.4): which entries each operation logs
// and in what order, the ring buffer, allocation tags, and the snapshot's segments and blocks, including the
// stale requested_size of free blocks.
#include <doctest/doctest.h>

#include <chrono>

#include "helpers.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/out_of_memory.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

std::vector<TraceEntry> trace_of(CachingAllocator& allocator) {
  // The snapshot's own entry is recorded after the trace is read (as in PyTorch), so it is not in it.
  std::vector<TraceEntry> trace = allocator.snapshot().trace;
  REQUIRE_FALSE(trace.empty());
  CHECK(trace.back().action != TraceAction::snapshot);
  return trace;
}

void check_entry(const TraceEntry& entry, TraceAction action, uintptr_t address, size_t size) {
  INFO("entry " << std::string(trace_action_name(entry.action)) << " at " << entry.address << " size " << entry.size);
  CHECK(entry.action == action);
  CHECK(entry.address == address);
  CHECK(entry.size == size);
  CHECK(entry.stream == 0);
}

}  // namespace

TEST_CASE("history: nothing is recorded until record_history(true)") {
  auto allocator = make_allocator();
  allocator->free(allocator->malloc(1));
  CHECK(allocator->snapshot().trace.empty());
}

TEST_CASE("history: the entries of malloc, free and empty_cache, in the measured order") {
  auto allocator = make_allocator();
  allocator->record_history(true);
  const auto start_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();

  // A malloc that needs a new segment logs segment_alloc, then alloc (size: the unrounded request).
  void* p = allocator->malloc(1000);
  // One served from the cache logs only alloc.
  void* q = allocator->malloc(3000);
  // A free logs free_requested then free_completed, both with the block's requested_size.
  allocator->free(p);
  // Freeing q merges it with the free p before it and the free tail after it; free_completed still names q's
  // address from before the merge.
  allocator->free(q);
  // empty_cache logs segment_free for the released segment.
  allocator->empty_cache();
  // malloc(0) logs nothing (section 2).
  CHECK(allocator->malloc(0) == nullptr);

  const auto trace = trace_of(*allocator);
  REQUIRE(trace.size() == 8);
  check_entry(trace[0], TraceAction::segment_alloc, addr(p), 2097152);
  check_entry(trace[1], TraceAction::alloc, addr(p), 1000);
  check_entry(trace[2], TraceAction::alloc, addr(q), 3000);
  CHECK(addr(q) == addr(p) + 1024);  // 1000 rounds to 1024; q is carved from the tail's front
  check_entry(trace[3], TraceAction::free_requested, addr(p), 1000);
  check_entry(trace[4], TraceAction::free_completed, addr(p), 1000);
  check_entry(trace[5], TraceAction::free_requested, addr(q), 3000);
  check_entry(trace[6], TraceAction::free_completed, addr(q), 3000);
  check_entry(trace[7], TraceAction::segment_free, addr(p), 2097152);
  for (size_t i = 0; i < trace.size(); ++i) {
    CHECK(trace[i].time_us >= start_us);
    if (i > 0) CHECK(trace[i].time_us >= trace[i - 1].time_us);
    CHECK(trace[i].tag.empty());
  }
}

TEST_CASE("history: empty_cache releases the large pool first, then small, each by (stream, size, address)") {
  auto allocator = make_allocator();
  void* large26 = allocator->malloc(25 * MiB);  // a 26 MiB segment, allocated first
  void* large20 = allocator->malloc(5 * MiB);   // a 20 MiB segment
  void* small = allocator->malloc(1);           // a 2 MiB segment
  allocator->free(small);
  allocator->free(large20);
  allocator->free(large26);
  allocator->record_history(true);
  allocator->empty_cache();
  const auto trace = trace_of(*allocator);
  REQUIRE(trace.size() == 3);
  check_entry(trace[0], TraceAction::segment_free, addr(large20), 20 * MiB);
  check_entry(trace[1], TraceAction::segment_free, addr(large26), 26 * MiB);
  check_entry(trace[2], TraceAction::segment_free, addr(small), 2 * MiB);
}

TEST_CASE("history: an OOM logs the retry's segment_free, then oom with the rounded size and free bytes") {
  auto allocator = make_allocator({}, {64 * MiB, 0});
  void* cached = allocator->malloc(20 * MiB);
  allocator->malloc(30 * MiB);
  allocator->free(cached);
  allocator->record_history(true);
  CHECK_THROWS_AS(allocator->malloc(40 * MiB + 1), OutOfMemoryError);
  const auto trace = trace_of(*allocator);
  REQUIRE(trace.size() == 2);
  check_entry(trace[0], TraceAction::segment_free, addr(cached), 20 * MiB);
  // oom: address 0, size = the rounded request s (40 MiB + 1 -> 40 MiB + 512), device_free = 64 - 30 MiB.
  check_entry(trace[1], TraceAction::oom, 0, 40 * MiB + 512);
  CHECK(trace[1].device_free == 34 * MiB);
}

TEST_CASE("history: a snapshot records a snapshot entry of the active bytes, seen by the next snapshot") {
  auto allocator = make_allocator();
  allocator->record_history(true);
  void* a = allocator->malloc(1);  // 512
  allocator->malloc(1048577);      // 1049088
  allocator->malloc(3000);         // 3072
  allocator->free(a);
  const MemorySnapshot snap = allocator->snapshot();
  REQUIRE_FALSE(snap.trace.empty());
  // PyTorch reads the trace before recording the entry: this trace ends with the last free.
  CHECK(snap.trace.back().action == TraceAction::free_completed);
  // The next snapshot's trace holds it, last.
  const MemorySnapshot again = allocator->snapshot();
  REQUIRE(again.trace.size() == snap.trace.size() + 1);
  const TraceEntry& entry = again.trace.back();
  CHECK(entry.action == TraceAction::snapshot);
  CHECK(entry.address == 0);
  CHECK(entry.size == 1049088 + 3072);  // the sum of the segments' active_size
  size_t active = 0;
  for (const SegmentInfo& segment : snap.segments) active += segment.active_size;
  CHECK(entry.size == active);
}

TEST_CASE("history: the ring buffer keeps the newest max_entries, oldest first") {
  auto allocator = make_allocator();
  allocator->record_history(true, 4);
  void* p1 = allocator->malloc(1);  // segment_alloc, alloc
  void* p2 = allocator->malloc(1);  // alloc
  void* p3 = allocator->malloc(1);  // alloc
  allocator->free(p1);              // free_requested, free_completed
  allocator->free(p2);              // free_requested, free_completed
  allocator->free(p3);              // free_requested, free_completed
  // 10 entries; the newest 4, oldest first (the snapshot's own entry comes after the trace is read).
  const MemorySnapshot snap = allocator->snapshot();
  REQUIRE(snap.trace.size() == 4);
  check_entry(snap.trace[0], TraceAction::free_requested, addr(p2), 1);
  check_entry(snap.trace[1], TraceAction::free_completed, addr(p2), 1);
  check_entry(snap.trace[2], TraceAction::free_requested, addr(p3), 1);
  check_entry(snap.trace[3], TraceAction::free_completed, addr(p3), 1);
  // The next snapshot sees that entry, which pushed out the oldest.
  const MemorySnapshot next = allocator->snapshot();
  REQUIRE(next.trace.size() == 4);
  check_entry(next.trace[0], TraceAction::free_completed, addr(p2), 1);
  CHECK(next.trace[3].action == TraceAction::snapshot);

  // Disabling stops recording and clears the buffer.
  allocator->record_history(false);
  allocator->free(allocator->malloc(1));
  CHECK(allocator->snapshot().trace.empty());
  // Enabling again starts empty.
  allocator->record_history(true);
  CHECK(allocator->snapshot().trace.empty());
  const MemorySnapshot fresh = allocator->snapshot();
  REQUIRE(fresh.trace.size() == 1);
  CHECK(fresh.trace[0].action == TraceAction::snapshot);
}

TEST_CASE("history: AllocationScope tags the entries made inside it") {
  auto allocator = make_allocator();
  allocator->record_history(true);
  void* outer = nullptr;
  void* inner = nullptr;
  {
    AllocationScope scope("linear1.weight");
    CHECK(current_allocation_tag() == "linear1.weight");
    outer = allocator->malloc(4096);
    {
      AllocationScope nested("matmul");
      inner = allocator->malloc(4096);
    }
    CHECK(current_allocation_tag() == "linear1.weight");  // the nested scope restored the outer tag
    allocator->free(inner);
  }
  CHECK(current_allocation_tag().empty());
  allocator->free(outer);
  const auto trace = trace_of(*allocator);
  REQUIRE(trace.size() == 7);
  CHECK(trace[0].action == TraceAction::segment_alloc);
  CHECK(trace[0].tag == "linear1.weight");
  CHECK(trace[1].tag == "linear1.weight");  // alloc outer
  CHECK(trace[2].tag == "matmul");          // alloc inner
  CHECK(trace[3].tag == "linear1.weight");  // free_requested inner
  CHECK(trace[4].tag == "linear1.weight");  // free_completed inner
  CHECK(trace[5].tag.empty());              // free_requested outer
  CHECK(trace[6].tag.empty());              // free_completed outer
}

TEST_CASE("snapshot: segments, blocks, states and sums") {
  auto allocator = make_allocator();
  void* small1 = allocator->malloc(1000);    // 1024 in a 2 MiB small segment
  void* small2 = allocator->malloc(5000);    // 5120
  void* large = allocator->malloc(1048577);  // 1049088 in a 20 MiB large segment
  allocator->free(small1);
  const MemorySnapshot snap = allocator->snapshot();
  REQUIRE(snap.segments.size() == 2);
  CHECK(snap.segments[0].address < snap.segments[1].address);  // sorted by address
  const SegmentInfo& s = snap.segments[0].pool == PoolKind::small ? snap.segments[0] : snap.segments[1];
  const SegmentInfo& l = snap.segments[0].pool == PoolKind::small ? snap.segments[1] : snap.segments[0];

  CHECK(s.address == addr(small1));
  CHECK(s.total_size == 2097152);
  CHECK(s.allocated_size == 5120);
  CHECK(s.active_size == 5120);
  CHECK(s.requested_size == 5000);  // active blocks only: the freed 1000 does not count
  CHECK(s.stream == 0);
  REQUIRE(s.blocks.size() == 3);
  CHECK(s.blocks[0].address == addr(small1));
  CHECK(s.blocks[0].size == 1024);
  CHECK(s.blocks[0].state == BlockState::inactive);
  CHECK(s.blocks[0].requested_size == 1000);  // stale: a free block keeps its last request
  CHECK(s.blocks[1].address == addr(small2));
  CHECK(s.blocks[1].address == s.address + 1024);  // the segment address plus the preceding sizes
  CHECK(s.blocks[1].size == 5120);
  CHECK(s.blocks[1].state == BlockState::active_allocated);
  CHECK(s.blocks[1].requested_size == 5000);
  CHECK(s.blocks[2].address == s.address + 1024 + 5120);
  CHECK(s.blocks[2].size == 2097152 - 1024 - 5120);
  CHECK(s.blocks[2].state == BlockState::inactive);

  CHECK(l.address == addr(large));
  CHECK(l.total_size == 20971520);
  CHECK(l.allocated_size == 1049088);
  CHECK(l.requested_size == 1048577);
  REQUIRE(l.blocks.size() == 2);
  CHECK(l.blocks[1].size == 20971520 - 1049088);

  CHECK(block_state_name(BlockState::active_allocated) == "active_allocated");
  CHECK(block_state_name(BlockState::active_pending_free) == "active_pending_free");
  CHECK(block_state_name(BlockState::inactive) == "inactive");
  CHECK(snap.settings.max_split_size == SIZE_MAX);
}

TEST_CASE("snapshot 10.3: stale requested_size of free blocks") {
  auto allocator = make_allocator();

  SUBCASE("a fresh segment's first remainder shows 0") {
    allocator->malloc(1000);
    const MemorySnapshot snap = allocator->snapshot();
    REQUIRE(snap.segments.size() == 1);
    REQUIRE(snap.segments[0].blocks.size() == 2);
    CHECK(snap.segments[0].blocks[1].state == BlockState::inactive);
    CHECK(snap.segments[0].blocks[1].requested_size == 0);
  }

  SUBCASE("free a 1000-byte block at the start of a small segment, then allocate 4096: the tail shows 1000") {
    void* p = allocator->malloc(1000);
    allocator->free(p);  // merges with the tail: the whole segment, requested_size 1000
    MemorySnapshot snap = allocator->snapshot();
    REQUIRE(snap.segments.size() == 1);
    REQUIRE(snap.segments[0].blocks.size() == 1);
    CHECK(snap.segments[0].blocks[0].requested_size == 1000);
    void* q = allocator->malloc(4096);
    CHECK(q == p);
    snap = allocator->snapshot();
    REQUIRE(snap.segments[0].blocks.size() == 2);
    CHECK(snap.segments[0].blocks[0].requested_size == 4096);
    CHECK(snap.segments[0].blocks[1].state == BlockState::inactive);
    CHECK(snap.segments[0].blocks[1].requested_size == 1000);  // measured
    CHECK(snap.segments[0].requested_size == 4096);
  }

  SUBCASE("section 13 after \"del e\": the fully free 20 MiB segment shows 9436672") {
    Section13 v(*allocator);
    v.run_through("del e (segment whole again)");
    const MemorySnapshot snap = allocator->snapshot();
    const SegmentInfo* whole = nullptr;
    for (const SegmentInfo& segment : snap.segments)
      if (segment.blocks.size() == 1 && segment.blocks[0].state == BlockState::inactive) {
        CHECK(whole == nullptr);
        whole = &segment;
      }
    REQUIRE(whole != nullptr);
    CHECK(whole->total_size == 20971520);
    CHECK(whole->address == addr(v.c));
    CHECK(whole->blocks[0].requested_size == 9436672);  // from e, the last block freed into it
    CHECK(whole->requested_size == 0);
  }
}
