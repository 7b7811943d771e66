// Allocation deltas on one device since a point in a test (peak statistics reset there), and the
// allocator's events while a piece of a test runs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "tests/support/devices.h"

namespace bytegrad::testing {

struct Probe {
  Device device;
  int64_t start_bytes, start_blocks, start_requested;

  explicit Probe(Device d = kSim) : device(d) {
    auto& allocator = caching_allocator(d);
    allocator.reset_peak_stats();
    start_bytes = allocator.memory_allocated();
    start_blocks = stat("allocation.all.current");
    start_requested = stat("requested_bytes.all.current");
  }
  int64_t bytes() const { return caching_allocator(device).memory_allocated() - start_bytes; }
  int64_t peak() const { return caching_allocator(device).max_memory_allocated() - start_bytes; }
  int64_t blocks() const { return stat("allocation.all.current") - start_blocks; }
  int64_t requested() const { return stat("requested_bytes.all.current") - start_requested; }

 private:
  int64_t stat(const char* key) const { return caching_allocator(device).memory_stats().at(key); }
};

// The allocator's block size for `bytes` requested: a multiple of 512 (small requests).
inline int64_t block(int64_t bytes) { return std::max<int64_t>(512, (bytes + 511) / 512 * 512); }

// ("alloc" | "free", requested bytes), in order: the shape of PyTorch's recorded traces (tests/data).
using AllocationEvents = std::vector<std::pair<std::string, int64_t>>;

// The allocator's allocations and frees on `d` while `run` runs (its history is on only meanwhile).
template <typename Run>
AllocationEvents allocation_events(Device d, Run&& run) {
  CachingAllocator& allocator = caching_allocator(d);
  allocator.record_history(true);
  run();
  AllocationEvents events;
  for (const TraceEntry& e : allocator.snapshot().trace) {
    if (e.action == TraceAction::alloc) events.emplace_back("alloc", static_cast<int64_t>(e.size));
    if (e.action == TraceAction::free_completed) events.emplace_back("free", static_cast<int64_t>(e.size));
  }
  allocator.record_history(false);
  return events;
}

}  // namespace bytegrad::testing
