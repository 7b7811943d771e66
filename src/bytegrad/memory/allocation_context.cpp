#include "bytegrad/memory/allocation_context.h"

#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace bytegrad {

namespace {

const std::string kNoTag;

// The process-wide table (node-based: an element's address never changes), behind a per-thread cache so
// that a scope usually costs one lookup without a lock.
const std::string* intern(std::string_view tag) {
  if (tag.empty()) return &kNoTag;
  thread_local std::unordered_map<std::string_view, const std::string*> cache;
  if (auto it = cache.find(tag); it != cache.end()) return it->second;
  static std::mutex mutex;
  static std::unordered_set<std::string> table;
  const std::string* interned;
  {
    std::lock_guard lock(mutex);
    interned = &*table.emplace(tag).first;
  }
  cache.emplace(*interned, interned);  // keyed by a view of the interned text, which never moves
  return interned;
}

thread_local const std::string* current_tag = &kNoTag;

}  // namespace

const std::string& current_allocation_tag() { return *current_tag; }

AllocationScope::AllocationScope(std::string_view tag) : previous_(current_tag) { current_tag = intern(tag); }

AllocationScope::~AllocationScope() { current_tag = previous_; }

}  // namespace bytegrad
