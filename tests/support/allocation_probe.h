// The allocator's events while a piece of a test runs, and its block rounding. Deltas since a point in a
// test (allocated, peak, blocks, requested bytes) are the public bytegrad::testing::MemoryProbe's
// (bytegrad/testing/memory_probe.h): the suites use it as users do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "tests/support/devices.h"

namespace bytegrad::testing {

// The allocator's block size for `bytes` requested: a multiple of 512 (small requests).
inline int64_t block(int64_t bytes) { return std::max<int64_t>(512, (bytes + 511) / 512 * 512); }

// ("alloc" | "free", requested bytes), in order: the shape of PyTorch's recorded traces (tests/data).
using AllocationEvents = std::vector<std::pair<std::string, int64_t>>;

// The allocator's allocations and frees on `d` while `run` runs, read as a history observer (only the
// entries `run` adds; other observers and record_history stay as they were). Unlike a MemoryProbe, this
// leaves the peak statistics alone, so an enclosing probe's peak still holds.
template <typename Run>
AllocationEvents allocation_events(Device d, Run&& run) {
  CachingAllocator& allocator = caching_allocator(d);
  const uint64_t start = allocator.attach_history_observer();
  struct Detach {  // from the same allocator only: `run` may give the device a new one
    Device device;
    uint64_t id;
    ~Detach() {
      if (CachingAllocator& now = caching_allocator(device); now.id() == id) now.detach_history_observer();
    }
  } detach{d, allocator.id()};
  run();
  AllocationEvents events;
  const MemorySnapshot snap = allocator.snapshot();
  const size_t first = start > snap.trace_start ? static_cast<size_t>(start - snap.trace_start) : 0;
  for (size_t i = first; i < snap.trace.size(); ++i) {
    const TraceEntry& e = snap.trace[i];
    if (e.action == TraceAction::alloc) events.emplace_back("alloc", static_cast<int64_t>(e.size));
    if (e.action == TraceAction::free_completed) events.emplace_back("free", static_cast<int64_t>(e.size));
  }
  return events;
}

}  // namespace bytegrad::testing
