// Where a simulated device places its segments. Best fit breaks ties between equal free blocks by
// address, so a simulated card must hand out segment addresses in the order a real one would, or the
// same program can fragment differently. This models what the CUDA driver was measured doing on the
// H100 (tools/probe_cuda_addresses.py, tools/pytorch_random_trace.py): every allocation takes the
// lowest-addressed free gap of the process's regions it fits in; when none fits, the lowest free range that
// no region holds (below); else a new region of the size rounded up to 32 MiB is reserved below all earlier
// ones, the allocation takes its start and the rest stays free for later (smaller) allocations. A fresh
// process starts with two free ranges the driver left at the top: 2 MiB at T and 24 MiB at T + 74 MiB, and
// the first region ends at T - 414 MiB (fitted to 12 recorded runs; the second gap was seen to hold at least
// 24 and less than 30 MiB). Regions' rests before those ranges: PyTorch's first forward fills the rest of
// `.to()`'s last region before it takes anything from the stretch below (docs/status.md, session 26). The
// driver takes regions from the process's address map, so host mappings made meanwhile move them: PyTorch's
// CPU thread pool makes glibc arenas 128 MiB apart whose holes later regions fill, in an order that depends
// on thread timing (tools/probes/driver_placement_probe.py). That part is not modelled. sim and meta place their
// segments here; a real GPU keeps one beside the driver for best fit's ties (RawMemory::tie_address).
//
// The driver and cuBLAS allocate for themselves from the same addresses, and so move later segments
// (tools/probes/driver_allocations_probe.py and driver_first_launch_probe.py, which asked the driver for
// every allocation between PyTorch's segments after each op; recorded in
// docs/evidence/driver_placement/). DriverAllocation names what a kernel launch or a new
// cuBLAS handle makes it allocate; each is placed by the rule above, except the launch heap, which comes
// with a reservation of its own.
//
// The stretch below the first small segment (docs/evidence/generated_segments/, 128 recorded runs on the
// H100, tools/probes/segment_stretch.py): until the process's first kernel launch, the driver holds the
// 414 MiB below T except a hole of about 150 MiB right under T, which takes the first segment of more than
// 24 MiB (too large for the gap at T + 74 MiB) if it fits: at T - its size. From the first launch on, the
// whole 414 MiB is free (a range no region holds: after the regions' rests) and the forward's segments fill
// it from its bottom, lowest address first. Where no
// segment took the hole (102 of the 106 runs that show the stretch), the model makes the stretch a free
// range at the first launch, the launch heap's reservation 160 MiB below the lowest region (where PyTorch's
// heap top sits); PyTorch's `.to()` segments mostly sit in holes between host arenas above T (below). Where one did
// (GPT-2 small's 148 MiB embedding; 18 of the 20 runs that show it), the forward's segments go elsewhere and the model
// keeps its regions below the others. The hole's size is not exact (a 126 MiB segment fitted it, a 148 MiB one on a T
// 20 MiB above a 32 MiB boundary did): 148 MiB, so that GPT-2 small's embedding takes it. A segment of a whole number
// of regions (32, 64, 96, 128 MiB) never takes it, as if the driver reserved a region of its own for it first: it goes
// where such a region goes (tools/probes/first_large_segment_probe.py, and c043's 32 MiB embedding in every recorded
// process).
//
// Where the regions that come before the first launch go when they fit neither the first gaps nor the hole
// (`.to()`'s segments; tools/probes/to_regions.py) follows the host's address map (EarlyRegions, raw_memory.h):
// where the program's host work left holes (PyTorch's CPU thread pool's malloc arenas), into them, above T and
// its gaps: the model places them in a descending series from kHostHolesAbove above T (PyTorch's lie between
// T + 100 MiB and T + 2.7 GiB, mostly descending: tools/probes/segment_departures.py), their rests kept as
// gaps (regions of 32 MiB only: the holes between arenas are 64 MiB, and a reservation is the region and 32 MiB
// more; larger ones go below T - 414 MiB), and the stretch stays at [T - 414 MiB, T); where it left none (nanoGPT with
// SDPA), to new regions below T - 414 MiB, under the stretch, which stays there too. set_host_map_holes says which;
// set_early_regions(reversed) follows the other. Where a segment took the hole below T (GPT-2 small's embedding) the
// model keeps every region below the others, and the series is the other placement: such processes were seen with
// regions in host holes too, but interleaved across several holes in an order no series follows, and the goldens' GPT-2
// small is exact with them below.
//
// The driver's first chunk for module globals, when a launch before the first launch heap needs it (the data's
// random fill), takes the lowest free 2 MiB of a region's gap, else of the ranges at T once segments are there
// (the gap at T + 74 MiB's rest: PyTorch's next segment there sits 2 MiB above `.to()`'s last, and where `.to()`
// left just 2 MiB the forward's first segment needs a new region), else it is placed with that heap (its free top).
//
// A process's first NCCL communicator (kNcclCommunicator; DDP makes it in its constructor, after `.to()`)
// changes the layout (docs/evidence/ddp_addresses/, measured on two ranks and 10 recorded processes): NCCL's
// 2 MiB buffers take the free ranges among the segments so far, and below every region the driver leaves
// free ranges of 10, 690 and 504 MiB with the kernel stack and the launch heap's top between and above them,
// which later segments fill lowest first; new regions go below all of it.
//
// The host blocks `.to()` frees (docs/status.md, session 35): each parameter of 128 KiB or more was its own
// mapping, made before the CUDA context and so above the driver's regions, and is unmapped as `.to()`
// replaces it, leaving one growing hole there. The driver's reservations go top-down, so a new region that
// finds no gap or free range takes that hole once it holds the region (and room to align it: kFreedSpanSlack),
// in the descending series above T; NCCL's communicator fills what is left of it. host_work.h counts the
// bytes freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "bytegrad/memory/raw_memory.h"

namespace bytegrad {

class VirtualAddressSpace {
 public:
  static constexpr size_t kRegionGranularity = size_t{32} << 20;
  // The stretch of 414 MiB below the first small segment that the first kernel launch frees, and the
  // hole at its top that segments of more than kGapBytes (24 MiB) and at most kHoleBytes take before.
  static constexpr size_t kStretchBytes = size_t{414} << 20;
  static constexpr size_t kHoleBytes = size_t{148} << 20;
  // The free ranges at T end 98 MiB above it. Regions in the host map's holes (header) are placed from
  // kHostHolesAbove above T downwards (PyTorch's lay up to T + 2.7 GiB); T sits kAboveAnchor below the span's end.
  static constexpr size_t kTopGapsEnd = size_t{98} << 20;
  static constexpr size_t kHostHolesAbove = size_t{4096} << 20;
  // A new region goes into the hole the host's freed blocks left above the regions once that holds it and
  // this much more (room to align it): of the generated sweep's SDPA runs' 20 MiB segments made in `.to()`,
  // none of 14 went there with less than 56 MiB (32 + 24) freed and not yet taken, 6 of 12 at 56-71, 40 of
  // 50 at 72 or more (tools/probes/freed_host_span.py).
  static constexpr size_t kFreedSpanSlack = size_t{24} << 20;
  static constexpr size_t kAboveAnchor = kHostHolesAbove + (size_t{128} << 20);

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
  // Which placement of the regions reserved before the first launch to follow (EarlyRegions: as the host map
  // implies, or reversed) and whether the host map has holes (unless set: whether host work before the first
  // launch started PyTorch's CPU thread pool, host_work.h); set both before the first
  // launch. early_regions_decided(): the first launch found such regions (in host holes or below T - 414 MiB),
  // so the other placement would have ordered them differently against T and the stretch.
  void set_early_regions(EarlyRegions placement) { early_regions_ = placement; }
  void set_host_map_holes(bool holes) { host_map_holes_ = holes; }
  EarlyRegions early_regions() const { return early_regions_; }
  bool early_regions_decided() const { return early_regions_decided_; }

 private:
  bool early_regions_in_host_holes() const;
  uintptr_t place(size_t bytes);  // allocate's rule
  uintptr_t driver_allocation(const char* what, size_t bytes);
  void trace(const char* what, size_t bytes, uintptr_t address) const;
  // `bytes` in a new region of `region` bytes next in the host's holes' descending series above T; 0 when the
  // series has reached the gaps at T.
  uintptr_t take_host_hole(size_t bytes, size_t region);
  void add_gap(uintptr_t address, size_t bytes);
  static void add_range(std::map<uintptr_t, size_t>& ranges, uintptr_t address, size_t bytes);
  std::map<uintptr_t, size_t> gaps_;        // free ranges inside the process's regions, by address
  std::map<uintptr_t, size_t> unreserved_;  // free ranges no region holds: the gaps at T, the stretch
  uintptr_t stretch_ = 0;                   // the stretch's start, once the first launch freed it
  uintptr_t anchor_;                        // "T": the first small segment of a fresh process
  uintptr_t bottom_;                        // start of the lowest region reserved so far
  uintptr_t host_holes_top_;                // start of the lowest region placed in the host's holes
  uintptr_t limit_;
  bool trace_;                       // BYTEGRAD_PLACEMENT_TRACE set
  uint32_t driver_done_ = 0;         // one-time DriverAllocation flags already placed
  bool globals_chunk_ = false;       // a 2 MiB chunk of small driver allocations exists
  bool anything_placed_ = false;     // place() put something in the space (a segment or a driver allocation)
  bool globals_pending_ = false;     // a module loaded before the first launch found no gap for its chunk
  size_t blas_chunk_left_ = 0;       // room left in cuBLAS's chunk
  bool hole_taken_ = false;          // a segment took the hole below T before the first launch
  bool host_holes_ran_out_ = false;  // an early region for the host's holes went below T - 414 MiB instead
  size_t freed_span_seen_ = 0;       // the most host_freed_above_device() said on a thread that allocated here
  size_t freed_span_taken_ = 0;      // bytes of it taken (segments placed there, NCCL's communicator)
  EarlyRegions early_regions_ = EarlyRegions::as_host_map;
  std::optional<bool> host_map_holes_;  // unset: as the host work noted so far implies (host_work.h)
  bool early_regions_decided_ = false;
  bool early_region_made_ = false;  // a region (other than the hole's) was made before the first launch
};

}  // namespace bytegrad
