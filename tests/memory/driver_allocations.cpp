// The CUDA driver's own allocations in the placement model (VirtualAddressSpace::note_driver_allocations),
// as measured on the H100 (tools/probes/driver_allocations_probe.py, driver_first_launch_probe.py). The
// model's fresh process: free gaps of 2 MiB at T and 24 MiB at T + 74 MiB, new regions (rounded up to
// 32 MiB) reserved downward from T - 414 MiB; every allocation takes the lowest gap it fits.
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

TEST_CASE("launch heap: 512 MiB reserved below, its top 6 MiB the lowest gap, taken before the older gaps") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  // Reserved: [T - 926, T - 414) MiB. Its top 8 MiB start at T - 422: the driver's 2 MiB, then
  // [T - 420, T - 414) free, below the fresh process's gaps at T and T + 74.
  CHECK(space.allocate(2 * MiB) == T - 420 * MiB);
  CHECK(space.allocate(4 * MiB) == T - 418 * MiB);
  CHECK(space.allocate(2 * MiB) == T);  // the heap is full: the old gaps again
  // New regions go below the reservation; noting the heap again reserves nothing more.
  space.note_driver_allocations(kLaunchHeap, kH100Threads);
  CHECK(space.allocate(32 * MiB) == T - 414 * MiB - 512 * MiB - 32 * MiB);
}

TEST_CASE("module globals: one 2 MiB chunk in the lowest gap, the first time only") {
  VirtualAddressSpace space(kBase, kSpan);
  space.note_driver_allocations(kModuleGlobals, kH100Threads);
  space.note_driver_allocations(kModuleGlobals, kH100Threads);
  CHECK(space.allocate(2 * MiB) == T + 74 * MiB);  // T went to the chunk, once
  CHECK(space.allocate(2 * MiB) == T + 76 * MiB);
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
  // The chunk took T (before the heap existed); the stack took T + 74 (the heap's 6 MiB are too small).
  CHECK(space.allocate(6 * MiB) == T - 420 * MiB);
  CHECK(space.allocate(14 * MiB) == T + 84 * MiB);
}

}  // namespace
}  // namespace bytegrad
