// Where a simulated device places its segments. Best fit breaks ties between equal free blocks by
// address, so a simulated card must hand out segment addresses in the order a real one would, or the
// same program can fragment differently. This models what the CUDA driver was measured doing on the
// H100 (tools/probe_cuda_addresses.py, tools/pytorch_random_trace.py): every allocation takes the
// lowest-addressed free gap it fits in; when none fits, a new region of the size rounded up to 32 MiB is
// reserved below all earlier ones, the allocation takes its start and the rest stays free for later
// (smaller) allocations. A fresh process starts with two free gaps the driver left at the top: 2 MiB at
// T and 24 MiB at T + 74 MiB, and the first region ends at T - 414 MiB (fitted to 12 recorded runs; the
// second gap was seen to hold at least 24 and less than 30 MiB). The driver takes regions from the
// process's address map, so host mappings made meanwhile move them: PyTorch's CPU thread pool makes glibc
// arenas 128 MiB apart whose holes later regions fill, in an order that depends on thread timing
// (tools/probes/driver_placement_probe.py). That part is not modelled. sim and meta place their segments
// here; a real GPU keeps one beside the driver for best fit's ties (RawMemory::tie_address).
//
// The driver and cuBLAS allocate for themselves from the same addresses, and so move later segments
// (tools/probes/driver_allocations_probe.py and driver_first_launch_probe.py, which asked the driver for
// every allocation between PyTorch's segments after each op; recorded in
// docs/evidence/driver_placement/). DriverAllocation names what a kernel launch or a new
// cuBLAS handle makes it allocate; each is placed by the rule above, except the launch heap, which comes
// with a reservation of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "bytegrad/memory/raw_memory.h"

namespace bytegrad {

class VirtualAddressSpace {
 public:
  static constexpr size_t kRegionGranularity = size_t{32} << 20;

  // Manages [base, base + span), span > 128 MiB.
  VirtualAddressSpace(uintptr_t base, size_t span);
  // A span for a card of `total_bytes`: room for it several times over, since regions are rounded up and
  // gaps can strand space, and for ten expandable segments (each reserves 1 1/8 of the card, as PyTorch's;
  // every private pool's small and large pools have their own), which a real GPU's address space holds.
  static size_t span_for(size_t total_bytes);
  // The least span such a card works with: four times its memory, at least 64 GiB.
  static size_t least_span_for(size_t total_bytes);

  // The address for a new segment of `bytes`, or 0 when the span is exhausted.
  uintptr_t allocate(size_t bytes);
  void release(uintptr_t address, size_t bytes);
  // Places the driver's allocations `what` (DriverAllocation flags, applied in their order above) for a
  // card that holds `threads_on_card` threads at once. One-time allocations already made are not repeated.
  void note_driver_allocations(uint32_t what, size_t threads_on_card);

 private:
  void add_gap(uintptr_t address, size_t bytes);
  std::map<uintptr_t, size_t> gaps_;  // free ranges inside reserved regions, by address
  uintptr_t bottom_;                  // start of the lowest region reserved so far
  uintptr_t limit_;
  uint32_t driver_done_ = 0;    // one-time DriverAllocation flags already placed
  bool globals_chunk_ = false;  // a 2 MiB chunk of small driver allocations exists
  size_t blas_chunk_left_ = 0;  // room left in cuBLAS's chunk
};

}  // namespace bytegrad
