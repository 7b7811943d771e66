#include "bytegrad/memory/virtual_address_space.h"

#include "bytegrad/memory/host_work.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace bytegrad {

VirtualAddressSpace::VirtualAddressSpace(uintptr_t base, size_t span)
    : anchor_(base + span - kAboveAnchor),
      bottom_(anchor_ - kStretchBytes),
      host_holes_top_(anchor_ + kHostHolesAbove),
      limit_(base),
      trace_(std::getenv("BYTEGRAD_PLACEMENT_TRACE") != nullptr) {
  constexpr size_t kMiB = size_t{1} << 20;
  unreserved_.emplace(anchor_, 2 * kMiB);
  unreserved_.emplace(anchor_ + 74 * kMiB, 24 * kMiB);
}

size_t VirtualAddressSpace::span_for(size_t total_bytes) {
  constexpr size_t kGiB = size_t{1} << 30;
  return std::max<size_t>(12 * total_bytes, 64 * kGiB) / kGiB * kGiB;
}

size_t VirtualAddressSpace::least_span_for(size_t total_bytes) {
  constexpr size_t kGiB = size_t{1} << 30;
  return std::max<size_t>(4 * total_bytes, 64 * kGiB) / kGiB * kGiB;
}

namespace {

// Takes `bytes` from the start of the lowest range of `ranges` that holds them; 0 when none does.
uintptr_t take_lowest(std::map<uintptr_t, size_t>& ranges, size_t bytes) {
  for (auto it = ranges.begin(); it != ranges.end(); ++it) {
    if (it->second < bytes) continue;
    const uintptr_t address = it->first;
    const size_t rest = it->second - bytes;
    ranges.erase(it);
    if (rest > 0) ranges.emplace(address + bytes, rest);
    return address;
  }
  return 0;
}

}  // namespace

uintptr_t VirtualAddressSpace::allocate(size_t bytes) {
  const uintptr_t address = place(bytes);
  trace("segment", bytes, address);
  return address;
}

// BYTEGRAD_PLACEMENT_TRACE=1 (read once, by the constructor): every segment and driver allocation on stderr,
// relative to T in MiB, to set beside a recording's addresses (docs/evidence/generated_mmap/).
void VirtualAddressSpace::trace(const char* what, size_t bytes, uintptr_t address) const {
  if (!trace_) return;
  constexpr double kMiB = 1 << 20;
  if (address == 0) std::fprintf(stderr, "placement %s %.2f MiB: no room\n", what, static_cast<double>(bytes) / kMiB);
  else
    std::fprintf(stderr, "placement %s %.2f MiB at T%+.2f MiB\n", what, static_cast<double>(bytes) / kMiB,
                 (static_cast<double>(address) - static_cast<double>(anchor_)) / kMiB);
}

uintptr_t VirtualAddressSpace::driver_allocation(const char* what, size_t bytes) {
  const uintptr_t address = place(bytes);
  trace(what, bytes, address);
  return address;
}

uintptr_t VirtualAddressSpace::place(size_t bytes) {
  anything_placed_ = true;
  // What the process's regions have free first, then what the driver left unreserved (header).
  if (const uintptr_t address = take_lowest(gaps_, bytes)) return address;
  if (const uintptr_t address = take_lowest(unreserved_, bytes)) return address;
  constexpr size_t kGapBytes = size_t{24} << 20;  // the gap at T + 74 MiB
  const size_t region = (bytes + kRegionGranularity - 1) / kRegionGranularity * kRegionGranularity;
  if (!(driver_done_ & kLaunchHeap)) {
    // A segment of a whole number of regions never takes the hole: it gets a region of its own
    // (tools/probes/first_large_segment_probe.py: 32, 64, 96 and 128 MiB in every process; 26 to 126 MiB
    // otherwise at the highest 32 MiB boundary below T - its size).
    const bool takes_hole = bytes > kGapBytes && bytes <= kHoleBytes && bytes % kRegionGranularity != 0 && !hole_taken_;
    hole_taken_ = hole_taken_ || takes_hole;
    early_region_made_ = early_region_made_ || !takes_hole;
    // Once a segment took the hole, the regions go below the others, or with EarlyRegions::reversed in the
    // host's holes (header). Those holes, between the thread pool's malloc arenas, are 64 MiB: the driver's
    // reservation of region + 32 MiB - 4 KiB fits one only for a region of 32 MiB (the probe's --pool).
    const bool in_host_holes = hole_taken_ ? early_regions_ == EarlyRegions::reversed : early_regions_in_host_holes();
    if (!takes_hole && in_host_holes && region <= kRegionGranularity) {
      if (const uintptr_t address = take_host_hole(bytes, region)) return address;
      host_holes_ran_out_ = true;  // it goes below T - 414 MiB and stands for a host hole
    }
  }
  // The hole the host's freed blocks left above the regions (host_work.h; header): a new region goes there,
  // in the descending series above T, once it holds the region and kFreedSpanSlack more.
  freed_span_seen_ = std::max(freed_span_seen_, host_freed_above_device());  // backward's thread has none
  if (freed_span_seen_ >= freed_span_taken_ + region + kFreedSpanSlack)
    if (const uintptr_t address = take_host_hole(bytes, region)) {
      freed_span_taken_ += bytes;
      return address;
    }
  if (bottom_ - limit_ < region) return 0;
  bottom_ -= region;
  if (region > bytes) add_gap(bottom_ + bytes, region - bytes);
  return bottom_;
}

void VirtualAddressSpace::release(uintptr_t address, size_t bytes) {
  const bool top_gaps = address >= anchor_ && address < anchor_ + kTopGapsEnd;
  const bool unreserved = top_gaps || (address >= stretch_ && address < stretch_ + kStretchBytes);
  add_range(unreserved ? unreserved_ : gaps_, address, bytes);
}

void VirtualAddressSpace::note_driver_allocations(uint32_t what, size_t threads_on_card) {
  constexpr size_t kMiB = size_t{1} << 20;
  constexpr size_t kChunk = 2 * kMiB;
  // Driver allocations are never freed here, so an address of 0 (no room) just leaves the model as it is.
  // Before the first launch's heap exists a module's globals chunk takes a free gap of the process's regions,
  // else the lowest free 2 MiB of the ranges at T once segments are there (the rest of the gap at T + 74 MiB:
  // docs/status.md, session 36), but not where a segment took the hole below T, whose process has other ranges
  // above T; where none has room it waits for that launch and goes where a chunk goes then (header).
  if ((what & kModuleGlobals) && !globals_chunk_) {
    if (driver_done_ & kLaunchHeap) {
      driver_allocation("module globals", kChunk);
      globals_chunk_ = true;
    } else {
      uintptr_t address = take_lowest(gaps_, kChunk);
      if (address == 0 && anything_placed_ && !hole_taken_) address = take_lowest(unreserved_, kChunk);
      globals_chunk_ = address != 0;
      globals_pending_ = !globals_chunk_;
      if (globals_chunk_) trace("module globals", kChunk, address);
    }
  }
  if ((what & kLaunchHeap) && !(driver_done_ & kLaunchHeap)) {
    driver_done_ |= kLaunchHeap;
    early_regions_decided_ = early_region_made_;
    // The stretch below T, freed now (header), and between it and the heap's reservation what the driver
    // keeps there: the heap's top sits 160 MiB below the lowest region (docs/evidence/generated_segments/).
    // Regions reserved before this launch lie in host holes above T or below T - 414 MiB (EarlyRegions); the
    // stretch is [T - 414 MiB, T) but where regions below T - 414 MiB stand for host holes (the series ran
    // out): then below them. (Regions of more than 32 MiB go below in either case, and stand for nothing.) It is a
    // range no region holds: taken only when no region's rest fits.
    constexpr size_t kBelowRegions = 160 * kMiB;
    if (!hole_taken_ && bottom_ - limit_ >= kStretchBytes + kBelowRegions) {
      if (host_holes_ran_out_) {
        bottom_ -= kStretchBytes;
        stretch_ = bottom_;
      } else {
        stretch_ = anchor_ - kStretchBytes;
      }
      add_range(unreserved_, stretch_, kStretchBytes);
      bottom_ -= kBelowRegions;
    }
    constexpr size_t kReserved = 512 * kMiB;
    if (bottom_ - limit_ >= kReserved) {
      bottom_ -= kReserved;
      add_gap(bottom_ + kReserved - 6 * kMiB, 6 * kMiB);  // below it: the 2 MiB the driver maps
      trace("launch heap's free top", 6 * kMiB, bottom_ + kReserved - 6 * kMiB);
    }
  }
  if (globals_pending_ && (driver_done_ & kLaunchHeap)) {
    driver_allocation("module globals", kChunk);
    globals_chunk_ = true;
    globals_pending_ = false;
  }
  if ((what & kKernelStack) && !(driver_done_ & kKernelStack)) {
    driver_done_ |= kKernelStack;
    constexpr size_t kStackBytesPerThread = 32;
    const size_t bytes = kStackBytesPerThread * threads_on_card;
    if (bytes > 0) driver_allocation("kernel stack", (bytes + kChunk - 1) / kChunk * kChunk);
  }
  if ((what & kNcclCommunicator) && !(driver_done_ & kNcclCommunicator)) {
    driver_done_ |= kNcclCommunicator | kLaunchHeap | kKernelStack;
    // NCCL's own mappings, top-down, take the hole the host's freed blocks left above the regions too.
    freed_span_seen_ = std::max(freed_span_seen_, host_freed_above_device());
    freed_span_taken_ = std::max(freed_span_taken_, freed_span_seen_);
    // Every free range among the segments so far is taken: NCCL's 2 MiB buffers fill `.to()`'s 12 MiB
    // remainders in both ranks' scans (13 of 21 seen, the others never used either). Below every region,
    // relative to B, the start of the second range: 10 MiB free, 690 MiB free, 14 MiB held (the kernel
    // stack's 8.25 MiB), 504 MiB free, 8 MiB held (the launch heap's top), all above 694 MiB held; later
    // regions come below those. The same offsets in all 10 recorded GPT-2 small DDP and ZeRO-1 processes.
    constexpr size_t kBelowB = 704 * kMiB;
    constexpr size_t kAboveB = 1216 * kMiB;
    if (bottom_ - limit_ >= kBelowB + kAboveB) {
      gaps_.clear();
      unreserved_.clear();  // the ranges at T too
      const uintptr_t b = bottom_ - kAboveB;
      add_gap(b - 10 * kMiB, 10 * kMiB);
      add_gap(b, 690 * kMiB);
      add_gap(b + 704 * kMiB, 504 * kMiB);
      bottom_ = b - kBelowB;
    }
  }
  if (what & kBlasHandle) {
    constexpr size_t kHandleSmall = size_t{129} * 1024;  // 128 KiB and 1 KiB
    driver_allocation("cuBLAS handle", 64 * kMiB);
    if (blas_chunk_left_ < kHandleSmall) {
      driver_allocation("cuBLAS handle's chunk", kChunk);
      blas_chunk_left_ = kChunk;
      globals_chunk_ = true;  // later modules' globals fit in it
    }
    blas_chunk_left_ -= kHandleSmall;
  }
}

// A hole of the host's map above T (header): a descending series, rests kept as gaps.
uintptr_t VirtualAddressSpace::take_host_hole(size_t bytes, size_t region) {
  if (host_holes_top_ - region <= anchor_ + kTopGapsEnd) return 0;  // the series reached T's gaps
  host_holes_top_ -= region;
  if (region > bytes) add_gap(host_holes_top_ + bytes, region - bytes);
  return host_holes_top_;
}

bool VirtualAddressSpace::early_regions_in_host_holes() const {
  return host_map_holes_.value_or(host_thread_pool_started()) == (early_regions_ == EarlyRegions::as_host_map);
}

void VirtualAddressSpace::add_gap(uintptr_t address, size_t bytes) { add_range(gaps_, address, bytes); }

// Inserts a free range, merging it with free neighbours.
void VirtualAddressSpace::add_range(std::map<uintptr_t, size_t>& ranges, uintptr_t address, size_t bytes) {
  auto next = ranges.lower_bound(address);
  if (next != ranges.end() && address + bytes == next->first) {
    bytes += next->second;
    next = ranges.erase(next);
  }
  if (next != ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      prev->second += bytes;
      return;
    }
  }
  ranges.emplace(address, bytes);
}

}  // namespace bytegrad
