// The two simulated devices share one capacity rule (a segment fits while the segments in use plus the
// context reservation stay within the total) and one placement rule. They differ only in what backs an
// address.
#include <sys/mman.h>

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <string>

#include "bytegrad/core/address_sanitizer.h"
#include "bytegrad/memory/raw_memory.h"
#include "bytegrad/memory/virtual_address_space.h"

namespace bytegrad {

namespace {

// The largest total a simulated device may have: its address span (four times the total) must fit in a
// 64-bit address above meta's base (1 << 44) without wrapping.
constexpr size_t kMaxSimulatedTotalBytes = size_t{1} << 58;

// Throws std::invalid_argument naming the SimulatedCapacity field at fault. Called before anything is
// reserved, so a bad capacity leaks nothing.
void check_capacity(const SimulatedCapacity& capacity) {
  if (capacity.context_bytes > capacity.total_bytes)
    throw std::invalid_argument("simulated device: context reservation (context_bytes " +
                                std::to_string(capacity.context_bytes) + ") exceeds its total (total_bytes " +
                                std::to_string(capacity.total_bytes) + ")");
  if (capacity.total_bytes > kMaxSimulatedTotalBytes)
    throw std::invalid_argument("simulated device: total_bytes " + std::to_string(capacity.total_bytes) +
                                " is too large (at most " + std::to_string(kMaxSimulatedTotalBytes) + ")");
  if (capacity.multiprocessor_count <= 0)
    throw std::invalid_argument("simulated device: multiprocessor_count must be positive, got " +
                                std::to_string(capacity.multiprocessor_count));
  if (capacity.max_threads_per_multiprocessor <= 0)
    throw std::invalid_argument("simulated device: max_threads_per_multiprocessor must be positive, got " +
                                std::to_string(capacity.max_threads_per_multiprocessor));
}

class SimulatedRawMemory : public RawMemory {
 public:
  explicit SimulatedRawMemory(SimulatedCapacity capacity) : capacity_(capacity) { check_capacity(capacity); }

  void* allocate(size_t bytes) final {
    if (bytes > capacity_.total_bytes - capacity_.context_bytes - in_use_) return nullptr;
    void* ptr = map(bytes);
    if (ptr) in_use_ += bytes;
    return ptr;
  }

  void release(void* ptr, size_t bytes) final {
    unmap(ptr, bytes);
    in_use_ -= bytes;
  }

  // Mapped pages count against the capacity as segments do; a reservation holds only addresses.
  bool map_pages(uintptr_t address, size_t bytes, size_t) final {
    if (bytes > capacity_.total_bytes - capacity_.context_bytes - in_use_) return false;
    if (!map_at(address, bytes)) return false;
    in_use_ += bytes;
    return true;
  }

  void unmap_pages(uintptr_t address, size_t bytes, size_t) final {
    unmap_at(address, bytes);
    in_use_ -= bytes;
  }

  Info info() final { return {capacity_.total_bytes - capacity_.context_bytes - in_use_, capacity_.total_bytes}; }
  std::optional<size_t> process_memory_in_use() final { return capacity_.context_bytes + in_use_; }

 protected:
  const SimulatedCapacity& capacity() const { return capacity_; }
  virtual void* map(size_t bytes) = 0;
  virtual void unmap(void* ptr, size_t bytes) = 0;
  virtual bool map_at(uintptr_t address, size_t bytes) = 0;
  virtual void unmap_at(uintptr_t address, size_t bytes) = 0;

 private:
  SimulatedCapacity capacity_;
  size_t in_use_ = 0;
};

// Segment addresses follow the CUDA driver's placement (virtual_address_space.h) inside one reserved
// range; sim maps host pages there, meta only hands out the addresses.
class PlacedRawMemory : public SimulatedRawMemory {
 public:
  PlacedRawMemory(SimulatedCapacity capacity, uintptr_t base, size_t span)
      : SimulatedRawMemory(capacity), addresses_(base, span) {}

 protected:
  void* map(size_t bytes) override {
    uintptr_t address = addresses_.allocate(bytes);
    if (address == 0) return nullptr;
    if (!commit(reinterpret_cast<void*>(address), bytes)) {
      addresses_.release(address, bytes);
      return nullptr;
    }
    return reinterpret_cast<void*>(address);
  }
  void unmap(void* ptr, size_t bytes) override {
    decommit(ptr, bytes);
    addresses_.release(reinterpret_cast<uintptr_t>(ptr), bytes);
  }
  // An expandable segment's reservation takes its addresses by the same placement rule as a segment
  // (where the driver puts cuMemAddressReserve's ranges was not measured).
  uintptr_t reserve_addresses(size_t bytes) final { return addresses_.allocate(bytes); }
  void release_addresses(uintptr_t address, size_t bytes) final { addresses_.release(address, bytes); }
  void note_driver_allocations(uint32_t what) final {
    addresses_.note_driver_allocations(
        what, size_t(capacity().multiprocessor_count) * size_t(capacity().max_threads_per_multiprocessor));
  }
  void set_early_regions(EarlyRegions placement) final { addresses_.set_early_regions(placement); }
  void set_host_map_holes(bool holes) final { addresses_.set_host_map_holes(holes); }
  bool early_regions_decided() const final { return addresses_.early_regions_decided(); }
  bool map_at(uintptr_t address, size_t bytes) final { return commit(reinterpret_cast<void*>(address), bytes); }
  void unmap_at(uintptr_t address, size_t bytes) final { decommit(reinterpret_cast<void*>(address), bytes); }
  virtual bool commit(void*, size_t) { return true; }
  virtual void decommit(void*, size_t) {}

  static size_t span_for(const SimulatedCapacity& capacity) {
    return VirtualAddressSpace::span_for(capacity.total_bytes);
  }

 private:
  VirtualAddressSpace addresses_;
};

class HostBackedRawMemory final : public PlacedRawMemory {
 public:
  explicit HostBackedRawMemory(SimulatedCapacity capacity) : HostBackedRawMemory(capacity, reserve(capacity)) {}
  ~HostBackedRawMemory() override { munmap(base_, span_); }

 protected:
  // MAP_NORESERVE: pages are committed when first written, so a simulated 80 GB card needs only the host
  // memory its kernels actually touch.
  // A new segment is all cached memory until the allocator hands out a block of it.
  bool commit(void* ptr, size_t bytes) override {
    if (mmap(ptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
        MAP_FAILED)
      return false;
    mark_in_use(ptr, bytes, false);
    return true;
  }
  // Replacing the pages with an inaccessible mapping returns them to the host and traps stray use.
  void decommit(void* ptr, size_t bytes) override {
    mark_in_use(ptr, bytes, true);  // the shadow of released pages is clean again
    // Should the remap fail, the old pages stay mapped: still correct, only not returned nor trapped.
    (void)mmap(ptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  }

 public:
  void mark_in_use(void* ptr, size_t bytes, bool in_use) override {
#if BYTEGRAD_ASAN
    if (in_use) ASAN_UNPOISON_MEMORY_REGION(ptr, bytes);
    else ASAN_POISON_MEMORY_REGION(ptr, bytes);
#else
    (void)ptr, (void)bytes, (void)in_use;
#endif
  }

 private:
  HostBackedRawMemory(SimulatedCapacity capacity, std::pair<void*, size_t> reservation)
      : PlacedRawMemory(capacity, reinterpret_cast<uintptr_t>(reservation.first), reservation.second),
        base_(reservation.first),
        span_(reservation.second) {}

  // The modelled span where the host has room for it, else less, down to the least a card needs (a
  // ThreadSanitizer build, for one, cannot map a terabyte in one piece): only room for many expandable
  // segments is lost.
  static std::pair<void*, size_t> reserve(const SimulatedCapacity& capacity) {
    const size_t least = VirtualAddressSpace::least_span_for(capacity.total_bytes);
    for (size_t span = span_for(capacity);; span = std::max(least, span / 2)) {
      void* base = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base != MAP_FAILED) return {base, span};
      if (span == least)
        throw std::runtime_error("sim device: cannot reserve " + std::to_string(span) +
                                 " bytes of address space (four times total_bytes, at least 64 GiB)");
    }
  }

  void* base_;
  size_t span_;
};

class AddressOnlyRawMemory final : public PlacedRawMemory {
 public:
  explicit AddressOnlyRawMemory(SimulatedCapacity capacity)
      : PlacedRawMemory(capacity, uintptr_t{1} << 44, span_for(capacity)) {}
};

}  // namespace

std::unique_ptr<RawMemory> make_host_backed_raw_memory(SimulatedCapacity capacity) {
  check_capacity(capacity);  // before the address space is reserved
  return std::make_unique<HostBackedRawMemory>(capacity);
}

std::unique_ptr<RawMemory> make_address_only_raw_memory(SimulatedCapacity capacity) {
  return std::make_unique<AddressOnlyRawMemory>(capacity);
}

}  // namespace bytegrad
