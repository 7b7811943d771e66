#include "bytegrad/memory/virtual_address_space.h"

#include <algorithm>
#include <iterator>

namespace bytegrad {

VirtualAddressSpace::VirtualAddressSpace(uintptr_t base, size_t span)
    : anchor_(base + span - (size_t{128} << 20)), bottom_(anchor_ - kStretchBytes), limit_(base) {
  constexpr size_t kMiB = size_t{1} << 20;
  gaps_.emplace(anchor_, 2 * kMiB);
  gaps_.emplace(anchor_ + 74 * kMiB, 24 * kMiB);
}

size_t VirtualAddressSpace::span_for(size_t total_bytes) {
  constexpr size_t kGiB = size_t{1} << 30;
  return std::max<size_t>(12 * total_bytes, 64 * kGiB) / kGiB * kGiB;
}

size_t VirtualAddressSpace::least_span_for(size_t total_bytes) {
  constexpr size_t kGiB = size_t{1} << 30;
  return std::max<size_t>(4 * total_bytes, 64 * kGiB) / kGiB * kGiB;
}

uintptr_t VirtualAddressSpace::allocate(size_t bytes) {
  for (auto it = gaps_.begin(); it != gaps_.end(); ++it) {
    if (it->second < bytes) continue;
    const uintptr_t address = it->first;
    const size_t rest = it->second - bytes;
    gaps_.erase(it);
    if (rest > 0) gaps_.emplace(address + bytes, rest);
    return address;
  }
  constexpr size_t kGapBytes = size_t{24} << 20;  // the gap at T + 74 MiB
  if (!(driver_done_ & kLaunchHeap) && bytes > kGapBytes && bytes <= kHoleBytes) hole_taken_ = true;
  const size_t region = (bytes + kRegionGranularity - 1) / kRegionGranularity * kRegionGranularity;
  if (bottom_ - limit_ < region) return 0;
  bottom_ -= region;
  if (region > bytes) add_gap(bottom_ + bytes, region - bytes);
  return bottom_;
}

void VirtualAddressSpace::release(uintptr_t address, size_t bytes) { add_gap(address, bytes); }

void VirtualAddressSpace::note_driver_allocations(uint32_t what, size_t threads_on_card) {
  constexpr size_t kMiB = size_t{1} << 20;
  constexpr size_t kChunk = 2 * kMiB;
  // Driver allocations are never freed here, so an address of 0 (no room) just leaves the model as it is.
  if ((what & kModuleGlobals) && !globals_chunk_) {
    allocate(kChunk);
    globals_chunk_ = true;
  }
  if ((what & kLaunchHeap) && !(driver_done_ & kLaunchHeap)) {
    driver_done_ |= kLaunchHeap;
    // The stretch below T, freed now (header), and between it and the heap's reservation what the driver
    // keeps there: the heap's top sits 160 MiB below the lowest region (docs/evidence/generated_segments/).
    // Regions reserved before this launch lie below T - 414 MiB in the model; by default the stretch goes below
    // them (they stand for PyTorch's regions in host holes above T), with below_stretch it stays where it is.
    constexpr size_t kBelowRegions = 160 * kMiB;
    if (!hole_taken_ && bottom_ - limit_ >= kStretchBytes + kBelowRegions) {
      const bool early = bottom_ != anchor_ - kStretchBytes;
      early_regions_decided_ = early;
      if (early && early_regions_ == EarlyRegions::below_stretch) {
        add_gap(anchor_ - kStretchBytes, kStretchBytes);
      } else {
        bottom_ -= kStretchBytes;
        add_gap(bottom_, kStretchBytes);
      }
      bottom_ -= kBelowRegions;
    }
    constexpr size_t kReserved = 512 * kMiB;
    if (bottom_ - limit_ >= kReserved) {
      bottom_ -= kReserved;
      add_gap(bottom_ + kReserved - 6 * kMiB, 6 * kMiB);  // below it: the 2 MiB the driver maps
    }
  }
  if ((what & kKernelStack) && !(driver_done_ & kKernelStack)) {
    driver_done_ |= kKernelStack;
    constexpr size_t kStackBytesPerThread = 32;
    const size_t bytes = kStackBytesPerThread * threads_on_card;
    if (bytes > 0) allocate((bytes + kChunk - 1) / kChunk * kChunk);
  }
  if ((what & kNcclCommunicator) && !(driver_done_ & kNcclCommunicator)) {
    driver_done_ |= kNcclCommunicator | kLaunchHeap | kKernelStack;
    // Every free range among the segments so far is taken: NCCL's 2 MiB buffers fill `.to()`'s 12 MiB
    // remainders in both ranks' scans (13 of 21 seen, the others never used either). Below every region,
    // relative to B, the start of the second range: 10 MiB free, 690 MiB free, 14 MiB held (the kernel
    // stack's 8.25 MiB), 504 MiB free, 8 MiB held (the launch heap's top), all above 694 MiB held; later
    // regions come below those. The same offsets in all 10 recorded GPT-2 small DDP and ZeRO-1 processes.
    constexpr size_t kBelowB = 704 * kMiB;
    constexpr size_t kAboveB = 1216 * kMiB;
    if (bottom_ - limit_ >= kBelowB + kAboveB) {
      gaps_.clear();
      const uintptr_t b = bottom_ - kAboveB;
      add_gap(b - 10 * kMiB, 10 * kMiB);
      add_gap(b, 690 * kMiB);
      add_gap(b + 704 * kMiB, 504 * kMiB);
      bottom_ = b - kBelowB;
    }
  }
  if (what & kBlasHandle) {
    constexpr size_t kHandleSmall = size_t{129} * 1024;  // 128 KiB and 1 KiB
    allocate(64 * kMiB);
    if (blas_chunk_left_ < kHandleSmall) {
      allocate(kChunk);
      blas_chunk_left_ = kChunk;
      globals_chunk_ = true;  // later modules' globals fit in it
    }
    blas_chunk_left_ -= kHandleSmall;
  }
}

// Inserts a free range, merging it with free neighbours.
void VirtualAddressSpace::add_gap(uintptr_t address, size_t bytes) {
  auto next = gaps_.lower_bound(address);
  if (next != gaps_.end() && address + bytes == next->first) {
    bytes += next->second;
    next = gaps_.erase(next);
  }
  if (next != gaps_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      prev->second += bytes;
      return;
    }
  }
  gaps_.emplace(address, bytes);
}

}  // namespace bytegrad
