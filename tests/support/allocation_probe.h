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

// The allocator's allocations and frees on `d` while `run` runs. Its history is on meanwhile; when it was
// already on (a MemoryProbe is alive) only the entries `run` adds are read and it stays on. Unlike a
// MemoryProbe, this leaves the peak statistics alone, so an enclosing probe's peak still holds.
template <typename Run>
AllocationEvents allocation_events(Device d, Run&& run) {
  CachingAllocator& allocator = caching_allocator(d);
  const bool was_recording = allocator.history_enabled();
  const size_t start = was_recording ? allocator.snapshot().trace.size() : 0;
  if (!was_recording) allocator.record_history(true);
  run();
  AllocationEvents events;
  const std::vector<TraceEntry> trace = allocator.snapshot().trace;
  for (size_t i = start; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action == TraceAction::alloc) events.emplace_back("alloc", static_cast<int64_t>(e.size));
    if (e.action == TraceAction::free_completed) events.emplace_back("free", static_cast<int64_t>(e.size));
  }
  if (!was_recording) allocator.record_history(false);
  return events;
}

}  // namespace bytegrad::testing
