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

CategoryChange BlockCategories::recategorize(uintptr_t ptr, Entry& e) {
  const MemoryCategory now = effective(e);
  if (now == e.current) return {};
  totals_[index_of(e.current)] -= e.bytes;
  totals_[index_of(now)] += e.bytes;
  CategoryChange change{ptr, e.bytes, e.current, now};
  e.current = now;
  return change;
}

void BlockCategories::on_alloc(uintptr_t ptr, size_t bytes, std::string_view tag) {
  Entry& e = entries_[ptr];
  e = Entry{};
  e.bytes = static_cast<int64_t>(bytes);
  e.birth = e.current = current_birth_category();
  e.birth_owner = tag;
  totals_[index_of(e.current)] += e.bytes;
}

MemoryCategory BlockCategories::on_free(uintptr_t ptr) {
  capture_pending_peak();
  auto it = entries_.find(ptr);
  if (it == entries_.end()) return MemoryCategory::other;
  const MemoryCategory category = it->second.current;
  totals_[index_of(category)] -= it->second.bytes;
  entries_.erase(it);
  return category;
}

CategoryChange BlockCategories::add_role(uintptr_t ptr, MemoryCategory role, std::string_view owner) {
  auto it = entries_.find(ptr);
  if (it == entries_.end()) return {};
  capture_pending_peak();
  Entry& e = it->second;
  ++e.roles[index_of(role)];
  if (!owner.empty()) {
    e.role_owner = owner;
    e.role_owner_category = role;
  }
  return recategorize(ptr, e);
}

CategoryChange BlockCategories::remove_role(uintptr_t ptr, MemoryCategory role) {
  auto it = entries_.find(ptr);
  if (it == entries_.end() || it->second.roles[index_of(role)] == 0) return {};
  capture_pending_peak();
  --it->second.roles[index_of(role)];
  return recategorize(ptr, it->second);
}

void BlockCategories::rebirth(MemoryCategory from, MemoryCategory to, std::vector<CategoryChange>* changes) {
  for (auto& [ptr, e] : entries_) {
    if (e.birth != from) continue;
    e.birth = to;
    if (CategoryChange change = recategorize(ptr, e); change.bytes != 0 && changes) changes->push_back(change);
  }
  if (changes)
    std::sort(changes->begin(), changes->end(), [](const auto& a, const auto& b) { return a.address < b.address; });
}

std::string BlockCategories::role_owner(uintptr_t ptr) const {
  auto it = entries_.find(ptr);
  return it == entries_.end() ? std::string() : it->second.role_owner;
}

MemoryCategory BlockCategories::category_of(uintptr_t ptr) const {
  auto it = entries_.find(ptr);
  return it == entries_.end() ? MemoryCategory::other : it->second.current;
}

LedgerBlock BlockCategories::ledger_block(uintptr_t ptr, const Entry& e) const {
  const bool role_named = !e.role_owner.empty() && e.role_owner_category == e.current;
  return {ptr, e.bytes, e.current, role_named ? e.role_owner : (e.birth_owner.empty() ? "untagged" : e.birth_owner)};
}

std::vector<LedgerBlock> BlockCategories::largest(size_t n) const {
  std::vector<std::pair<int64_t, uintptr_t>> order;
  order.reserve(entries_.size());
  for (const auto& [ptr, e] : entries_) order.emplace_back(e.bytes, ptr);
  const size_t count = std::min(n, order.size());
  // Largest first, ties by address so the report does not depend on hashing order.
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
                    [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::vector<LedgerBlock> blocks;
  for (size_t i = 0; i < count; ++i) blocks.push_back(ledger_block(order[i].second, entries_.at(order[i].second)));
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
