// garbage_collection_threshold (reference section 8.2): with a memory fraction set, a malloc whose best-fit
// search failed first releases old, whole, free large-pool segments while reserved memory is above
// threshold * allowed; a block's age is the number of large-pool searches since it was cached.
#include <doctest/doctest.h>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

bool has_segment_at(const MemorySnapshot& snap, const void* ptr) {
  for (const SegmentInfo& segment : snap.segments)
    if (segment.address == reinterpret_cast<uintptr_t>(ptr)) return true;
  return false;
}

}  // namespace

TEST_CASE("garbage collection releases the cached segments at least as old as the average") {
  // 100 MiB device, fraction 1.0: allowed = 100 MiB; threshold 0.5: collect above 50 MiB reserved.
  auto allocator = make_allocator(AllocatorConfig::parse("garbage_collection_threshold:0.5"), {100 * MiB, 0});
  allocator->set_memory_fraction(1.0);

  void* a = allocator->malloc(12 * MiB);  // large-pool search #1 (miss): a 12 MiB segment
  void* b = allocator->malloc(30 * MiB);  // search #2 (miss): a 30 MiB segment
  allocator->free(a);                     // cached at search count 2
  // Search #3 misses (12 < 14). Reserved 42 MiB <= 50 MiB: nothing collected. A new 14 MiB segment.
  void* c = allocator->malloc(14 * MiB);
  CHECK(stat(*allocator, "num_device_free") == 0);
  allocator->free(b);  // cached at search count 3
  // Search #4 misses (30 < 40). Reserved 12 + 30 + 14 = 56 MiB > 50 MiB: target 6 MiB. Candidates: a (age
  // 4 - 2 = 2) and b (age 4 - 3 = 1), average 1.5: only a goes (12 MiB >= 6 MiB, so no second pass).
  // Then attempt A: 44 + 40 <= 100 MiB.
  void* d = allocator->malloc(40 * MiB);
  CHECK(d != nullptr);
  CHECK(stat(*allocator, "num_device_free") == 1);
  CHECK(stat(*allocator, "num_sync_all_streams") == 0);  // no flush: GC is not release_cached_blocks
  CHECK(stat(*allocator, "num_alloc_retries") == 0);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 88080384);  // 30 + 14 + 40 = 84 MiB
  const MemorySnapshot snap = allocator->snapshot();
  CHECK_FALSE(has_segment_at(snap, a));
  CHECK(has_segment_at(snap, b));
  allocator->free(c);
  allocator->free(d);
}

TEST_CASE("garbage collection needs a memory fraction") {
  // The same steps without set_memory_fraction: nothing is collected, the cache keeps all four segments.
  auto allocator = make_allocator(AllocatorConfig::parse("garbage_collection_threshold:0.5"), {100 * MiB, 0});
  void* a = allocator->malloc(12 * MiB);
  void* b = allocator->malloc(30 * MiB);
  allocator->free(a);
  allocator->malloc(14 * MiB);
  allocator->free(b);
  allocator->malloc(40 * MiB);
  CHECK(stat(*allocator, "num_device_free") == 0);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 100663296);  // 12 + 30 + 14 + 40 = 96 MiB
}

TEST_CASE("garbage collection only considers whole free segments of the large pool") {
  auto allocator = make_allocator(AllocatorConfig::parse("garbage_collection_threshold:0.1"), {100 * MiB, 0});
  allocator->set_memory_fraction(1.0);       // collect above 10 MiB reserved
  void* small = allocator->malloc(1);        // a 2 MiB small segment
  allocator->free(small);                    // whole and free, but in the small pool
  void* split = allocator->malloc(5 * MiB);  // a 20 MiB large segment, split (15 MiB free tail)
  // Reserved 22 MiB > 10 MiB, yet there is no candidate: the small segment is not in the large pool, the
  // large one is split. A new 30 MiB segment is made without releasing anything.
  allocator->malloc(30 * MiB);
  CHECK(stat(*allocator, "num_device_free") == 0);
  CHECK(stat(*allocator, "segment.all.current") == 3);
  allocator->free(split);
}
