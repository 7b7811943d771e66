// The allocator's event history (PyTorch's _record_memory_history trace): a bounded ring of entries,
// oldest first, recorded only while enabled.
//
// Each entry also carries what the block was for (memory_category.h) and the allocated bytes per category
// right after the event, so that a timeline stacked by category is exact at every entry: the parts sum to
// the allocated bytes replayed from the entries (block bytes: `block_size`, not the requested `size`).
// A block's category can change while it lives (a module registers it as a parameter, a node saves it),
// which no PyTorch action records: bytegrad logs it as a `category` entry of its own (the memory_viz
// export leaves those out, so PyTorch's viewer sees PyTorch's actions only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/memory/memory_category.h"

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
  snapshot,
  category  // bytegrad's own: a live block's category changed (address, block_size, previous_category -> category)
};

std::string_view trace_action_name(TraceAction action);

struct TraceEntry {
  TraceAction action;
  uintptr_t address = 0;  // block or segment address (0 for oom and snapshot)
  size_t size = 0;        // alloc/free: requested bytes; segment: its size; map/unmap: the pages' bytes;
                          // oom: rounded block size
  StreamId stream = 0;
  int64_t time_us = 0;     // microseconds since the epoch
  size_t device_free = 0;  // oom only: free device memory after the cache flush
  std::string tag;         // the allocation context at the time (see allocation_context.h)
  // alloc, free_requested, free_completed and category only (else 0 / `other`):
  size_t block_size = 0;                                     // the block's bytes, as memory_allocated() counts them
  MemoryCategory category = MemoryCategory::other;           // alloc: the birth category; free: the
                                                             // category it had; category: the new one
  MemoryCategory previous_category = MemoryCategory::other;  // category: the one it had before
  CategoryBytes category_bytes{};  // every entry: allocated bytes per category just after the event
  // free_requested only: the block was used on other streams (record_stream), so its free waits for their
  // events and its free_completed comes later (at a malloc, empty_cache or an out-of-memory retry); until
  // then it is active but not allocated. Not in PyTorch's trace, which cannot tell the two frees apart.
  bool free_deferred = false;
};

// What an entry says beyond PyTorch's fields (all defaulted for segment, oom and snapshot entries).
struct TraceCategories {
  size_t block_size = 0;
  MemoryCategory category = MemoryCategory::other;
  MemoryCategory previous_category = MemoryCategory::other;
  bool free_deferred = false;
};

// Recording is on while record_history(true) is in effect (the user's switch, PyTorch's
// _record_memory_history) or while any observer (MemoryStory, MemoryProbe) is attached. Observers read the
// entries by sequence number (the count of entries recorded before it, never reset while the allocator
// lives), so an observer coming or going, or the user's switch toggled, leaves every other observer's
// reading intact: the history is cleared only when recording stops altogether.
class History {
 public:
  bool enabled() const { return user_enabled_ || observers_ > 0; }  // whether entries are recorded now
  bool user_enabled() const { return user_enabled_; }               // whether record_history(true) is in effect
  // The user's switch. Turning it on keeps at most `max_entries` (the oldest are overwritten) and keeps the
  // entries already recorded for observers; turning it off clears the history unless an observer remains.
  void set_enabled(bool enabled, size_t max_entries = std::numeric_limits<size_t>::max());
  void attach_observer();
  void detach_observer();
  // `totals`: the allocated bytes per category after the event. Nothing is read or copied while disabled.
  void record(TraceAction action, uintptr_t address, size_t size, StreamId stream, const CategoryBytes& totals,
              TraceCategories categories = {}, size_t device_free = 0);
  std::vector<TraceEntry> entries() const;  // oldest first
  // The sequence number of entries()[0] (entries().size() entries follow it without a gap).
  uint64_t first_sequence() const { return recorded_ - ring_.size(); }
  size_t size() const { return ring_.size(); }

 private:
  void set_capacity(size_t max_entries);
  void stop_if_idle();
  bool user_enabled_ = false;
  int64_t observers_ = 0;
  size_t max_entries_ = std::numeric_limits<size_t>::max();
  std::vector<TraceEntry> ring_;
  size_t next_ = 0;        // where the next entry goes once the ring is full
  uint64_t recorded_ = 0;  // entries recorded so far
};

}  // namespace bytegrad
