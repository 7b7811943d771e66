#include "bytegrad/reports/memory_story.h"
#include "bytegrad/memory/memory_functions.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/size_rules.h"

namespace bytegrad {

MemoryFigures memory_figures(const CachingAllocator& allocator) {
  const std::map<std::string, int64_t> stats = allocator.memory_stats();
  auto stat = [&](const char* key) { return stats.at(key); };
  return {.allocated = stat("allocated_bytes.all.current"),
          .reserved = stat("reserved_bytes.all.current"),
          .max_allocated = stat("allocated_bytes.all.peak"),
          .max_reserved = stat("reserved_bytes.all.peak"),
          .segments = stat("segment.all.current"),
          .blocks = stat("allocation.all.current"),
          .requested = stat("requested_bytes.all.current"),
          .inactive_split = stat("inactive_split_bytes.all.current")};
}

MemoryStory::MemoryStory(Device device) : device_(device) {
  CachingAllocator& allocator = caching_allocator(device);
  next_entry_ = allocator.attach_history_observer();  // what was recorded before the story is not its own
  allocator_id_ = allocator.id();
  previous_ledger_ = allocator.category_bytes();
}

MemoryStory::~MemoryStory() {
  // A reconfigured device's old allocator (and its observer count) is gone with it.
  CachingAllocator& allocator = caching_allocator(device_);
  if (allocator.id() == allocator_id_) allocator.detach_history_observer();
}

namespace {

std::vector<OpBytes> largest_first(const std::map<std::string, int64_t>& by_op) {
  std::vector<OpBytes> sorted;
  sorted.reserve(by_op.size());
  for (const auto& [op, bytes] : by_op) sorted.push_back({op, bytes});
  std::stable_sort(sorted.begin(), sorted.end(), [](const OpBytes& a, const OpBytes& b) { return a.bytes > b.bytes; });
  return sorted;
}

}  // namespace

size_t traced_block_bytes(const CachingAllocator& allocator, const TraceEntry& entry) {
  const size_t live = allocator.block_size(reinterpret_cast<const void*>(entry.address));
  return live ? live : round_size(entry.size, allocator.config());
}

int64_t MemoryChange::net_bytes() const {
  int64_t net = 0;
  for (const OpBytes& a : added) net += a.bytes;
  for (const OpBytes& f : freed) net -= f.bytes;
  return net;
}

std::string MemoryChange::str() const {
  if (device_reconfigured) return "device reconfigured (its history starts after this mark)";
  std::vector<std::pair<int64_t, std::string>> phrases;
  for (const OpBytes& a : added) phrases.emplace_back(a.bytes, fmt::format("+{} {}", human_bytes(a.bytes), a.op));
  for (const OpBytes& f : freed)
    phrases.emplace_back(f.bytes, fmt::format("-{} {} (earlier)", human_bytes(f.bytes), f.op));
  std::stable_sort(phrases.begin(), phrases.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // A long list (an optimizer's first step names every parameter's state) ends in a count: the largest
  // first, the rest summed.
  constexpr size_t kPhrases = 12;
  std::string text;
  for (size_t i = 0; i < std::min(phrases.size(), kPhrases); ++i)
    text += (text.empty() ? "" : ", ") + phrases[i].second;
  if (phrases.size() > kPhrases) {
    int64_t more_added = 0, more_freed = 0;
    for (size_t i = kPhrases; i < phrases.size(); ++i)
      (phrases[i].second.front() == '+' ? more_added : more_freed) += phrases[i].first;
    text += fmt::format(", and {} more ({}{}{})", phrases.size() - kPhrases,
                        more_added ? "+" + human_bytes(more_added) : "", more_added && more_freed ? ", " : "",
                        more_freed ? "-" + human_bytes(more_freed) + " (earlier)" : "");
  }
  if (transient_blocks > 0) text += fmt::format("{}{} transient blocks", text.empty() ? "" : "; ", transient_blocks);
  return text.empty() ? "no change" : text;
}

std::string MemoryChange::by_category() const {
  std::string text;
  for (MemoryCategory c : kMemoryCategories) {
    const int64_t delta = category_delta[static_cast<size_t>(c)];
    if (delta != 0)
      text += fmt::format("{}{}{} {}", text.empty() ? "" : ", ", delta > 0 ? "+" : "", human_bytes(delta),
                          category_name(c));
  }
  return text;
}

MemoryChange MemoryStory::mark(const std::string& label, const std::string& note) {
  CachingAllocator& allocator = caching_allocator(device_);
  MemoryChange change;
  // The device was reconfigured: a new allocator, a new history.
  if (allocator.id() != allocator_id_) {
    next_entry_ = allocator.attach_history_observer();
    allocator_id_ = allocator.id();
    live_.clear();
    previous_ledger_ = {};
    change.device_reconfigured = true;
    for (StoryMark& m : marks_) m.event = -1;  // their history was the old allocator's
  }
  const MemorySnapshot snap = allocator.snapshot();
  const std::vector<TraceEntry>& trace = snap.trace;
  // Entries are read by sequence number: the history may hold older entries (recorded for someone else)
  // or, after a ring of record_history(true, max_entries) overflowed, have lost some.
  const size_t first = next_entry_ > snap.trace_start ? static_cast<size_t>(next_entry_ - snap.trace_start) : 0;
  std::map<std::string, int64_t> added, removed;  // by tag: blocks made since the last mark / older ones freed
  for (size_t i = first; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action == TraceAction::alloc) {
      // Blocks already freed again count as transient anyway.
      live_[e.address] = {traced_block_bytes(allocator, e), e.tag.empty() ? "untagged" : e.tag, true};
    } else if (e.action == TraceAction::free_requested) {
      auto it = live_.find(e.address);
      if (it == live_.end()) continue;  // allocated before the story began
      if (it->second.this_mark) {
        ++change.transient_blocks;
      } else {
        removed[it->second.tag] += static_cast<int64_t>(it->second.bytes);
      }
      live_.erase(it);
    }
  }
  next_entry_ = snap.trace_start + trace.size();
  for (auto& [address, block] : live_) {
    if (!block.this_mark) continue;
    added[block.tag] += static_cast<int64_t>(block.bytes);
    block.this_mark = false;
  }
  change.added = largest_first(added);
  change.freed = largest_first(removed);

  StoryMark m;
  static_cast<MemoryFigures&>(m) = memory_figures(allocator);
  m.label = label.empty() ? "mark " + std::to_string(marks_.size() + 1) : label;
  // snapshot() records its own entry just after the trace it returns (as PyTorch does): the next index.
  m.event = static_cast<int64_t>(trace.size());
  m.note = note;
  m.ledger = allocator.category_bytes();
  for (size_t c = 0; c < kMemoryCategoryCount; ++c) change.category_delta[c] = m.ledger[c] - previous_ledger_[c];
  previous_ledger_ = m.ledger;
  m.change = change;
  marks_.push_back(std::move(m));
  return change;
}

}  // namespace bytegrad
