// Reference section 8.4 (measured with max_split_size_mb:100) and 8.3 (release_available_cached_blocks,
// the extra attempt B that only exists when max_split_size is set).
#include <doctest/doctest.h>

#include "helpers.h"
#include "bytegrad/memory/out_of_memory.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("8.4 max_split_size_mb:100, measured behaviour") {
  auto allocator = make_allocator(AllocatorConfig::parse("max_split_size_mb:100"));
  CHECK(stat(*allocator, "max_split_size") == 104857600);

  // A 150 MiB alloc gives a 150 MiB oversize segment and an oversize allocation.
  void* big = allocator->malloc(150 * MiB);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 157286400);  // 150 MiB
  CHECK(stat(*allocator, "allocated_bytes.all.current") == 157286400);
  CHECK(stat(*allocator, "oversize_segments.current") == 1);
  CHECK(stat(*allocator, "oversize_allocations.current") == 1);

  allocator->free(big);
  CHECK(stat(*allocator, "oversize_allocations.current") == 0);
  CHECK(stat(*allocator, "oversize_segments.current") == 1);  // still cached

  SUBCASE("140 MiB reuses the whole 150 MiB block unsplit (150 < 140 + 20)") {
    void* p = allocator->malloc(140 * MiB);
    CHECK(p == big);
    CHECK(stat(*allocator, "num_device_alloc") == 1);
    CHECK(stat(*allocator, "allocated_bytes.all.current") == 157286400);
    CHECK(stat(*allocator, "requested_bytes.all.current") == 146800640);  // 140 MiB
    CHECK(stat(*allocator, "inactive_split.all.current") == 0);           // nothing split off
    CHECK(stat(*allocator, "oversize_allocations.current") == 1);
    const MemorySnapshot snap = allocator->snapshot();
    REQUIRE(snap.segments.size() == 1);
    CHECK(snap.segments[0].blocks.size() == 1);
  }

  SUBCASE("50 MiB does not take the free 150 MiB block: a new 50 MiB segment") {
    void* p = allocator->malloc(50 * MiB);
    CHECK(p != big);
    CHECK(stat(*allocator, "num_device_alloc") == 2);
    CHECK(stat(*allocator, "segment.all.current") == 2);
    CHECK(stat(*allocator, "reserved_bytes.all.current") == 209715200);  // 150 MiB + 50 MiB
    CHECK(stat(*allocator, "allocated_bytes.all.current") == 52428800);  // 50 MiB
    CHECK(stat(*allocator, "oversize_allocations.current") == 0);        // 50 MiB < 100 MiB
    CHECK(stat(*allocator, "oversize_segments.current") == 1);
  }

  SUBCASE("120 MiB + 1 is refused the 150 MiB block and gets a new 122 MiB segment") {
    // 120 MiB + 1 rounds to 125829632 (120 MiB + 512), which is >= max_split_size; the free block is
    // 157286400 >= 125829632 + 20971520 = 146801152, so it is refused. The segment is ceil to 2 MiB: 122 MiB.
    void* p = allocator->malloc(120 * MiB + 1);
    CHECK(p != big);
    CHECK(stat(*allocator, "num_device_alloc") == 2);
    CHECK(stat(*allocator, "reserved_bytes.all.current") == 157286400 + 127926272);  // + 122 MiB
    // s >= max_split_size is never split: the whole 122 MiB block is allocated (4.7, 4.8).
    CHECK(allocator->block_size(p) == 127926272);
    CHECK(stat(*allocator, "allocated_bytes.all.current") == 127926272);
    CHECK(stat(*allocator, "requested_bytes.all.current") == 125829121);  // 120 MiB + 1
    CHECK(stat(*allocator, "oversize_segments.current") == 2);
    CHECK(stat(*allocator, "oversize_allocations.current") == 1);
  }
}

TEST_CASE("8.4: below-threshold requests still split ordinary segments") {
  auto allocator = make_allocator(AllocatorConfig::parse("max_split_size_mb:100"));
  // 30 MiB request: 30 MiB segment, whole. Free it, then 10 MiB takes it and splits (20 MiB > 1 MiB left).
  void* p = allocator->malloc(30 * MiB);
  allocator->free(p);
  void* q = allocator->malloc(10 * MiB);
  CHECK(q == p);
  CHECK(allocator->block_size(q) == 10 * MiB);
  CHECK(stat(*allocator, "inactive_split_bytes.all.current") == 20971520);  // 30 MiB - 10 MiB
  CHECK(stat(*allocator, "oversize_segments.current") == 0);
}

TEST_CASE("8.3 attempt B: release one cached oversize block large enough, not counted as a retry") {
  // Device of 250 MiB (no context). 150 MiB cached; 120 MiB + 1 needs a new 122 MiB segment:
  // 150 + 122 = 272 > 250, so attempt A fails. key = max(125829632, 100 MiB) = 125829632, and the cached
  // 150 MiB block is >= key: it is released, and attempt B (150 MiB freed: 122 <= 250) succeeds.
  auto allocator = make_allocator(AllocatorConfig::parse("max_split_size_mb:100"), {250 * MiB, 0});
  allocator->free(allocator->malloc(150 * MiB));
  void* p = allocator->malloc(120 * MiB + 1);
  CHECK(p != nullptr);
  CHECK(stat(*allocator, "num_device_free") == 1);
  CHECK(stat(*allocator, "num_alloc_retries") == 0);
  CHECK(stat(*allocator, "num_sync_all_streams") == 0);
  CHECK(stat(*allocator, "num_ooms") == 0);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 127926272);  // 122 MiB
  CHECK(stat(*allocator, "oversize_segments.current") == 1);
}

TEST_CASE("8.3: walking down releases oversize blocks even when they are not enough") {
  // Device of 300 MiB. 150 MiB cached; 200 MiB needs a 200 MiB segment: 350 > 300, attempt A fails.
  // key = 200 MiB; no cached block >= key, so walk down from the largest: release 150 MiB (>= 100 MiB);
  // 150 MiB < key, so attempt B is skipped, but the release stands. Then release_cached_blocks (sync +1)
  // and attempt C (retry +1) succeed.
  auto allocator = make_allocator(AllocatorConfig::parse("max_split_size_mb:100"), {300 * MiB, 0});
  allocator->free(allocator->malloc(150 * MiB));
  void* p = allocator->malloc(200 * MiB);
  CHECK(p != nullptr);
  CHECK(stat(*allocator, "num_device_free") == 1);
  CHECK(stat(*allocator, "num_alloc_retries") == 1);
  CHECK(stat(*allocator, "num_sync_all_streams") == 1);
  CHECK(stat(*allocator, "num_ooms") == 0);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 209715200);  // 200 MiB
}

TEST_CASE("8.3: without max_split_size there is no attempt B; only the flush frees cached segments") {
  // Default config on a 300 MiB device: 150 MiB cached; 200 MiB needs a 200 MiB segment (350 > 300), attempt
  // A fails; no attempt B; release_cached_blocks (sync +1) frees the 150 MiB; attempt C (retry +1) succeeds.
  // Compare the attempt-B case above, where the same kind of release came without a sync or a retry.
  auto allocator = make_allocator({}, {300 * MiB, 0});
  allocator->free(allocator->malloc(150 * MiB));
  void* p = allocator->malloc(200 * MiB);
  CHECK(p != nullptr);
  CHECK(stat(*allocator, "num_device_free") == 1);
  CHECK(stat(*allocator, "num_alloc_retries") == 1);
  CHECK(stat(*allocator, "num_sync_all_streams") == 1);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 209715200);  // 200 MiB
}

TEST_CASE("8.4 contrast: with the default config a cached 150 MiB block serves 120 MiB + 1, split") {
  auto allocator = make_allocator();
  void* big = allocator->malloc(150 * MiB);
  allocator->free(big);
  void* p = allocator->malloc(120 * MiB + 1);
  CHECK(p == big);
  CHECK(stat(*allocator, "num_device_alloc") == 1);
  // 125829632 allocated; the remainder 157286400 - 125829632 = 31456768 > 1 MiB is split off.
  CHECK(stat(*allocator, "allocated_bytes.all.current") == 125829632);
  CHECK(stat(*allocator, "inactive_split_bytes.all.current") == 31456768);
}
