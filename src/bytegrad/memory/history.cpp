#include "bytegrad/memory/history.h"

#include <chrono>
#include <cstddef>

#include "bytegrad/memory/allocation_context.h"

namespace bytegrad {

std::string_view trace_action_name(TraceAction action) {
  switch (action) {
    case TraceAction::alloc: return "alloc";
    case TraceAction::free_requested: return "free_requested";
    case TraceAction::free_completed: return "free_completed";
    case TraceAction::segment_alloc: return "segment_alloc";
    case TraceAction::segment_free: return "segment_free";
    case TraceAction::segment_map: return "segment_map";
    case TraceAction::segment_unmap: return "segment_unmap";
    case TraceAction::oom: return "oom";
    case TraceAction::snapshot: return "snapshot";
    case TraceAction::category: return "category";
  }
  return "unknown";
}

void History::set_enabled(bool enabled, size_t max_entries) {
  const bool was_recording = this->enabled();
  user_enabled_ = enabled;
  if (enabled) {
    if (!was_recording) ring_.clear(), next_ = 0;
    set_capacity(max_entries);
  } else if (observers_ > 0) {
    set_capacity(std::numeric_limits<size_t>::max());  // the observers read every entry
  }
  stop_if_idle();
}

void History::attach_observer() {
  if (!enabled()) ring_.clear(), next_ = 0;
  ++observers_;
}

void History::detach_observer() {
  if (observers_ > 0) --observers_;
  stop_if_idle();
}

void History::stop_if_idle() {
  if (enabled()) return;
  ring_.clear();
  next_ = 0;
  max_entries_ = std::numeric_limits<size_t>::max();
}

void History::set_capacity(size_t max_entries) {
  max_entries = max_entries == 0 ? 1 : max_entries;
  if (max_entries == max_entries_) return;
  std::vector<TraceEntry> ordered = entries();
  if (ordered.size() > max_entries)
    ordered.erase(ordered.begin(), ordered.end() - static_cast<std::ptrdiff_t>(max_entries));
  ring_ = std::move(ordered);
  next_ = 0;
  max_entries_ = max_entries;
}

void History::record(TraceAction action, uintptr_t address, size_t size, StreamId stream, const CategoryBytes& totals,
                     TraceCategories categories, size_t device_free) {
  if (!enabled()) return;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  TraceEntry entry{action,
                   address,
                   size,
                   stream,
                   std::chrono::duration_cast<std::chrono::microseconds>(now).count(),
                   device_free,
                   current_block_tag(),
                   categories.block_size,
                   categories.category,
                   categories.previous_category,
                   totals};
  entry.free_deferred = categories.free_deferred;
  ++recorded_;
  if (ring_.size() < max_entries_) {
    ring_.push_back(std::move(entry));
  } else {
    ring_[next_] = std::move(entry);
    next_ = (next_ + 1) % max_entries_;
  }
}

std::vector<TraceEntry> History::entries() const {
  std::vector<TraceEntry> ordered;
  ordered.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) ordered.push_back(ring_[(next_ + i) % ring_.size()]);
  return ordered;
}

}  // namespace bytegrad
