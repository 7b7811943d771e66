#include "bytegrad/memory/history.h"

#include <chrono>

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
  enabled_ = enabled;
  max_entries_ = max_entries == 0 ? 1 : max_entries;
  ring_.clear();
  next_ = 0;
}

void History::record(TraceAction action, uintptr_t address, size_t size, StreamId stream, const CategoryBytes& totals,
                     TraceCategories categories, size_t device_free) {
  if (!enabled_) return;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  TraceEntry entry{action, address, size, stream,
                   std::chrono::duration_cast<std::chrono::microseconds>(now).count(), device_free,
                   current_allocation_tag(), categories.block_size, categories.category,
                   categories.previous_category, totals};
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
