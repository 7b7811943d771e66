#include "bytegrad/memory/allocation_context.h"

#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace bytegrad {

namespace {

// Every object here outlives static destruction (allocated once, never destroyed): a tensor at namespace
// scope is freed after the statics of this file would have been destroyed, and its free records the
// current tag.
const std::string& no_tag() {
  static const std::string* const empty = new std::string();
  return *empty;
}

// The per-thread cache is destroyed with its thread (for the main thread, before the statics); a free
// after that (a namespace-scope tensor at exit) goes to the table under the lock.
struct TagCache {
  std::unordered_map<std::string_view, const std::string*> map;
  ~TagCache();
};
thread_local bool tag_cache_gone = false;
TagCache::~TagCache() { tag_cache_gone = true; }

// The process-wide table (node-based: an element's address never changes), behind a per-thread cache so
// that a scope usually costs one lookup without a lock.
const std::string* intern(std::string_view tag) {
  if (tag.empty()) return &no_tag();
  thread_local TagCache cache;
  if (!tag_cache_gone)
    if (auto it = cache.map.find(tag); it != cache.map.end()) return it->second;
  static std::mutex* const mutex = new std::mutex;
  static std::unordered_set<std::string>* const table = new std::unordered_set<std::string>;
  const std::string* interned;
  {
    std::lock_guard lock(*mutex);
    interned = &*table->emplace(tag).first;
  }
  if (!tag_cache_gone)
    cache.map.emplace(*interned, interned);  // keyed by a view of the interned text, which never moves
  return interned;
}

// nullptr: no tag (a pointer to no_tag() here would need a dynamic initializer per thread).
thread_local const std::string* current_tag = nullptr;
thread_local const std::string* current_name = nullptr;  // the innermost TensorNameScope's, or none

const std::string* intern_name(std::string_view name) {
  if (name.empty()) throw std::invalid_argument("TensorNameScope: the name is empty");
  return intern(name);
}

}  // namespace

const std::string& current_allocation_tag() { return current_tag ? *current_tag : no_tag(); }

AllocationScope::AllocationScope(std::string_view tag) : scope_(current_tag, intern(tag)) {}

TensorNameScope::TensorNameScope(std::string_view name) : scope_(current_name, intern_name(name)) {}

const std::string& current_block_tag() { return current_name ? *current_name : current_allocation_tag(); }

bool naming_blocks() { return current_name != nullptr; }

}  // namespace bytegrad
