// expandable_segments:True (reference section 9; PyTorch's ExpandableSegment, map_block/unmap_block and
// try_allocate_expandable_block): per (stream, pool) one reserved address range, pages mapped on demand
// (2 MiB small, 20 MiB large), blocks split whenever 512 bytes or more remain, empty_cache unmapping only
// whole free pages. Figures are the reference's measurements or arithmetic written beside them.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "bytegrad/reports/memory_viz.h"
#include "bytegrad/memory/out_of_memory.h"
#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr int64_t kSmallPage = 2 * MiB;   // 2097152
constexpr int64_t kLargePage = 20 * MiB;  // 20971520

AllocatorConfig expandable() { return AllocatorConfig::parse("expandable_segments:True"); }

std::unique_ptr<CachingAllocator> make_on(const char* device, AllocatorConfig config, SimulatedCapacity capacity = {}) {
  std::unique_ptr<RawMemory> raw =
      std::string(device) == "sim" ? make_host_backed_raw_memory(capacity) : make_address_only_raw_memory(capacity);
  return std::make_unique<CachingAllocator>(std::move(raw), std::move(config));
}

std::vector<TraceEntry> entries_of(const CachingAllocator& allocator, TraceAction action, const MemorySnapshot& snap) {
  (void)allocator;
  std::vector<TraceEntry> out;
  for (const TraceEntry& e : snap.trace)
    if (e.action == action) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("expandable segments: the reference's measured sequence (1 B, 5 MiB, 30 MiB, 3 MiB, frees, empty_cache)") {
  for (const char* device : {"sim", "meta"}) {
    INFO("on " << std::string(device));
    auto allocator = make_on(device, expandable());
    CachingAllocator& a = *allocator;
    a.record_history(true);

    // 1 B: a 512-byte block in the small pool's segment, whose first 2 MiB page gets mapped: +2 MiB.
    void* one = a.malloc(1);
    CHECK(a.memory_reserved() == kSmallPage);
    CHECK(a.memory_allocated() == 512);
    // 5 MiB: the large pool's segment maps one 20 MiB page: +20 MiB. The block is exactly 5 MiB
    // (5242880; split, as any remainder >= 512 is), the rest of the page a free block.
    void* five = a.malloc(5 * MiB);
    CHECK(a.memory_reserved() == kSmallPage + kLargePage);  // 23068672
    CHECK(a.memory_allocated() == 512 + 5 * MiB);
    // 30 MiB: no free block is large enough (15 MiB free); the free tail grows by one more page
    // (15 + 20 = 35 MiB >= 30 MiB): +20 MiB, and the block starts right after the 5 MiB one.
    void* thirty = a.malloc(30 * MiB);
    CHECK(a.memory_reserved() == kSmallPage + 2 * kLargePage);  // 44040192
    CHECK(reinterpret_cast<uintptr_t>(thirty) == reinterpret_cast<uintptr_t>(five) + 5 * MiB);
    // 3 MiB: fits the remaining 35 - 30 = 5 MiB: nothing mapped.
    void* three = a.malloc(3 * MiB);
    CHECK(a.memory_reserved() == kSmallPage + 2 * kLargePage);
    CHECK(reinterpret_cast<uintptr_t>(three) == reinterpret_cast<uintptr_t>(thirty) + 30 * MiB);

    // Free 5 MiB, empty_cache: its page [0, 20 MiB) also holds the start of the 30 MiB block: nothing unmapped.
    a.free(five);
    a.empty_cache();
    CHECK(a.memory_reserved() == kSmallPage + 2 * kLargePage);
    CHECK(stat(a, "num_device_free") == 0);
    // Free 30 MiB, empty_cache: [0, 35 MiB) is free; the whole page [0, 20 MiB) is unmapped, [20, 35) stays
    // (its page also holds the 3 MiB block at [35, 38)).
    a.free(thirty);
    a.empty_cache();
    CHECK(a.memory_reserved() == kSmallPage + kLargePage);  // 23068672
    CHECK(stat(a, "num_device_free") == 1);

    // Segments and the non-releasable figures never move with expandable segments.
    CHECK(stat(a, "segment.all.peak") == 0);
    CHECK(stat(a, "inactive_split.all.peak") == 0);
    CHECK(stat(a, "inactive_split_bytes.all.peak") == 0);
    // One map per page-mapping call: small page, first large page, second large page.
    CHECK(stat(a, "num_device_alloc") == 3);

    // The snapshot: each mapped range is a segment marked expandable. The large one now starts at its
    // second page (20 MiB past the first block) and holds free 15 MiB, the 3 MiB block, free 2 MiB.
    const MemorySnapshot snap = a.snapshot();
    REQUIRE(snap.segments.size() == 2);
    for (const SegmentInfo& s : snap.segments) CHECK(s.is_expandable);
    const SegmentInfo& large = snap.segments[0].pool == PoolKind::large ? snap.segments[0] : snap.segments[1];
    const SegmentInfo& small = snap.segments[0].pool == PoolKind::large ? snap.segments[1] : snap.segments[0];
    CHECK(large.address == reinterpret_cast<uintptr_t>(five) + 20 * MiB);
    CHECK(large.total_size == static_cast<size_t>(kLargePage));
    REQUIRE(large.blocks.size() == 3);
    CHECK(large.blocks[0].size == 15 * MiB);
    CHECK(large.blocks[1].size == 3 * MiB);
    CHECK(large.blocks[1].state == BlockState::active_allocated);
    CHECK(large.blocks[2].size == 2 * MiB);
    CHECK(small.total_size == static_cast<size_t>(kSmallPage));
    CHECK(small.allocated_size == 512);

    // History: segment_map per mapping (small page, two large pages), segment_unmap for the one page.
    const auto maps = entries_of(a, TraceAction::segment_map, snap);
    REQUIRE(maps.size() == 3);
    CHECK(maps[0].size == static_cast<size_t>(kSmallPage));
    CHECK(maps[1].address == reinterpret_cast<uintptr_t>(five));
    CHECK(maps[1].size == static_cast<size_t>(kLargePage));
    CHECK(maps[2].address == reinterpret_cast<uintptr_t>(five) + 20 * MiB);
    const auto unmaps = entries_of(a, TraceAction::segment_unmap, snap);
    REQUIRE(unmaps.size() == 1);
    CHECK(unmaps[0].address == reinterpret_cast<uintptr_t>(five));
    CHECK(unmaps[0].size == static_cast<size_t>(kLargePage));
    CHECK(entries_of(a, TraceAction::segment_alloc, snap).empty());

    // Everything freed: empty_cache unmaps the rest (the second large page, the small page).
    a.free(three);
    a.free(one);
    a.empty_cache();
    CHECK(a.memory_reserved() == 0);
    CHECK(stat(a, "num_device_free") == 3);
    CHECK(a.snapshot().segments.empty());
  }
}

TEST_CASE("expandable segments: a request maps at the lowest address first, filling an unmapped gap") {
  // PyTorch's find_expandable_block: the lowest-addressed unmapped range that, with the free blocks around
  // it, spans the request. After the sequence above unmapped [0, 20 MiB), a 25 MiB request (no free block
  // that large) maps the gap back and takes [0, 25 MiB) of [0, 35 MiB) free.
  auto allocator = make_on("meta", expandable());
  CachingAllocator& a = *allocator;
  void* five = a.malloc(5 * MiB);
  void* thirty = a.malloc(30 * MiB);
  void* three = a.malloc(3 * MiB);
  a.free(five);
  a.free(thirty);
  a.empty_cache();
  REQUIRE(a.memory_reserved() == kLargePage);
  void* twenty_five = a.malloc(25 * MiB);
  CHECK(twenty_five == five);
  CHECK(a.memory_reserved() == 2 * kLargePage);
  a.free(twenty_five);
  a.free(three);
}

TEST_CASE("expandable segments: best fit by the size a free block could grow to") {
  // PyTorch's get_free_block: a free block followed by unmapped addresses counts as its size plus the
  // unmapped range, and the search walks on to the next larger block while that one could grow to less.
  auto allocator = make_on("meta", expandable());
  CachingAllocator& a = *allocator;
  // One 20 MiB page: [0, 8 MiB) x, [8, 14) y, [14, 20) a 6 MiB free tail before the unmapped rest.
  void* x = a.malloc(8 * MiB);
  void* y = a.malloc(6 * MiB);
  a.free(x);  // an 8 MiB hole at 0 (y after it is allocated: it cannot grow)
  // 5 MiB: by size alone the 6 MiB tail fits best, but it could grow to 6 MiB + the unmapped range; the
  // 8 MiB hole could grow to only 8 MiB, so the hole is taken.
  void* five = a.malloc(5 * MiB);
  CHECK(five == x);
  CHECK(a.memory_reserved() == kLargePage);
  a.free(five);
  a.free(y);
}

TEST_CASE("expandable segments: out of memory unmaps free pages, retries, then reports PyTorch's message") {
  // A 100 MiB card without a driver reservation. 60 MiB maps 3 pages exactly; 30 MiB maps 2 more (40 MiB,
  // reserved 100 MiB), leaving a free 10 MiB tail.
  auto allocator = make_on("sim", expandable(), {100 * MiB, 0});
  CachingAllocator& a = *allocator;
  a.record_history(true);
  void* sixty = a.malloc(60 * MiB);
  void* thirty = a.malloc(30 * MiB);
  CHECK(a.memory_reserved() == 100 * static_cast<int64_t>(MiB));
  a.free(thirty);  // [60, 100 MiB) free
  // 50 MiB: no free block is that large; growing [60, 100) needs one more 20 MiB page, which does not fit.
  // The cache is flushed (pages [60, 100) unmapped: reserved 60 MiB) and the retry maps from 60 MiB: three
  // pages (60 MiB) on a card with 40 MiB free: out of memory.
  try {
    a.malloc(50 * MiB);
    FAIL("50 MiB must not fit");
  } catch (const OutOfMemoryError& e) {
    const std::string message = e.what();
    // "Tried to allocate" names the whole-segment size of the request (50 MiB rounded to 2 MiB), as PyTorch.
    CHECK(message.find("Tried to allocate 50.00 MiB") != std::string::npos);
    CHECK(message.find("of which 40.00 MiB is free") != std::string::npos);
  }
  CHECK(a.memory_reserved() == 60 * static_cast<int64_t>(MiB));
  CHECK(stat(a, "num_alloc_retries") == 1);
  CHECK(stat(a, "num_ooms") == 1);
  CHECK(stat(a, "num_device_free") == 1);  // one unmap of the two pages [60, 100)
  const MemorySnapshot snap = a.snapshot();
  const auto unmaps = entries_of(a, TraceAction::segment_unmap, snap);
  REQUIRE(unmaps.size() == 1);
  CHECK(unmaps[0].size == 40 * MiB);
  CHECK(unmaps[0].address == reinterpret_cast<uintptr_t>(sixty) + 60 * MiB);
  // The allocator stays usable: 40 MiB still fits after the 60.
  void* forty = a.malloc(40 * MiB);
  CHECK(a.memory_reserved() == 100 * static_cast<int64_t>(MiB));
  a.free(forty);
  a.free(sixty);
}

TEST_CASE("expandable segments: a memory fraction is tested against the whole-segment size") {
  // PyTorch's alloc_block tests total_allocated_memory + alloc_size (the size a new segment would have had)
  // before mapping anything. Allowed: 45 MiB. 1 B maps a 2 MiB page (2 + 2 <= 45); 15 MiB (alloc_size 16
  // MiB: 2 + 16 <= 45) maps a 20 MiB page: reserved 22 MiB, a 5 MiB tail free. 24 MiB would map one page
  // (5 + 20 >= 24: reserved 42 MiB <= 45) but 22 + 24 > 45, so it fails, flushes (no whole free page) and
  // fails again.
  auto allocator = make_on("meta", expandable(), {1000 * MiB, 0});
  CachingAllocator& a = *allocator;
  a.set_memory_fraction(0.045);  // 0.045 * 1000 MiB = 45 MiB
  void* one = a.malloc(1);
  void* fifteen = a.malloc(15 * MiB);
  CHECK(a.memory_reserved() == kSmallPage + kLargePage);
  CHECK_THROWS_AS(a.malloc(24 * MiB), OutOfMemoryError);
  CHECK(a.memory_reserved() == kSmallPage + kLargePage);
  CHECK(stat(a, "num_ooms") == 1);
  a.free(fifteen);
  a.free(one);
}

TEST_CASE("expandable segments: memory_viz marks the segments and the setting") {
  auto allocator = make_on("meta", expandable());
  void* p = allocator->malloc(5 * MiB);
  const std::string json = memory_viz_json(*allocator);
  CHECK(json.find(R"("is_expandable": true)") != std::string::npos);
  CHECK(json.find(R"("expandable_segments": true)") != std::string::npos);
  allocator->free(p);
}

TEST_CASE("expandable segments: streams get ranges of their own") {
  // Per (stream, pool) one segment: a block freed on stream 0 is not reused by stream 1, which maps its own page.
  auto allocator = make_on("meta", expandable());
  CachingAllocator& a = *allocator;
  void* p0 = a.malloc(5 * MiB, 0);
  a.free(p0);
  void* p1 = a.malloc(5 * MiB, 1);
  CHECK(a.memory_reserved() == 2 * kLargePage);
  a.free(p1);
  a.empty_cache();
  CHECK(a.memory_reserved() == 0);
}

TEST_CASE("expandable segments: randomized malloc/free/empty_cache keeps every figure equal to what it counts") {
  // After every step: reserved equals the bytes of the snapshot's mapped ranges, each a whole number of
  // pages of its pool; allocated equals the live blocks; segments and inactive_split stay 0; mapped ranges
  // of one pool and stream never touch (adjacent mapped pages are one range). A small card makes OOMs and
  // their flush-and-retry happen.
  for (const char* device : {"sim", "meta"}) {
    INFO("on " << std::string(device));
    auto allocator = make_on(device, expandable(), {200 * MiB, 0});
    CachingAllocator& a = *allocator;
    std::mt19937 rng(20250611);
    std::vector<void*> live;
    int ooms = 0, flushes = 0;
    for (int step = 0; step < 3000; ++step) {
      const int action = static_cast<int>(rng() % 100);
      if (action < 3) {
        a.empty_cache();
        ++flushes;
      } else if (action < 45 && !live.empty()) {
        const size_t i = rng() % live.size();
        a.free(live[i]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        const size_t bytes = rng() % 2 ? 1 + rng() % MiB : 1 + rng() % (40 * MiB);
        const StreamId stream = rng() % 4 == 0 ? 1 : 0;
        try {
          live.push_back(a.malloc(bytes, stream));
        } catch (const OutOfMemoryError&) {
          ++ooms;
        }
      }
      const MemorySnapshot snap = a.snapshot();
      int64_t mapped = 0, allocated = 0;
      for (size_t i = 0; i < snap.segments.size(); ++i) {
        const SegmentInfo& s = snap.segments[i];
        const size_t page = s.pool == PoolKind::small ? kSmallPage : kLargePage;
        CHECK(s.is_expandable);
        CHECK(s.total_size % page == 0);
        mapped += static_cast<int64_t>(s.total_size);
        allocated += static_cast<int64_t>(s.allocated_size);
        if (i > 0) {
          const SegmentInfo& before = snap.segments[i - 1];
          const bool same_range = before.pool == s.pool && before.stream == s.stream;
          if (same_range) CHECK(before.address + before.total_size < s.address);
        }
      }
      CHECK(a.memory_reserved() == mapped);
      CHECK(a.memory_allocated() == allocated);
      CHECK(stat(a, "segment.all.current") == 0);
      CHECK(stat(a, "inactive_split_bytes.all.current") == 0);
      if (a.memory_reserved() != mapped) break;
    }
    MESSAGE(std::string(device) << ": " << ooms << " OOMs, " << flushes << " empty_cache");
    CHECK(ooms > 0);
    for (void* p : live) a.free(p);
    a.empty_cache();
    CHECK(a.memory_reserved() == 0);
    CHECK(a.snapshot().segments.empty());
  }
}
