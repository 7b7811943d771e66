// The allocator's event history (PyTorch's _record_memory_history trace): a bounded ring of entries,
// oldest first, recorded only while enabled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace bytegrad {

using StreamId = uint64_t;

// segment_map / segment_unmap: pages mapped into or unmapped from an expandable segment.
enum class TraceAction {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  oom,
  snapshot
};

std::string_view trace_action_name(TraceAction action);

struct TraceEntry {
  TraceAction action;
  uintptr_t address = 0;   // block or segment address (0 for oom and snapshot)
  size_t size = 0;         // alloc/free: requested bytes; segment: its size; map/unmap: the pages' bytes;
                           // oom: rounded block size
  StreamId stream = 0;
  int64_t time_us = 0;     // microseconds since the epoch
  size_t device_free = 0;  // oom only: free device memory after the cache flush
  std::string tag;         // the allocation context at the time (see allocation_context.h)
};

class History {
 public:
  bool enabled() const { return enabled_; }
  // Starts recording, keeping at most `max_entries` (the oldest are overwritten); disabling clears.
  void set_enabled(bool enabled, size_t max_entries = std::numeric_limits<size_t>::max());
  void record(TraceAction action, uintptr_t address, size_t size, StreamId stream, size_t device_free = 0);
  std::vector<TraceEntry> entries() const;  // oldest first

 private:
  bool enabled_ = false;
  size_t max_entries_ = std::numeric_limits<size_t>::max();
  std::vector<TraceEntry> ring_;
  size_t next_ = 0;  // where the next entry goes once the ring is full
};

}  // namespace bytegrad
