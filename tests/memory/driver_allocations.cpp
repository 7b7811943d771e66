// The CUDA driver's own allocations in the placement model (VirtualAddressSpace::note_driver_allocations),
// as measured on the H100 (tools/probes/driver_allocations_probe.py, driver_first_launch_probe.py). The
// model's fresh process: free gaps of 2 MiB at T and 24 MiB at T + 74 MiB that no region holds, new regions
// (rounded up to 32 MiB) reserved downward from T - 414 MiB. The first launch frees the 414 MiB stretch below
// T (placed below the regions so far) unless a segment took the hole at its top before
// (docs/evidence/generated_segments/). Every allocation takes the lowest free gap of a region it fits, else
// the lowest free range no region holds (T's gaps, the stretch), else a new region.
#include <doctest/doctest.h>

#include "bytegrad/memory/virtual_address_space.h"

namespace bytegrad {
namespace {

constexpr size_t MiB = size_t{1} << 20;
constexpr uintptr_t kBase = uintptr_t{1} << 44;
constexpr size_t kSpan = size_t{64} << 30;
constexpr uintptr_t T = kBase + kSpan - 128 * MiB;  // the fresh process's first small segment
constexpr size_t kH100Threads = 132 * 2048;

TEST_CASE("the model without driver allocations: lowest gap first, then new regions below T - 414 MiB") {
  VirtualAddressSpace space(kBase, kSpan);
  CHECK(space.allocate(2 * MiB) == T);
  CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
  CHECK(space.allocate(20 * MiB) == T - 414 * MiB - 32 * MiB);  // 20 MiB in a new 32 MiB region
}

TEST_CASE("launch heap: the stretch freed, 512 MiB reserved below, its top 6 MiB the lowest gap") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  // The first launch frees the 414 MiB stretch, placed below the regions so far: [T - 828, T - 414) MiB;
  // 160 MiB below it the heap's reservation, [T - 1500, T - 988). Its top 8 MiB start at T - 996: the
  // driver's 2 MiB, then [T - 994, T - 988) free, the lowest gap.
  CHECK(space.allocate(2 * MiB) == T - 994 * MiB);
  CHECK(space.allocate(4 * MiB) == T - 992 * MiB);
  CHECK(space.allocate(2 * MiB) == T - 828 * MiB);  // the heap is full: the stretch, from its bottom
  // New regions go below the reservation; noting the heap again reserves nothing more.
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  CHECK(space.allocate(420 * MiB) == T - 1500 * MiB - 448 * MiB);  // 412 MiB left in the stretch
}

TEST_CASE("the stretch: free from the first launch on, below the regions made before it, after their rest") {
  VirtualAddressSpace space(kBase, kSpan);
  space.set_host_map_holes(true);  // host work before the launch started the CPU thread pool (host_work.h)
  CHECK(space.allocate(2 * MiB) == T);
  CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
  CHECK(space.allocate(20 * MiB) == T - 446 * MiB);  // a new 32 MiB region; 20 MiB is no segment for the hole
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  // The stretch: [T - 860, T - 446) MiB; the heap's free top: [T - 1026, T - 1020).
  CHECK(space.allocate(2 * MiB) == T - 1026 * MiB);
  CHECK(space.allocate(20 * MiB) == T - 860 * MiB);  // the heap's 4 MiB and the region's 12 are too small
  // The region's rest before the stretch below it, as PyTorch's forward fills the rest of .to()'s region in
  // a host hole above T before the stretch (c026, c057 of the generated sweep).
  CHECK(space.allocate(12 * MiB) == T - 426 * MiB);
  CHECK(space.allocate(12 * MiB) == T - 840 * MiB);  // then the stretch, from its bottom
}

TEST_CASE("EarlyRegions: regions made before the first launch in host holes, or below the stretch") {
  const auto run = [](EarlyRegions placement, bool holes = true) {
    VirtualAddressSpace space(kBase, kSpan);
    space.set_early_regions(placement);
    space.set_host_map_holes(holes);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
    CHECK(space.allocate(20 * MiB) == T - 446 * MiB);  // a new 32 MiB region below T - 414 MiB
    CHECK_FALSE(space.early_regions_decided());
    space.note_driver_allocations(kLaunchHeap, kH100Threads);
    CHECK(space.early_regions_decided());
    return space.allocate(20 * MiB);  // the stretch's bottom (the region's rest is 12 MiB)
  };
  CHECK(run(EarlyRegions::as_host_map) == T - 860 * MiB);  // [T - 860, T - 446): below the region
  // [T - 414, T): above the region; the heap's reservation 160 MiB below the region, its free top
  // [T - 612, T - 606) too small for 20 MiB.
  CHECK(run(EarlyRegions::reversed) == T - 414 * MiB);
  // A host map without holes (no CPU thread pool before the launch) puts them below the stretch; reversed,
  // in the holes.
  CHECK(run(EarlyRegions::as_host_map, false) == T - 414 * MiB);
  CHECK(run(EarlyRegions::reversed, false) == T - 860 * MiB);

  SUBCASE("without such regions both placements are one: nothing decided") {
    for (EarlyRegions placement : {EarlyRegions::as_host_map, EarlyRegions::reversed}) {
      VirtualAddressSpace space(kBase, kSpan);
      space.set_early_regions(placement);
      CHECK(space.allocate(2 * MiB) == T);
      space.note_driver_allocations(kLaunchHeap, kH100Threads);
      CHECK_FALSE(space.early_regions_decided());
      CHECK(space.allocate(20 * MiB) == T - 828 * MiB);
    }
  }
  SUBCASE("a segment in the hole: no stretch, nothing decided") {
    VirtualAddressSpace space(kBase, kSpan);
    space.set_early_regions(EarlyRegions::reversed);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(148 * MiB) == T - 574 * MiB);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);
    CHECK_FALSE(space.early_regions_decided());
  }
}

TEST_CASE("the hole below T: a segment of more than 24 and at most 148 MiB before the first launch") {
  SUBCASE("GPT-2 small's 148 MiB embedding takes it: no stretch at the launch") {
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(148 * MiB) == T - 414 * MiB - 160 * MiB);  // a 160 MiB region below the others
    space.note_driver_allocations(kLaunchHeap, kH100Threads);       // heap: [T - 1086, T - 574)
    CHECK(space.allocate(20 * MiB) == T + 74 * MiB);                // the heap's 6 MiB are too small
    CHECK(space.allocate(20 * MiB) == T - 1086 * MiB - 32 * MiB);
  }
  SUBCASE("150 MiB does not fit it: the stretch comes") {
    VirtualAddressSpace space(kBase, kSpan);
    space.set_host_map_holes(true);  // host work before the launch started the CPU thread pool (host_work.h)
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(150 * MiB) == T - 574 * MiB);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);  // stretch: [T - 988, T - 574)
    CHECK(space.allocate(20 * MiB) == T - 988 * MiB);
  }
  SUBCASE("after the first launch a segment of that size leaves the stretch as it is") {
    VirtualAddressSpace space(kBase, kSpan);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);  // stretch: [T - 828, T - 414)
    CHECK(space.allocate(100 * MiB) == T - 828 * MiB);
    CHECK(space.allocate(20 * MiB) == T - 728 * MiB);
  }
}

TEST_CASE("module globals: one 2 MiB chunk, the first time only; before the first launch in a region's gap") {
  SUBCASE("no region yet: the chunk waits for the launch heap and takes its free top") {
    VirtualAddressSpace space(kBase, kSpan);
    space.note_driver_allocations(kModuleGlobals, kH100Threads);
    CHECK(space.allocate(2 * MiB) == T);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);  // heap's free top [T - 994, T - 988)
    space.note_driver_allocations(kModuleGlobals, kH100Threads);
    CHECK(space.allocate(4 * MiB) == T - 992 * MiB);  // the chunk took T - 994, once
    CHECK(space.allocate(2 * MiB) == T - 828 * MiB);  // the stretch's bottom
  }
  SUBCASE("a region's free rest takes it") {
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(24 * MiB) == T + 74 * MiB);
    CHECK(space.allocate(20 * MiB) == T - 446 * MiB);
    space.note_driver_allocations(kModuleGlobals, kH100Threads);  // T - 426
    CHECK(space.allocate(2 * MiB) == T - 424 * MiB);
  }
}

TEST_CASE("kernel stack: 32 bytes x 132 SMs x 2048 threads = 8.25 MiB, placed as 10 MiB, once") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kKernelStack, kH100Threads);  // T's 2 MiB is too small: T + 74 MiB
  space.note_driver_allocations(kKernelStack, kH100Threads);
  CHECK(space.allocate(14 * MiB) == T + 84 * MiB);  // 24 - 10 MiB left of the top gap
  CHECK(space.allocate(2 * MiB) == T);
}

TEST_CASE("cuBLAS handles: 64 MiB each, and 129 KiB each from a shared 2 MiB chunk (15 handles to a chunk)") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kBlasHandle, kH100Threads);  // 64 MiB: a new region; the chunk: T
  CHECK(space.allocate(2 * MiB) == T + 74 * MiB);
  for (int handle = 2; handle <= 15; ++handle) space.note_driver_allocations(kBlasHandle, kH100Threads);
  CHECK(space.allocate(2 * MiB) == T + 76 * MiB);            // 15 x 129 KiB fit in one chunk: no second chunk yet
  space.note_driver_allocations(kBlasHandle, kH100Threads);  // the 16th takes a new chunk
  CHECK(space.allocate(2 * MiB) == T + 80 * MiB);
  // Every handle's 64 MiB was a region of its own, 16 x 64 MiB below T - 414 MiB.
  CHECK(space.allocate(32 * MiB) == T - 414 * MiB - 16 * 64 * MiB - 32 * MiB);
  // Modules loaded after a handle put their globals in its chunk.
  space.note_driver_allocations(kModuleGlobals, kH100Threads);
  CHECK(space.allocate(2 * MiB) == T + 82 * MiB);
}

TEST_CASE("one note, several allocations, in the order globals, launch heap, stack") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kModuleGlobals | kLaunchHeap | kKernelStack, kH100Threads);
  // The chunk found no region's gap before the heap, so it took the heap's free top, T - 994 MiB; the stack
  // the stretch's bottom, T - 828 MiB (the heap's 4 MiB left are too small).
  CHECK(space.allocate(4 * MiB) == T - 992 * MiB);
  CHECK(space.allocate(14 * MiB) == T - 818 * MiB);
}

}  // namespace
}  // namespace bytegrad
