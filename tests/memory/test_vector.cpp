// Reference section 13: the measured test vector (PyTorch 2.11, default config, one stream), row by row and
// column by column, plus the notes after the table.
#include <doctest/doctest.h>

#include <algorithm>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// One row of the section 13 table. All values are `.all.current`; the deltas are the "counters changed"
// column (every counter not listed there must stay unchanged).
struct Row {
  const char* step;
  int64_t allocated;             // allocated_bytes
  int64_t reserved;              // reserved_bytes
  int64_t active;                // active_bytes
  int64_t inactive_split_bytes;  // inactive_split_bytes
  int64_t requested;             // requested_bytes
  int64_t allocation;            // allocation (count)
  int64_t segment;               // segment (count)
  int64_t inactive_split;        // inactive_split (count)
  int64_t device_alloc_delta;    // num_device_alloc
  int64_t device_free_delta;     // num_device_free
  int64_t sync_all_delta;        // num_sync_all_streams
};

// Copied from the table of reference section 13.
const Row kRows[] = {
    {"a = 1 B", 512, 2097152, 512, 2096640, 1, 1, 1, 1, 1, 0, 0},
    {"b = 1048576", 1049088, 2097152, 1049088, 1048064, 1048577, 2, 1, 1, 0, 0, 0},
    {"c = 1048577", 2098176, 23068672, 2098176, 20970496, 2097154, 3, 2, 2, 1, 0, 0},
    {"d = 10485760", 12583936, 23068672, 12583936, 10484736, 12582914, 4, 2, 2, 0, 0, 0},
    {"e = 9436672 (exact tail)", 22020608, 23068672, 22020608, 1048064, 22019586, 5, 2, 1, 0, 0, 0},
    {"f = 20447232 (19.5 MiB)", 42992128, 44040192, 42992128, 1048064, 42466818, 6, 3, 1, 1, 0, 0},
    {"g = 26214401", 70255104, 71303168, 70255104, 1048064, 68681219, 7, 4, 1, 1, 0, 0},
    {"h = 9437184", 79692288, 92274688, 79692288, 12582400, 78118403, 8, 5, 2, 1, 0, 0},
    {"del d", 69206528, 92274688, 69206528, 23068160, 67632643, 7, 5, 3, 0, 0, 0},
    {"del c (merges with d)", 68157440, 92274688, 68157440, 24117248, 66584066, 6, 5, 3, 0, 0, 0},
    {"del e (segment whole again)", 58720768, 92274688, 58720768, 12582400, 57147394, 5, 5, 2, 0, 0, 0},
    {"empty_cache #1", 58720768, 71303168, 58720768, 12582400, 57147394, 5, 4, 2, 0, 1, 1},
    {"del h", 49283584, 71303168, 49283584, 1048064, 47710210, 4, 4, 1, 0, 0, 0},
    {"k = 3 MiB (takes h's free segment)", 52429312, 71303168, 52429312, 18873856, 50855938, 5, 4, 2, 0, 0, 0},
    {"del f, g, k", 1049088, 71303168, 1049088, 1048064, 1048577, 2, 4, 1, 0, 0, 0},
    {"del a, b", 0, 71303168, 0, 0, 0, 0, 4, 0, 0, 0, 0},
    {"empty_cache #2", 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1},
    {"5000 x torch.empty(1) fp32", 2560000, 4194304, 2560000, 1634304, 20000, 5000, 2, 1, 2, 0, 0},
    {"del the 5000", 0, 4194304, 0, 0, 0, 0, 2, 0, 0, 0, 0},
    {"empty_cache #3", 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1},
};

const SegmentInfo* segment_containing(const MemorySnapshot& snap, const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  for (const SegmentInfo& segment : snap.segments)
    if (address >= segment.address && address < segment.address + segment.total_size) return &segment;
  return nullptr;
}

}  // namespace

TEST_CASE("section 13 test vector: every row, every column") {
  auto allocator = make_allocator();
  Section13 vector(*allocator);
  const auto& steps = Section13::steps();
  REQUIRE(steps.size() == std::size(kRows));

  DeviceStats before = allocator->stats();
  for (size_t i = 0; i < steps.size(); ++i) {
    const Row& row = kRows[i];
    REQUIRE(std::string(steps[i].name) == row.step);
    steps[i].run(vector);
    const DeviceStats s = allocator->stats();
    INFO("after step '" << std::string(row.step) << "'");
    CHECK(s.allocated_bytes.all().current == row.allocated);
    CHECK(s.reserved_bytes.all().current == row.reserved);
    CHECK(s.active_bytes.all().current == row.active);
    CHECK(s.inactive_split_bytes.all().current == row.inactive_split_bytes);
    CHECK(s.requested_bytes.all().current == row.requested);
    CHECK(s.allocation.all().current == row.allocation);
    CHECK(s.segment.all().current == row.segment);
    CHECK(s.inactive_split.all().current == row.inactive_split);
    // One stream, no cross-stream frees: active == allocation (section 6, invariants).
    CHECK(s.active.all().current == row.allocation);
    // The getters of torch/cuda/memory.py read the same stats.
    CHECK(allocator->memory_allocated() == row.allocated);
    CHECK(allocator->memory_reserved() == row.reserved);
    // Counters: exactly the changes listed in the table, nothing else.
    CHECK(s.num_device_alloc - before.num_device_alloc == row.device_alloc_delta);
    CHECK(s.num_device_free - before.num_device_free == row.device_free_delta);
    CHECK(s.num_sync_all_streams - before.num_sync_all_streams == row.sync_all_delta);
    CHECK(s.num_alloc_retries == 0);
    CHECK(s.num_ooms == 0);
    before = s;
  }

  // Notes after the table.
  const DeviceStats s = allocator->stats();
  CHECK(s.allocated_bytes.all().peak == 79692288);
  CHECK(s.reserved_bytes.all().peak == 92274688);
  CHECK(allocator->max_memory_allocated() == 79692288);
  CHECK(allocator->max_memory_reserved() == 92274688);
  CHECK(s.segment.all().peak == 5);
  CHECK(s.segment.all().allocated == 7);
  CHECK(s.num_device_alloc == 7);
  CHECK(s.num_device_free == 7);
  CHECK(s.num_sync_all_streams == 3);
  // max_split_size is -1 by default (section 1).
  CHECK(s.max_split_size == -1);
}

TEST_CASE("section 13: segment shapes behind the rows") {
  auto allocator = make_allocator();
  Section13 v(*allocator);

  SUBCASE("e takes the exact tail of c's 20 MiB segment") {
    v.run_through("e = 9436672 (exact tail)");
    const MemorySnapshot snap = allocator->snapshot();
    const SegmentInfo* segment = segment_containing(snap, v.c);
    REQUIRE(segment != nullptr);
    CHECK(segment->pool == PoolKind::large);
    // c: 1048577 rounds to 1049088; d: 10485760; e: 9436672; 1049088 + 10485760 + 9436672 = 20971520.
    CHECK(segment->total_size == 20971520);
    REQUIRE(segment->blocks.size() == 3);
    CHECK(segment->blocks[0].size == 1049088);
    CHECK(segment->blocks[1].size == 10485760);
    CHECK(segment->blocks[2].size == 9436672);
    for (const BlockInfo& block : segment->blocks) CHECK(block.state == BlockState::active_allocated);
    CHECK(segment->blocks[0].address == reinterpret_cast<uintptr_t>(v.c));
    CHECK(segment->blocks[1].address == reinterpret_cast<uintptr_t>(v.d));
    CHECK(segment->blocks[2].address == reinterpret_cast<uintptr_t>(v.e));
  }

  SUBCASE("del c merges with the free d in front of e") {
    v.run_through("del c (merges with d)");
    const MemorySnapshot snap = allocator->snapshot();
    const SegmentInfo* segment = segment_containing(snap, v.e);
    REQUIRE(segment != nullptr);
    REQUIRE(segment->blocks.size() == 2);
    // 1049088 + 10485760 = 11534848 free, at c's address.
    CHECK(segment->blocks[0].state == BlockState::inactive);
    CHECK(segment->blocks[0].size == 11534848);
    CHECK(segment->blocks[0].address == reinterpret_cast<uintptr_t>(v.c));
    CHECK(segment->blocks[1].state == BlockState::active_allocated);
  }

  SUBCASE("del e makes the segment whole again, and empty_cache releases only it") {
    v.run_through("del e (segment whole again)");
    MemorySnapshot snap = allocator->snapshot();
    const SegmentInfo* segment = segment_containing(snap, v.c);
    REQUIRE(segment != nullptr);
    REQUIRE(segment->blocks.size() == 1);
    CHECK(segment->blocks[0].size == 20971520);
    CHECK(segment->blocks[0].state == BlockState::inactive);
    v.run_through("empty_cache #1");
    snap = allocator->snapshot();
    CHECK(segment_containing(snap, v.c) == nullptr);
    CHECK(segment_containing(snap, v.h) != nullptr);  // 9 MiB of 20 MiB in use: kept whole (section 8.1)
  }

  SUBCASE("k takes h's free segment") {
    v.run_through("del h");
    const void* h = v.h;
    v.run_through("k = 3 MiB (takes h's free segment)");
    CHECK(v.k == h);
  }
}

TEST_CASE("section 13 note: the first small segment holds exactly 4096 blocks of 512 B") {
  auto allocator = make_allocator();
  // A 4-byte request rounds to 512; a 2 MiB small segment holds 2097152 / 512 = 4096 of them.
  std::vector<void*> blocks;
  for (int i = 0; i < 4095; ++i) blocks.push_back(allocator->malloc(4));
  DeviceStats s = allocator->stats();
  CHECK(s.segment.all().current == 1);
  // 4095 blocks leave one 512-byte free tail, which is split off.
  CHECK(s.inactive_split.all().current == 1);
  CHECK(s.inactive_split_bytes.all().current == 512);

  blocks.push_back(allocator->malloc(4));  // the 4096th takes the exact tail: nothing split off
  s = allocator->stats();
  CHECK(s.segment.all().current == 1);
  CHECK(s.num_device_alloc == 1);
  CHECK(s.inactive_split.all().current == 0);
  CHECK(s.inactive_split_bytes.all().current == 0);
  MemorySnapshot snap = allocator->snapshot();
  REQUIRE(snap.segments.size() == 1);
  CHECK(snap.segments[0].blocks.size() == 4096);
  CHECK(std::all_of(snap.segments[0].blocks.begin(), snap.segments[0].blocks.end(),
                    [](const BlockInfo& b) { return b.state == BlockState::active_allocated && b.size == 512; }));

  blocks.push_back(allocator->malloc(4));  // the 4097th needs a second segment
  s = allocator->stats();
  CHECK(s.segment.all().current == 2);
  CHECK(s.num_device_alloc == 2);
  // The new segment is split: 2097152 - 512 = 2096640 free.
  CHECK(s.inactive_split_bytes.all().current == 2096640);
  for (void* p : blocks) allocator->free(p);
}
