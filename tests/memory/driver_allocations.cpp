// The CUDA driver's own allocations in the placement model (VirtualAddressSpace::note_driver_allocations),
// as measured on the H100 (tools/probes/driver_allocations_probe.py, driver_first_launch_probe.py). The
// model's fresh process: free gaps of 2 MiB at T and 24 MiB at T + 74 MiB that no region holds, new regions
// (rounded up to 32 MiB) reserved downward from T - 414 MiB, or, where the host's map has holes, downward from
// T + 4 GiB. The first launch frees the 414 MiB stretch below T unless a segment took the hole at its top before
// (docs/evidence/generated_segments/). Every allocation takes the lowest free gap of a region it fits, else
// the lowest free range no region holds (T's gaps, the stretch), else a new region.
#include <doctest/doctest.h>

#include "bytegrad/memory/host_work.h"
#include "bytegrad/memory/virtual_address_space.h"

namespace bytegrad {
namespace {

constexpr size_t MiB = size_t{1} << 20;
constexpr uintptr_t kBase = uintptr_t{1} << 44;
constexpr size_t kSpan = size_t{64} << 30;
constexpr uintptr_t T = kBase + kSpan - VirtualAddressSpace::kAboveAnchor;  // a fresh process's first small segment
constexpr size_t kH100Threads = 132 * 2048;
constexpr uintptr_t kHostHoles = T + VirtualAddressSpace::kHostHolesAbove;  // the host holes' series starts here

TEST_CASE("the model without driver allocations: lowest gap first, then new regions below T - 414 MiB") {
  VirtualAddressSpace space(kBase, kSpan);
  CHECK(space.allocate(2 * MiB) == T);
  CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
  CHECK(space.allocate(20 * MiB) == T - 414 * MiB - 32 * MiB);  // 20 MiB in a new 32 MiB region
}

TEST_CASE("launch heap: the stretch freed, 512 MiB reserved below, its top 6 MiB the lowest gap") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  // The first launch frees the 414 MiB stretch: [T - 414, T) MiB; 160 MiB below it the heap's reservation,
  // [T - 1086, T - 574). Its top 8 MiB start at T - 582: the driver's 2 MiB, then [T - 580, T - 574) free,
  // the lowest gap.
  CHECK(space.allocate(2 * MiB) == T - 580 * MiB);
  CHECK(space.allocate(4 * MiB) == T - 578 * MiB);
  CHECK(space.allocate(2 * MiB) == T - 414 * MiB);  // the heap is full: the stretch, from its bottom
  // New regions go below the reservation; noting the heap again reserves nothing more.
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  CHECK(space.allocate(420 * MiB) == T - 1086 * MiB - 448 * MiB);  // 412 MiB left in the stretch
}

TEST_CASE("the stretch: free from the first launch on, after the rest of the regions made before it") {
  VirtualAddressSpace space(kBase, kSpan);
  space.set_host_map_holes(true);  // host work before the launch started the CPU thread pool (host_work.h)
  CHECK(space.allocate(2 * MiB) == T);
  CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
  // A new 32 MiB region (20 MiB is no segment for the hole) in the host's holes: the first of the series.
  CHECK(space.allocate(20 * MiB) == kHostHoles - 32 * MiB);
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  // The stretch: [T - 414, T) MiB, 160 MiB below it the heap's reservation [T - 1086, T - 574), its free
  // top [T - 580, T - 574).
  CHECK(space.allocate(2 * MiB) == T - 580 * MiB);
  CHECK(space.allocate(20 * MiB) == T - 414 * MiB);  // the heap's 4 MiB and the region's 12 are too small
  // The region's rest before the stretch, as PyTorch's forward fills the rest of .to()'s region in a host
  // hole above T before the stretch (c026, c057 of the generated sweep).
  CHECK(space.allocate(12 * MiB) == kHostHoles - 12 * MiB);
  CHECK(space.allocate(12 * MiB) == T - 394 * MiB);  // then the stretch, upwards
}

TEST_CASE("EarlyRegions: regions made before the first launch in host holes above T, or below the stretch") {
  // The first region's address, and where the next 20 MiB go after the launch.
  const auto run = [](EarlyRegions placement, bool holes = true) {
    VirtualAddressSpace space(kBase, kSpan);
    space.set_early_regions(placement);
    space.set_host_map_holes(holes);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
    const uintptr_t region = space.allocate(20 * MiB);
    CHECK_FALSE(space.early_regions_decided());
    space.note_driver_allocations(kLaunchHeap, kH100Threads);
    CHECK(space.early_regions_decided());
    // The stretch stays [T - 414, T) either way and comes after the region's 12 MiB rest.
    CHECK(space.allocate(20 * MiB) == T - 414 * MiB);
    return region;
  };
  CHECK(run(EarlyRegions::as_host_map) == kHostHoles - 32 * MiB);  // above T and its gaps
  CHECK(run(EarlyRegions::reversed) == T - 446 * MiB);             // below the stretch
  // A host map without holes (no CPU thread pool before the launch) puts them below the stretch; reversed,
  // in the holes.
  CHECK(run(EarlyRegions::as_host_map, false) == T - 446 * MiB);
  CHECK(run(EarlyRegions::reversed, false) == kHostHoles - 32 * MiB);

  SUBCASE("the series descends, until a segment takes the hole below T") {
    VirtualAddressSpace space(kBase, kSpan);
    space.set_host_map_holes(true);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
    CHECK(space.allocate(20 * MiB) == kHostHoles - 32 * MiB);
    CHECK(space.allocate(20 * MiB) == kHostHoles - 64 * MiB);     // each region below the one before
    CHECK(space.allocate(40 * MiB) == T - 414 * MiB - 64 * MiB);  // the hole below T
    // A process whose hole was taken keeps its regions below the others (header): the hole's region's
    // 24 MiB rest first, then a new one.
    CHECK(space.allocate(20 * MiB) == T - 438 * MiB);
    CHECK(space.allocate(20 * MiB) == T - 414 * MiB - 96 * MiB);
  }
  SUBCASE("without such regions both placements are one: nothing decided") {
    for (EarlyRegions placement : {EarlyRegions::as_host_map, EarlyRegions::reversed}) {
      VirtualAddressSpace space(kBase, kSpan);
      space.set_early_regions(placement);
      CHECK(space.allocate(2 * MiB) == T);
      space.note_driver_allocations(kLaunchHeap, kH100Threads);
      CHECK_FALSE(space.early_regions_decided());
      CHECK(space.allocate(20 * MiB) == T - 414 * MiB);
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
  SUBCASE("a segment in the hole, then regions: below the others, reversed in the host's holes") {
    for (EarlyRegions placement : {EarlyRegions::as_host_map, EarlyRegions::reversed}) {
      for (bool holes : {false, true}) {
        VirtualAddressSpace space(kBase, kSpan);
        space.set_early_regions(placement);
        space.set_host_map_holes(holes);
        CHECK(space.allocate(2 * MiB) == T);
        CHECK(space.allocate(148 * MiB) == T - 574 * MiB);
        CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
        const uintptr_t region = space.allocate(20 * MiB);
        CHECK(region == (placement == EarlyRegions::reversed ? kHostHoles - 32 * MiB : T - 606 * MiB));
        space.note_driver_allocations(kLaunchHeap, kH100Threads);
        CHECK(space.early_regions_decided());
      }
    }
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
    // A region of 160 MiB: too large for the host's 64 MiB holes between arenas, so below the stretch.
    CHECK(space.allocate(150 * MiB) == T - 414 * MiB - 160 * MiB);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);  // stretch: [T - 414, T), above that region
    CHECK(space.allocate(20 * MiB) == T - 414 * MiB);
  }
  SUBCASE("a whole number of regions does not take it: a region of its own (first_large_segment_probe.py)") {
    for (const size_t size : {size_t{32}, size_t{64}, size_t{96}, size_t{128}}) {
      CAPTURE(size);
      VirtualAddressSpace space(kBase, kSpan);
      space.set_host_map_holes(false);
      CHECK(space.allocate(size * MiB) == T - 414 * MiB - size * MiB);  // below the stretch, as the probe saw
      CHECK(space.allocate(2 * MiB) == T);
      space.note_driver_allocations(kLaunchHeap, kH100Threads);  // the stretch is freed: [T - 414, T)
      CHECK(space.allocate(20 * MiB) == T - 414 * MiB);
    }
    VirtualAddressSpace with_pool(kBase, kSpan);  // the probe's --pool: 32 MiB into a host hole, above T
    with_pool.set_host_map_holes(true);
    CHECK(with_pool.allocate(32 * MiB) == kHostHoles - 32 * MiB);
    VirtualAddressSpace thirty(kBase, kSpan);  // 30 MiB is not a whole region: it takes the hole (no stretch)
    thirty.set_host_map_holes(false);
    CHECK(thirty.allocate(30 * MiB) == T - 414 * MiB - 32 * MiB);  // the hole, represented below the others
    thirty.note_driver_allocations(kLaunchHeap, kH100Threads);
    CHECK(thirty.allocate(20 * MiB) != T - 414 * MiB);
  }
  SUBCASE("after the first launch a segment of that size leaves the stretch as it is") {
    VirtualAddressSpace space(kBase, kSpan);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);  // stretch: [T - 414, T)
    CHECK(space.allocate(100 * MiB) == T - 414 * MiB);
    CHECK(space.allocate(20 * MiB) == T - 314 * MiB);
  }
}

TEST_CASE("module globals: one 2 MiB chunk, the first time only; before the first launch in a region's gap") {
  SUBCASE("no region yet: the chunk waits for the launch heap and takes its free top") {
    VirtualAddressSpace space(kBase, kSpan);
    space.note_driver_allocations(kModuleGlobals, kH100Threads);
    CHECK(space.allocate(2 * MiB) == T);
    space.note_driver_allocations(kLaunchHeap, kH100Threads);  // heap's free top [T - 580, T - 574)
    space.note_driver_allocations(kModuleGlobals, kH100Threads);
    CHECK(space.allocate(4 * MiB) == T - 578 * MiB);  // the chunk took T - 580, once
    CHECK(space.allocate(2 * MiB) == T - 414 * MiB);  // the stretch's bottom
  }
  SUBCASE("a region's free rest takes it") {
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(24 * MiB) == T + 74 * MiB);
    CHECK(space.allocate(20 * MiB) == T - 446 * MiB);
    space.note_driver_allocations(kModuleGlobals, kH100Threads);  // T - 426
    CHECK(space.allocate(2 * MiB) == T - 424 * MiB);
  }
  // The generated sweep's recordings (docs/evidence/generated_segments/): where `.to()` left part of the gap at
  // T + 74 MiB, the forward's next segment there sits 2 MiB above `.to()`'s last (c054: +90 after +86; c060: +96
  // after a 20 MiB segment at +74); where it left just 2 MiB (c017: a 20 MiB segment at +74, a small one at +94),
  // the forward's first small segment is a new region.
  SUBCASE("no region, segments at T: the lowest free 2 MiB of the gap at T + 74 MiB takes it") {
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
    CHECK(space.allocate(2 * MiB) == T);
    space.note_driver_allocations(kModuleGlobals, kH100Threads);  // the data's random fill: [T + 94, T + 96)
    CHECK(space.allocate(2 * MiB) == T + 96 * MiB);
  }
  SUBCASE("the gap's last 2 MiB taken: the next segment is a new region") {
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(2 * MiB) == T);
    CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
    CHECK(space.allocate(2 * MiB) == T + 94 * MiB);
    space.note_driver_allocations(kModuleGlobals, kH100Threads);  // [T + 96, T + 98)
    CHECK(space.allocate(2 * MiB) == T - 446 * MiB);
  }
  SUBCASE("a segment took the hole below T: the ranges at T are not a fresh process's, the chunk waits") {
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(30 * MiB) == T - 414 * MiB - 32 * MiB);  // the hole, represented below the others
    CHECK(space.allocate(2 * MiB) == T - 416 * MiB);              // its region's rest stands for T
    space.note_driver_allocations(kModuleGlobals, kH100Threads);  // nothing at T taken
    CHECK(space.allocate(2 * MiB) == T);
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
  // The chunk found no region's gap before the heap, so it took the heap's free top, T - 580 MiB; the stack
  // the stretch's bottom, T - 414 MiB (the heap's 4 MiB left are too small).
  CHECK(space.allocate(4 * MiB) == T - 578 * MiB);
  CHECK(space.allocate(14 * MiB) == T - 404 * MiB);
}

// The host blocks `.to()` frees (memory/host_work.h): parameters of 128 KiB or more, each its own mapping made
// before the device's first storage, so above the driver's regions. Once what is freed of them holds a new
// region and 24 MiB more (kFreedSpanSlack), a new region goes there, in the series above T, rather than below.
TEST_CASE("the hole the host's freed blocks leave above the regions takes new regions once it holds one") {
  forget_host_work();  // this thread's host map, as in a fresh process
  VirtualAddressSpace space(kBase, kSpan);
  static const char parameters[4] = {};
  const auto free_parameter = [](const char* p, size_t bytes) {
    note_host_block(p, bytes);
    note_host_block_freed(p);
  };
  CHECK(space.allocate(2 * MiB) == T);
  CHECK(space.allocate(20 * MiB) == T + 74 * MiB);
  // 40 MiB + one page freed (glibc's 16-byte header rounds the mapping up): short of 32 + 24 MiB, below.
  free_parameter(&parameters[0], 40 * MiB);
  CHECK(host_freed_above_device() == 40 * MiB + 4096);
  CHECK(space.allocate(20 * MiB) == T - 414 * MiB - 32 * MiB);
  // 80 MiB + 2 pages: a 32 MiB region in the hole, the series' first; its 12 MiB rest a gap.
  free_parameter(&parameters[1], 40 * MiB);
  CHECK(space.allocate(20 * MiB) == kHostHoles - 32 * MiB);
  // 20 MiB of it taken: 76 MiB (20 + 32 + 24) still fit, then 96 do not.
  CHECK(space.allocate(20 * MiB) == kHostHoles - 64 * MiB);
  CHECK(space.allocate(20 * MiB) == T - 414 * MiB - 64 * MiB);
  // Blocks mapped after the first device storage lie below the regions: freeing them leaves no hole above.
  note_device_storage();
  free_parameter(&parameters[2], 64 * MiB);
  CHECK(host_freed_above_device() == 80 * MiB + 2 * 4096);
  forget_host_work();
}

TEST_CASE("glibc's threshold: a freed mapping raises it, so smaller blocks after it are not mapped on their own") {
  forget_host_work();
  static const char blocks[3] = {};
  note_host_block(&blocks[0], 127 * 1024);  // below 128 KiB: from the heap
  note_host_block_freed(&blocks[0]);
  CHECK(host_freed_above_device() == 0);
  note_host_block(&blocks[1], 4 * MiB);  // mapped; freeing it raises the threshold to 4 MiB
  note_host_block_freed(&blocks[1]);
  CHECK(host_freed_above_device() == 4 * MiB + 4096);
  note_host_block(&blocks[2], 2 * MiB);  // now from the heap
  note_host_block_freed(&blocks[2]);
  CHECK(host_freed_above_device() == 4 * MiB + 4096);
  note_host_block_freed(&blocks[2]);  // not known (freed already): nothing
  CHECK(host_freed_above_device() == 4 * MiB + 4096);
  forget_host_work();
  CHECK(host_freed_above_device() == 0);
}

TEST_CASE("NCCL's communicator takes what is left of the freed blocks' hole") {
  forget_host_work();
  static const char parameter = 0;
  note_host_block(&parameter, 1000 * MiB);
  note_host_block_freed(&parameter);
  {
    // Without a communicator, 700 MiB (a 704 MiB region) go to the hole above T: 1000 >= 704 + 24.
    VirtualAddressSpace space(kBase, kSpan);
    CHECK(space.allocate(700 * MiB) == kHostHoles - 704 * MiB);
  }
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kNcclCommunicator, kH100Threads);
  // After it, below NCCL's layout (free 10, 690 and 504 MiB below every region, new regions under it all).
  CHECK(space.allocate(700 * MiB) < T);
  forget_host_work();
}

}  // namespace
}  // namespace bytegrad
