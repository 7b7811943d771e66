// The allocator's book of what each live block is for (memory_category.h): a category per block, kept as
// roles come and go, running byte totals per category (so the parts always sum to memory_allocated()),
// the totals and largest blocks at the peak, and each block's owner for people ("fc1.weight", "relu",
// "saved by AddmmBackward0 (fc2)"). Not thread-safe on its own: the CachingAllocator calls it under its lock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <array>
#include <vector>

#include "bytegrad/memory/memory_category.h"

namespace bytegrad {

struct LedgerBlock {
  uintptr_t address = 0;
  int64_t bytes = 0;  // the block's size, as memory_allocated() counts it
  MemoryCategory category = MemoryCategory::other;
  std::string owner;
};

struct PeakRecord {
  int64_t allocated = 0;  // max_memory_allocated() when recorded
  CategoryBytes bytes{};  // per category at that moment
  MemoryPhase phase = MemoryPhase::forward;
  std::vector<LedgerBlock> largest;  // the largest live blocks at that moment
};

// A live block whose category changed (for the history's `category` entries).
struct CategoryChange {
  uintptr_t address = 0;
  int64_t bytes = 0;
  MemoryCategory from = MemoryCategory::other;
  MemoryCategory to = MemoryCategory::other;
};

// What the book keeps per live block. It lives inside the allocator's own block record, so keeping the
// book costs no allocation of its own; live entries are linked in a list for the reports.
struct BlockCategoryEntry {
  uintptr_t ptr = 0;
  int64_t bytes = 0;
  MemoryCategory birth = MemoryCategory::other;
  MemoryCategory current = MemoryCategory::other;
  MemoryCategory role_owner_category = MemoryCategory::other;
  std::array<uint16_t, kMemoryCategoryCount> roles{};
  const std::string* birth_owner = nullptr;  // the allocation tag (interned: allocation_context.h)
  bool named = false;                        // birth_owner is a TensorNameScope's name, not an op's tag
  std::string role_owner;                    // the name a role gave it ("fc1.weight"), "" when none
  BlockCategoryEntry* prev = nullptr;        // the live list
  BlockCategoryEntry* next = nullptr;
};

class BlockCategories {
 public:
  using Entry = BlockCategoryEntry;
  static constexpr size_t kPeakBlocks = 10;  // how many of the largest blocks a peak keeps

  BlockCategories() = default;
  BlockCategories(const BlockCategories&) = delete;
  BlockCategories& operator=(const BlockCategories&) = delete;

  // The block at `ptr` (whose record holds `e`) became live / is freed; on_free returns its category.
  // `named`: the tag is a name the program gave (TensorNameScope), which the reports keep even when a
  // role names the block too ("my batch (saved by AddmmBackward0 (fc1))").
  void on_alloc(Entry& e, uintptr_t ptr, size_t bytes, const std::string& tag, bool named = false);
  MemoryCategory on_free(Entry& e);
  // A role's count goes up or down (a storage can be saved by several nodes, or be the parameter of two
  // modules); `owner`, when given, names the block while this role decides its category. Returns the
  // change of category this made, if any (change.bytes == 0 when none). A null entry (no live block
  // there) changes nothing.
  CategoryChange add_role(Entry* e, MemoryCategory role, std::string_view owner);
  CategoryChange remove_role(Entry* e, MemoryCategory role);
  // Blocks born `from` are from now on born `to` (backward has ended: its surviving gradients that did not
  // become a .grad are no longer in flight). `changes`, when given, gets the blocks whose category changed,
  // in address order (the allocator asks only while it records history).
  void rebirth(MemoryCategory from, MemoryCategory to, std::vector<CategoryChange>* changes = nullptr);

  const CategoryBytes& totals() const { return totals_; }
  // The name a module gave the block as its parameter or buffer ("fc1.weight"), or "" when none did.
  static std::string module_owner(const Entry& e);
  std::vector<LedgerBlock> largest(size_t n) const;

  // allocated reached its maximum (again, or higher): if higher, totals and phase now; the largest blocks
  // once the peak ends (the next free or role change), since until then nothing has changed.
  void on_new_peak(int64_t allocated);
  void reset_peak(int64_t allocated);  // reset_peak_stats: the current state is the new peak
  PeakRecord peak() const;

 private:
  static MemoryCategory effective(const Entry& e);
  CategoryChange recategorize(Entry& e);
  void capture_pending_peak();
  void record_peak(int64_t allocated);
  static LedgerBlock ledger_block(const Entry& e);

  // The min(kPeakBlocks, live) largest live entries, largest first (ties by address), kept as blocks come
  // and go so that a peak's report reads them instead of walking every live block: building a model,
  // where each allocation is a new peak, was quadratic in its block count (3000 GPT-2 layers ran for
  // minutes). A free of one of them makes the list stale; the next read rebuilds it with one walk.
  void note_alloc_in_top(const Entry& e);
  void rebuild_top() const;
  static bool larger(const Entry* a, const Entry* b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->ptr < b->ptr;
  }
  mutable std::array<const Entry*, kPeakBlocks> top_{};
  mutable size_t top_count_ = 0;
  mutable bool top_stale_ = false;

  Entry* live_ = nullptr;  // head of the live list
  CategoryBytes totals_{};
  PeakRecord peak_;
  bool peak_blocks_pending_ = false;
};

}  // namespace bytegrad
