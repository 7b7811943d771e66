#include "bytegrad/memory/block_categories.h"

#include <algorithm>

namespace bytegrad {

namespace {
size_t index_of(MemoryCategory c) { return static_cast<size_t>(c); }
}  // namespace

MemoryCategory BlockCategories::effective(const Entry& e) {
  // Categories are declared in precedence order: the first role held wins unless the birth category is higher.
  for (MemoryCategory c : kMemoryCategories) {
    if (c == e.birth || e.roles[index_of(c)] > 0) return c;
  }
  return MemoryCategory::other;
}

CategoryChange BlockCategories::recategorize(Entry& e) {
  const MemoryCategory now = effective(e);
  if (now == e.current) return {};
  totals_[index_of(e.current)] -= e.bytes;
  totals_[index_of(now)] += e.bytes;
  CategoryChange change{e.ptr, e.bytes, e.current, now};
  e.current = now;
  return change;
}

void BlockCategories::on_alloc(Entry& e, uintptr_t ptr, size_t bytes, const std::string& tag, bool named) {
  e.ptr = ptr;
  e.bytes = static_cast<int64_t>(bytes);
  e.birth = e.current = current_birth_category();
  e.role_owner_category = MemoryCategory::other;
  e.roles = {};
  e.birth_owner = &tag;
  e.named = named && !tag.empty();
  e.role_owner.clear();
  e.prev = nullptr;
  e.next = live_;
  if (live_) live_->prev = &e;
  live_ = &e;
  totals_[index_of(e.current)] += e.bytes;
  note_alloc_in_top(e);
}

void BlockCategories::note_alloc_in_top(const Entry& e) {
  if (top_stale_) return;
  if (top_count_ == kPeakBlocks && !larger(&e, top_[kPeakBlocks - 1])) return;
  size_t at = std::min(top_count_, kPeakBlocks - 1);  // the slot it takes: the end, or the last one's
  if (top_count_ < kPeakBlocks) ++top_count_;
  while (at > 0 && larger(&e, top_[at - 1])) {
    top_[at] = top_[at - 1];
    --at;
  }
  top_[at] = &e;
}

void BlockCategories::rebuild_top() const {
  top_count_ = 0;
  for (const Entry* e = live_; e; e = e->next) {
    if (top_count_ == kPeakBlocks && !larger(e, top_[kPeakBlocks - 1])) continue;
    size_t at = std::min(top_count_, kPeakBlocks - 1);
    if (top_count_ < kPeakBlocks) ++top_count_;
    while (at > 0 && larger(e, top_[at - 1])) {
      top_[at] = top_[at - 1];
      --at;
    }
    top_[at] = e;
  }
  top_stale_ = false;
}

MemoryCategory BlockCategories::on_free(Entry& e) {
  capture_pending_peak();
  if (!top_stale_ && std::find(top_.begin(), top_.begin() + static_cast<std::ptrdiff_t>(top_count_), &e) !=
                         top_.begin() + static_cast<std::ptrdiff_t>(top_count_))
    top_stale_ = true;
  totals_[index_of(e.current)] -= e.bytes;
  if (e.prev) e.prev->next = e.next;
  else live_ = e.next;
  if (e.next) e.next->prev = e.prev;
  e.prev = e.next = nullptr;
  return e.current;
}

CategoryChange BlockCategories::add_role(Entry* e, MemoryCategory role, std::string_view owner) {
  if (!e) return {};
  capture_pending_peak();
  // The name comes from the highest-precedence role that gives one: a parameter saved by a node stays
  // "fc1.weight", not "saved by AddmmBackward0".
  const bool name_held = !e->role_owner.empty() && e->roles[index_of(e->role_owner_category)] > 0;
  ++e->roles[index_of(role)];
  if (!owner.empty() && (!name_held || index_of(role) <= index_of(e->role_owner_category))) {
    e->role_owner = owner;
    e->role_owner_category = role;
  }
  return recategorize(*e);
}

CategoryChange BlockCategories::remove_role(Entry* e, MemoryCategory role) {
  if (!e || e->roles[index_of(role)] == 0) return {};
  capture_pending_peak();
  --e->roles[index_of(role)];
  return recategorize(*e);
}

void BlockCategories::rebirth(MemoryCategory from, MemoryCategory to, std::vector<CategoryChange>* changes) {
  for (Entry* e = live_; e; e = e->next) {
    if (e->birth != from) continue;
    e->birth = to;
    if (CategoryChange change = recategorize(*e); change.bytes != 0 && changes) changes->push_back(change);
  }
  if (changes)
    std::sort(changes->begin(), changes->end(), [](const auto& a, const auto& b) { return a.address < b.address; });
}

std::string BlockCategories::module_owner(const Entry& e) {
  const bool by_module =
      e.role_owner_category == MemoryCategory::parameter || e.role_owner_category == MemoryCategory::buffer;
  return by_module && e.roles[index_of(e.role_owner_category)] > 0 ? e.role_owner : std::string();
}

LedgerBlock BlockCategories::ledger_block(const Entry& e) {
  const bool role_named = !e.role_owner.empty() && e.role_owner_category == e.current;
  const bool tagged = e.birth_owner && !e.birth_owner->empty();
  if (e.named)
    return {e.ptr, e.bytes, e.current, role_named ? *e.birth_owner + " (" + e.role_owner + ")" : *e.birth_owner};
  return {e.ptr, e.bytes, e.current, role_named ? e.role_owner : (tagged ? *e.birth_owner : std::string("untagged"))};
}

std::vector<LedgerBlock> BlockCategories::largest(size_t n) const {
  if (n <= kPeakBlocks) {
    if (top_stale_) rebuild_top();
    std::vector<LedgerBlock> blocks;
    for (size_t i = 0; i < std::min(n, top_count_); ++i) blocks.push_back(ledger_block(*top_[i]));
    return blocks;
  }
  std::vector<const Entry*> order;
  for (const Entry* e = live_; e; e = e->next) order.push_back(e);
  const size_t count = std::min(n, order.size());
  // Largest first, ties by address so the report does not depend on the list's order.
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
      [](const Entry* a, const Entry* b) { return a->bytes != b->bytes ? a->bytes > b->bytes : a->ptr < b->ptr; });
  std::vector<LedgerBlock> blocks;
  for (size_t i = 0; i < count; ++i) blocks.push_back(ledger_block(*order[i]));
  return blocks;
}

void BlockCategories::on_new_peak(int64_t allocated) {
  // Only a higher peak: a training loop reaches the same peak every step, and the record keeps the first.
  if (allocated > peak_.allocated) record_peak(allocated);
}

void BlockCategories::record_peak(int64_t allocated) {
  peak_.allocated = allocated;
  peak_.bytes = totals_;
  peak_.phase = current_phase();
  peak_blocks_pending_ = true;
}

void BlockCategories::capture_pending_peak() {
  if (!peak_blocks_pending_) return;
  peak_blocks_pending_ = false;
  peak_.largest = largest(kPeakBlocks);
}

void BlockCategories::reset_peak(int64_t allocated) { record_peak(allocated); }

PeakRecord BlockCategories::peak() const {
  PeakRecord record = peak_;
  if (peak_blocks_pending_) record.largest = largest(kPeakBlocks);  // still at the peak
  return record;
}

}  // namespace bytegrad
