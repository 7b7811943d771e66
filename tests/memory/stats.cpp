// memory_stats() (reference section 6): exactly the 122 keys of 2.11, their initial values, the Stat rules
// (own peaks per pool type, net inactive_split changes), the resets, and the API's edge cases.
#include <doctest/doctest.h>

#include <stdexcept>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// The "stats_keys" list of shared/golden/scenarios/seed002_small_linear.json (notes), in its order:
// memory_stats() of PyTorch 2.11, sorted by key.
const std::vector<std::string> kGoldenStatsKeys = {
    "active.all.allocated",
    "active.all.current",
    "active.all.freed",
    "active.all.peak",
    "active.large_pool.allocated",
    "active.large_pool.current",
    "active.large_pool.freed",
    "active.large_pool.peak",
    "active.small_pool.allocated",
    "active.small_pool.current",
    "active.small_pool.freed",
    "active.small_pool.peak",
    "active_bytes.all.allocated",
    "active_bytes.all.current",
    "active_bytes.all.freed",
    "active_bytes.all.peak",
    "active_bytes.large_pool.allocated",
    "active_bytes.large_pool.current",
    "active_bytes.large_pool.freed",
    "active_bytes.large_pool.peak",
    "active_bytes.small_pool.allocated",
    "active_bytes.small_pool.current",
    "active_bytes.small_pool.freed",
    "active_bytes.small_pool.peak",
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.current",
    "allocated_bytes.all.freed",
    "allocated_bytes.all.peak",
    "allocated_bytes.large_pool.allocated",
    "allocated_bytes.large_pool.current",
    "allocated_bytes.large_pool.freed",
    "allocated_bytes.large_pool.peak",
    "allocated_bytes.small_pool.allocated",
    "allocated_bytes.small_pool.current",
    "allocated_bytes.small_pool.freed",
    "allocated_bytes.small_pool.peak",
    "allocation.all.allocated",
    "allocation.all.current",
    "allocation.all.freed",
    "allocation.all.peak",
    "allocation.large_pool.allocated",
    "allocation.large_pool.current",
    "allocation.large_pool.freed",
    "allocation.large_pool.peak",
    "allocation.small_pool.allocated",
    "allocation.small_pool.current",
    "allocation.small_pool.freed",
    "allocation.small_pool.peak",
    "inactive_split.all.allocated",
    "inactive_split.all.current",
    "inactive_split.all.freed",
    "inactive_split.all.peak",
    "inactive_split.large_pool.allocated",
    "inactive_split.large_pool.current",
    "inactive_split.large_pool.freed",
    "inactive_split.large_pool.peak",
    "inactive_split.small_pool.allocated",
    "inactive_split.small_pool.current",
    "inactive_split.small_pool.freed",
    "inactive_split.small_pool.peak",
    "inactive_split_bytes.all.allocated",
    "inactive_split_bytes.all.current",
    "inactive_split_bytes.all.freed",
    "inactive_split_bytes.all.peak",
    "inactive_split_bytes.large_pool.allocated",
    "inactive_split_bytes.large_pool.current",
    "inactive_split_bytes.large_pool.freed",
    "inactive_split_bytes.large_pool.peak",
    "inactive_split_bytes.small_pool.allocated",
    "inactive_split_bytes.small_pool.current",
    "inactive_split_bytes.small_pool.freed",
    "inactive_split_bytes.small_pool.peak",
    "max_split_size",
    "num_alloc_retries",
    "num_device_alloc",
    "num_device_free",
    "num_ooms",
    "num_sync_all_streams",
    "oversize_allocations.allocated",
    "oversize_allocations.current",
    "oversize_allocations.freed",
    "oversize_allocations.peak",
    "oversize_segments.allocated",
    "oversize_segments.current",
    "oversize_segments.freed",
    "oversize_segments.peak",
    "requested_bytes.all.allocated",
    "requested_bytes.all.current",
    "requested_bytes.all.freed",
    "requested_bytes.all.peak",
    "requested_bytes.large_pool.allocated",
    "requested_bytes.large_pool.current",
    "requested_bytes.large_pool.freed",
    "requested_bytes.large_pool.peak",
    "requested_bytes.small_pool.allocated",
    "requested_bytes.small_pool.current",
    "requested_bytes.small_pool.freed",
    "requested_bytes.small_pool.peak",
    "reserved_bytes.all.allocated",
    "reserved_bytes.all.current",
    "reserved_bytes.all.freed",
    "reserved_bytes.all.peak",
    "reserved_bytes.large_pool.allocated",
    "reserved_bytes.large_pool.current",
    "reserved_bytes.large_pool.freed",
    "reserved_bytes.large_pool.peak",
    "reserved_bytes.small_pool.allocated",
    "reserved_bytes.small_pool.current",
    "reserved_bytes.small_pool.freed",
    "reserved_bytes.small_pool.peak",
    "segment.all.allocated",
    "segment.all.current",
    "segment.all.freed",
    "segment.all.peak",
    "segment.large_pool.allocated",
    "segment.large_pool.current",
    "segment.large_pool.freed",
    "segment.large_pool.peak",
    "segment.small_pool.allocated",
    "segment.small_pool.current",
    "segment.small_pool.freed",
    "segment.small_pool.peak",
};

}  // namespace

TEST_CASE("memory_stats has exactly the 122 keys of PyTorch 2.11, in sorted order") {
  REQUIRE(kGoldenStatsKeys.size() == 122);
  const auto stats = make_allocator()->memory_stats();
  std::vector<std::string> keys;
  for (const auto& [key, value] : stats) keys.push_back(key);
  CHECK(keys == kGoldenStatsKeys);
}

TEST_CASE("memory_stats right after construction: all 0 except max_split_size = -1 (measured)") {
  for (const auto& [key, value] : make_allocator()->memory_stats()) {
    INFO(key);
    CHECK(value == (key == "max_split_size" ? -1 : 0));
  }
}

TEST_CASE("each pool type keeps its own peak; all.peak is not small.peak + large.peak") {
  auto allocator = make_allocator();
  void* small = allocator->malloc(1);  // small: 512
  allocator->free(small);
  void* large = allocator->malloc(2 * MiB);  // large: 2097152 (never together with the small block)
  CHECK(stat(*allocator, "allocated_bytes.small_pool.peak") == 512);
  CHECK(stat(*allocator, "allocated_bytes.large_pool.peak") == 2097152);
  CHECK(stat(*allocator, "allocated_bytes.all.peak") == 2097152);  // not 512 + 2097152
  CHECK(stat(*allocator, "allocated_bytes.all.allocated") == 512 + 2097152);
  CHECK(stat(*allocator, "allocated_bytes.all.freed") == 512);
  allocator->free(large);
}

TEST_CASE("inactive_split accumulators record net changes (5.2)") {
  auto allocator = make_allocator();
  // Three blocks in one small segment: [a 512][b 512][c 512][tail 2097152 - 1536].
  void* a = allocator->malloc(1);
  void* b = allocator->malloc(1);
  void* c = allocator->malloc(1);
  // The first split created the free tail (count +1, bytes +2096640); each later split shrank it by 512.
  CHECK(stat(*allocator, "inactive_split.all.allocated") == 1);
  CHECK(stat(*allocator, "inactive_split_bytes.all.allocated") == 2096640);
  CHECK(stat(*allocator, "inactive_split_bytes.all.freed") == 1024);
  CHECK(stat(*allocator, "inactive_split_bytes.all.current") == 2097152 - 1536);
  allocator->free(b);  // no free neighbour: net +1 block, +512 bytes
  CHECK(stat(*allocator, "inactive_split.all.current") == 2);
  CHECK(stat(*allocator, "inactive_split.all.allocated") == 2);
  allocator->free(c);  // absorbs b (-1, -512) and the tail (-1, -(2097152 - 1536)), then is split (+1, +merged):
                       // net -1 block, +512 bytes
  CHECK(stat(*allocator, "inactive_split.all.current") == 1);
  CHECK(stat(*allocator, "inactive_split.all.allocated") == 2);
  CHECK(stat(*allocator, "inactive_split.all.freed") == 1);
  CHECK(stat(*allocator, "inactive_split_bytes.all.current") == 2097152 - 512);
  CHECK(stat(*allocator, "inactive_split_bytes.all.allocated") == 2096640 + 512 + 512);
  CHECK(stat(*allocator, "inactive_split_bytes.all.freed") == 1024);
  allocator->free(a);  // the segment becomes whole: net -1 block, -(2097152 - 512) bytes
  CHECK(stat(*allocator, "inactive_split.all.current") == 0);
  CHECK(stat(*allocator, "inactive_split.all.freed") == 2);
  CHECK(stat(*allocator, "inactive_split_bytes.all.current") == 0);
  CHECK(stat(*allocator, "inactive_split_bytes.all.freed") == 1024 + 2097152 - 512);
}

TEST_CASE("reset_peak_stats and reset_accumulated_stats (section 6, Resets)") {
  auto allocator = make_allocator({}, {64 * MiB, 0});
  void* big = allocator->malloc(30 * MiB);
  void* kept = allocator->malloc(1);
  allocator->free(big);
  allocator->empty_cache();
  try {
    allocator->malloc(100 * MiB);
  } catch (const std::exception&) {}
  const auto before = allocator->memory_stats();
  CHECK(before.at("allocated_bytes.all.peak") == 30 * MiB + 512);

  SUBCASE("reset_peak_stats: peak = current everywhere; nothing else moves") {
    allocator->reset_peak_stats();
    const auto after = allocator->memory_stats();
    for (const auto& [key, value] : after) {
      INFO(key);
      const bool is_peak = key.size() > 5 && key.compare(key.size() - 5, 5, ".peak") == 0;
      if (is_peak) CHECK(value == after.at(key.substr(0, key.size() - 5) + ".current"));
      else CHECK(value == before.at(key));
    }
    CHECK(allocator->max_memory_allocated() == 512);
    CHECK(allocator->max_memory_reserved() == 2 * MiB);
  }
  SUBCASE("reset_accumulated_stats: allocated = freed = 0 and the counters 0; current and peak stay") {
    allocator->reset_accumulated_stats();
    const auto after = allocator->memory_stats();
    for (const auto& [key, value] : after) {
      INFO(key);
      auto ends_with = [&](const char* suffix) {
        const std::string s(suffix);
        return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
      };
      if (ends_with(".allocated") || ends_with(".freed") || key.rfind("num_", 0) == 0) CHECK(value == 0);
      else CHECK(value == before.at(key));
    }
    CHECK(after.at("max_split_size") == -1);
  }
  allocator->free(kept);
}

TEST_CASE("API edge cases") {
  auto allocator = make_allocator();
  allocator->free(nullptr);  // ignored
  CHECK(stat(*allocator, "num_device_alloc") == 0);
  void* p = allocator->malloc(1);
  CHECK(allocator->block_size(p) == 512);
  int local = 0;
  CHECK_THROWS_AS(allocator->free(&local), std::invalid_argument);  // not ours
  allocator->free(p);
  CHECK(allocator->block_size(p) == 0);
  CHECK_THROWS_AS(allocator->free(p), std::invalid_argument);  // double free
  CHECK(stat(*allocator, "allocation.all.current") == 0);
  CHECK(stat(*allocator, "allocation.all.freed") == 1);
}

TEST_CASE("streams: a free block is only reused by a request on its own stream (section 11)") {
  auto allocator = make_allocator();
  void* p = allocator->malloc(4096, /*stream=*/0);
  allocator->free(p);
  void* q = allocator->malloc(4096, /*stream=*/1);  // stream 0's cache is not visible: a new segment
  CHECK(stat(*allocator, "num_device_alloc") == 2);
  CHECK(q != p);
  void* r = allocator->malloc(4096, /*stream=*/0);  // stream 0 reuses its own block
  CHECK(r == p);
  const MemorySnapshot snap = allocator->snapshot();
  REQUIRE(snap.segments.size() == 2);
  for (const SegmentInfo& segment : snap.segments)
    CHECK(segment.stream == (segment.address == reinterpret_cast<uintptr_t>(p) ? 0u : 1u));
}
