#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/allocation_context.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "bytegrad/core/enum_name.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/memory/outside_allocator.h"

namespace bytegrad {

// A block is a run of a segment: segments are cudaMalloc'ed whole and tiled, in address order, by a
// doubly linked list of blocks. A block is "split" when its segment holds more than one block.
// An expandable segment's whole reserved range is tiled the same way; runs without pages are unmapped
// blocks (never handed out, kept in the pool's `unmapped` set), so a mapped block always has neighbours.
struct CachingAllocator::Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  size_t requested_size = 0;  // last request served from this block; not cleared on free
  StreamId stream = 0;
  BlockPool* pool = nullptr;
  bool allocated = false;
  bool mapped = true;                    // false only for an expandable segment's range without pages
  ExpandableSegment* segment = nullptr;  // the expandable segment this block lies in, if any
  Block* prev = nullptr;
  Block* next = nullptr;
  uint64_t gc_count_base = 0;                             // the pool's search count when this block was last cached
  std::vector<StreamId> stream_uses;                      // while allocated: other streams that use it (record_stream)
  int event_count = 0;                                    // while its free waits on events of those streams
  MemoryCategory freed_category = MemoryCategory::other;  // while its free waits: what it was for
  BlockCategoryEntry category;                            // while allocated: what the block is for (block_categories.h)
  // tie_address - ptr for the block's segment (mod 2^64): best fit orders equal sizes by ptr + tie_shift,
  // which keeps the order of blocks inside a segment and puts segments where RawMemory::tie_address says.
  uintptr_t tie_shift = 0;
  uintptr_t segment_tie_address = 0;  // the tie address of its segment's start: which segment it lies in

  uintptr_t tie_address() const { return ptr + tie_shift; }

  bool is_split() const { return prev != nullptr || next != nullptr; }
  // Freed, but other streams may still use it: events pending, or their recording deferred while a thread
  // allocates to a private pool (stream_uses kept).
  bool is_pending_free() const { return !allocated && (event_count > 0 || !stream_uses.empty()); }
  bool is_free() const { return !allocated && event_count == 0 && stream_uses.empty(); }
};

// One reserved address range of whole pages (cuMemAddressReserve), pages mapped on demand.
struct CachingAllocator::ExpandableSegment {
  uintptr_t base = 0;
  size_t page_size = 0;
  std::vector<bool> page_mapped;  // one entry per page of the reservation

  size_t size() const { return page_size * page_mapped.size(); }
  size_t page_below(uintptr_t p) const { return (p - base) / page_size; }
  size_t page_above(uintptr_t p) const { return (p - base + page_size - 1) / page_size; }
  uintptr_t page_address(size_t page) const { return base + page * page_size; }
};

// Best fit: within a stream, the smallest adequate size, ties to the lowest address (the segment's
// tie address: RawMemory::tie_address).
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->tie_address() < b->tie_address();
}

bool CachingAllocator::AddressOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->ptr < b->ptr;
}

std::string_view block_state_name(BlockState state) {
  static constexpr std::string_view kNames[] = {"active_allocated", "active_pending_free", "inactive"};
  return enum_name(state, kNames, "unknown");
}

CachingAllocator::CachingAllocator(std::unique_ptr<RawMemory> raw, AllocatorConfig config, int device_index,
                                   std::shared_ptr<StreamTimeline> timeline)
    : raw_(std::move(raw)),
      timeline_(timeline ? std::move(timeline) : std::make_shared<SimulatedTimeline>()),
      config_(std::move(config)),
      device_index_(device_index) {
  static std::atomic<uint64_t> allocators_made{0};
  id_ = ++allocators_made;
  stats_.max_split_size =
      config_.max_split_size == std::numeric_limits<size_t>::max() ? -1 : static_cast<int64_t>(config_.max_split_size);
  // per_process_memory_fraction in the settings caps the allocator from the start (PyTorch 2.11); 1.0 sets none.
  if (config_.per_process_memory_fraction < 1.0) set_memory_fraction(config_.per_process_memory_fraction);
}

CachingAllocator::~CachingAllocator() {
  std::vector<Block*> all;
  std::vector<BlockPool*> pools{&small_pool_, &large_pool_};
  for (auto& [id, pool] : private_pools_) pools.insert(pools.end(), {&pool->small, &pool->large});
  for (BlockPool* pool : pools) {
    all.insert(all.end(), pool->free_blocks.begin(), pool->free_blocks.end());
    all.insert(all.end(), pool->unmapped.begin(), pool->unmapped.end());
  }
  for (auto& [ptr, block] : active_blocks_) all.push_back(block);
  all.insert(all.end(), frees_deferred_.begin(), frees_deferred_.end());
  for (auto& [stream, frees] : pending_frees_) {
    for (auto& [event, block] : frees) {
      timeline_->destroy_event(event);
      if (--block->event_count == 0) all.push_back(block);
    }
  }
  for (Block* block : all) {
    if (block->prev != nullptr || block->segment) continue;
    size_t segment_bytes = 0;
    for (Block* b = block; b; b = b->next) segment_bytes += b->size;
    raw_->release(reinterpret_cast<void*>(block->ptr), segment_bytes);
  }
  // Expandable segments: every run of mapped pages, then the reservation.
  for (const auto& segment : expandable_segments_) {
    const auto& pages = segment->page_mapped;
    for (size_t first = 0; first < pages.size();) {
      if (!pages[first]) {
        ++first;
        continue;
      }
      size_t end = first;
      while (end < pages.size() && pages[end]) ++end;
      raw_->unmap_pages(segment->page_address(first), (end - first) * segment->page_size, segment->page_size);
      first = end;
    }
    raw_->release_addresses(segment->base, segment->size());
  }
  for (Block* block : all) delete block;
  for (Block* block : spare_blocks_) delete block;
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block();
  Block* block = spare_blocks_.back();
  spare_blocks_.pop_back();
  // Fresh placement fields; the category entry is reset when the block is next allocated (on_alloc), and
  // keeping it spares its string's allocation.
  BlockCategoryEntry category = std::move(block->category);
  *block = Block();
  block->category = std::move(category);
  return block;
}

void CachingAllocator::recycle_block(Block* block) { spare_blocks_.push_back(block); }

void CachingAllocator::insert_free(BlockPool& pool, Block* block) {
  block->gc_count_base = pool.search_count;
  pool.free_blocks.insert(block);
}

// ---------------------------------------------------------------------------------------------- malloc

void* CachingAllocator::malloc(size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;  // never reaches the pools: no stat, no trace
  if (bytes >= kOneExaByte) throw OutOfMemoryError(kTooLargeMessage, bytes, 0);

  std::unique_lock lock(mutex_);
  // While a thread allocates to a private pool, PyTorch leaves pending frees alone (as during a CUDA graph
  // capture, which the same state stands for).
  if (!allocating_to_pools()) process_events();
  Request request{bytes, 0, 0, stream, nullptr};
  request.size = round_size(bytes, config_);
  request.pool = &pool_for_request(request.size);
  request.segment_size = segment_size_for(request.size, config_);

  bool found = find_free_block(request);
  if (!found) {
    if (fraction_set_ && config_.garbage_collection_threshold > 0.0) collect_garbage();
    // A new segment; else a free block of a use_on_oom pool; else free oversize cached blocks and retry;
    // else (unless a thread allocates to a private pool) flush the whole cache and retry.
    found = allocate_segment(request, false) || try_use_on_oom_pools(request) ||
            (release_available_cached_blocks(request) && allocate_segment(request, false));
    if (!found && !allocating_to_pools()) {
      release_cached_blocks();
      found = allocate_segment(request, true);
    }
  }
  if (!found) throw_out_of_memory(request, lock);
  Block* block = take_found_block(request);
  void* ptr = reinterpret_cast<void*>(block->ptr);
  raw_->mark_in_use(ptr, bytes, true);  // the requested bytes only: a write past them is a bug
  categories_.on_alloc(block->category, block->ptr, block->size, current_block_tag(), naming_blocks());
  // Recorded once the block has its category, so the entry's totals include it.
  if (history_.enabled())
    history_.record(TraceAction::alloc, block->ptr, block->requested_size, block->stream, categories_.totals(),
                    {block->size, block->category.current});
  const Stat& allocated = stats_.allocated_bytes.by_type[kAggregate];
  if (allocated.current == allocated.peak) categories_.on_new_peak(allocated.current);
  return ptr;
}

bool CachingAllocator::find_free_block(Request& request) {
  BlockPool& pool = *request.pool;
  if (fraction_set_ && config_.garbage_collection_threshold > 0.0) ++pool.search_count;
  Block key;
  key.stream = request.stream;
  key.size = request.size;
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end() || (*it)->stream != request.stream) return false;
  if (!(*it)->segment) {
    // Equal candidates sit next to each other, lowest tie address first.
    auto equal = [&](auto next) {
      return next != pool.free_blocks.end() && (*next)->stream == request.stream && (*next)->size == (*it)->size &&
             !(*next)->segment;
    };
    // Only candidates in different segments make a tie: inside one segment the order is its offsets', the
    // same in every process. The other order takes the highest segment's candidates, each segment's in their
    // own order (segments never overlap, so a segment's candidates are consecutive).
    auto in_segment = [](auto a, auto b) { return (*a)->segment_tie_address == (*b)->segment_tie_address; };
    auto other = std::next(it);
    while (equal(other) && in_segment(other, it)) ++other;
    if (equal(other)) {
      ++placement_ties_;
      if (tie_order_ == TieOrder::highest_address) {
        auto last = other;
        while (equal(std::next(last))) ++last;
        while (in_segment(std::prev(last), last)) --last;
        it = last;
      }
    }
  }
  if ((*it)->segment) {
    // A free block at the end of a mapped range can grow into the unmapped range after it; best fit
    // compares such blocks by what they could grow to, walking on while the next candidate could grow
    // to less (PyTorch's local walk, not a global minimum).
    auto growable = [](const Block* b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); };
    for (auto next = std::next(it); (*it)->segment && next != pool.free_blocks.end() &&
                                    (*next)->stream == request.stream && growable(*next) < growable(*it);
         ++next)
      it = next;
  }
  const size_t max_split = config_.max_split_size;
  // An oversize block never serves a request below the threshold, nor one it exceeds by too much.
  if (request.size < max_split && (*it)->size >= max_split) return false;
  if (request.size >= max_split && (*it)->size >= request.size + config_.max_non_split_rounding_size) return false;
  request.block = *it;
  pool.free_blocks.erase(it);
  return true;
}

bool CachingAllocator::allocate_segment(Request& request, bool is_retry) {
  if (is_retry) ++stats_.num_alloc_retries;
  const size_t bytes = request.segment_size;
  // The cap is tested against the whole-segment size even when expandable segments map fewer bytes.
  if (fraction_set_ && total_reserved_ + bytes > allowed_maximum_) return false;
  if (config_.expandable_segments) {
    if (!allocate_expandable(request)) return false;
    if (request.pool->owner) ++request.pool->owner->segment_count;  // once per growth, as PyTorch counts it
    return true;
  }
  void* ptr = raw_->allocate(bytes);
  if (!ptr) return false;
  if (request.pool->owner) ++request.pool->owner->segment_count;
  total_reserved_ += bytes;
  Block* block = new_block();
  block->ptr = reinterpret_cast<uintptr_t>(ptr);
  block->tie_shift = raw_->tie_address(ptr) - block->ptr;
  block->segment_tie_address = block->tie_address();
  block->size = bytes;
  block->stream = request.stream;
  block->pool = request.pool;
  const PoolKind kind = request.pool->kind;
  stats_.segment.increase(kind, 1);
  stats_.reserved_bytes.increase(kind, static_cast<int64_t>(bytes));
  if (bytes >= config_.max_split_size) stats_.oversize_segments.increase(1);
  ++stats_.num_device_alloc;
  history_.record(TraceAction::segment_alloc, block->ptr, bytes, request.stream, categories_.totals());
  request.block = block;
  return true;
}

// ---------------------------------------------------------------------------------- expandable segments

// The block to grow from: the lowest-addressed unmapped range of this stream's segments that, together
// with a free mapped block just before it and the free or unmapped blocks after it, spans `size` bytes.
// Without one, a new segment reserves addresses for 1 1/8 of the device's memory as one unmapped block.
CachingAllocator::Block* CachingAllocator::find_expandable_block(StreamId stream, BlockPool& pool, size_t size) {
  auto usable = [](const Block* b) { return b != nullptr && b->is_free(); };
  auto spans_enough = [&](const Block* b) {
    size_t bytes = 0;
    for (; bytes < size && usable(b); b = b->next) bytes += b->size;
    return bytes >= size;
  };
  Block key;
  key.stream = stream;
  for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
    Block* candidate = *it;
    if (usable(candidate->prev)) candidate = candidate->prev;
    if (spans_enough(candidate)) return candidate;
  }
  auto segment = std::make_unique<ExpandableSegment>();
  segment->page_size = expandable_page_size(pool.kind, config_);
  const size_t total = raw_->info().total;
  const size_t address_bytes = total + total / 8;
  segment->page_mapped.assign((address_bytes + segment->page_size - 1) / segment->page_size, false);
  segment->base = raw_->reserve_addresses(segment->size());
  if (segment->base == 0)
    throw std::runtime_error("expandable segments: cannot reserve " + std::to_string(segment->size()) +
                             " bytes of device addresses");
  Block* block = new_block();
  block->ptr = segment->base;
  block->size = segment->size();
  block->stream = stream;
  block->pool = &pool;
  block->mapped = false;
  block->segment = segment.get();
  pool.unmapped.insert(block);
  expandable_segments_.push_back(std::move(segment));
  return block;
}

// Maps the pages covering the first `size` bytes of an unmapped block (all or none); the mapped part
// merges with free mapped neighbours and joins the free set. False when the device has no room.
bool CachingAllocator::map_block(Block* to_map, size_t size) {
  ExpandableSegment& segment = *to_map->segment;
  const size_t first = segment.page_below(to_map->ptr);
  const size_t end = segment.page_above(to_map->ptr + size);
  const uintptr_t address = segment.page_address(first);
  const size_t bytes = (end - first) * segment.page_size;
  if (bytes == 0 || !raw_->map_pages(address, bytes, segment.page_size)) return false;
  for (size_t page = first; page < end; ++page) segment.page_mapped[page] = true;

  BlockPool& pool = *to_map->pool;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (bytes < to_map->size) {  // the rest stays unmapped, as its own block after this one
    Block* rest = new_block();
    rest->ptr = to_map->ptr + bytes;
    rest->tie_shift = to_map->tie_shift;
    rest->size = to_map->size - bytes;
    rest->stream = to_map->stream;
    rest->pool = &pool;
    rest->mapped = false;
    rest->segment = to_map->segment;
    rest->prev = to_map;
    rest->next = to_map->next;
    if (rest->next) rest->next->prev = rest;
    to_map->next = rest;
    to_map->size = bytes;
    pool.unmapped.insert(rest);
  }
  merge_into(to_map, to_map->prev, pool);
  merge_into(to_map, to_map->next, pool);
  insert_free(pool, to_map);

  total_reserved_ += bytes;
  stats_.reserved_bytes.increase(pool.kind, static_cast<int64_t>(bytes));
  ++stats_.num_device_alloc;
  history_.record(TraceAction::segment_map, address, bytes, to_map->stream, categories_.totals());
  return true;
}

// PyTorch's try_allocate_expandable_block: map the start of the range found, then keep mapping the
// unmapped block after it until the (merged) free block holds `size` bytes. A failure part-way leaves
// what was mapped mapped.
bool CachingAllocator::allocate_expandable(Request& request) {
  BlockPool& pool = *request.pool;
  const size_t size = request.size;
  Block* candidate = find_expandable_block(request.stream, pool, size);
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) return false;
  while (candidate->size < size) {
    Block* next = candidate->next;  // unmapped: a free mapped block is followed by an unmapped one
    if (!map_block(next, std::min(size - candidate->size, next->size))) return false;
    candidate = next;  // it absorbed the free block before it
  }
  pool.free_blocks.erase(candidate);
  request.block = candidate;
  return true;
}

// Unmaps the whole pages inside a free mapped block; the partial pages at either end stay mapped as free
// blocks of their own. The unmapped range merges with unmapped neighbours.
void CachingAllocator::unmap_block(Block* block) {
  ExpandableSegment& segment = *block->segment;
  const size_t first = segment.page_above(block->ptr);
  const size_t end = segment.page_below(block->ptr + block->size);
  if (first >= end) return;
  notify_before_memory_returned();
  const uintptr_t address = segment.page_address(first);
  const size_t bytes = (end - first) * segment.page_size;
  BlockPool& pool = *block->pool;
  pool.free_blocks.erase(block);

  auto free_piece = [&](uintptr_t ptr, size_t size, Block* prev, Block* next) {
    Block* piece = new_block();
    piece->ptr = ptr;
    piece->tie_shift = block->tie_shift;
    piece->size = size;
    piece->stream = block->stream;
    piece->pool = &pool;
    piece->segment = block->segment;
    piece->prev = prev;
    piece->next = next;
    if (prev) prev->next = piece;
    if (next) next->prev = piece;
    insert_free(pool, piece);
  };
  const size_t before = address - block->ptr;
  const size_t after = block->size - before - bytes;
  if (before > 0) free_piece(block->ptr, before, block->prev, block);
  if (after > 0) free_piece(address + bytes, after, block, block->next);

  raw_->unmap_pages(address, bytes, segment.page_size);
  for (size_t page = first; page < end; ++page) segment.page_mapped[page] = false;
  block->ptr = address;
  block->size = bytes;
  block->mapped = false;
  merge_into(block, block->prev, pool);
  merge_into(block, block->next, pool);
  pool.unmapped.insert(block);

  total_reserved_ -= bytes;
  stats_.reserved_bytes.decrease(pool.kind, static_cast<int64_t>(bytes));
  if (pool.owner) --pool.owner->segment_count;
  ++stats_.num_device_free;
  history_.record(TraceAction::segment_unmap, address, bytes, block->stream, categories_.totals());
}

// A segment with no pages left mapped gives its addresses back (the next request reserves anew).
void CachingAllocator::release_expandable_segment(Block* block) {
  block->pool->unmapped.erase(block);
  auto it = std::find_if(expandable_segments_.begin(), expandable_segments_.end(),
                         [&](const auto& segment) { return segment.get() == block->segment; });
  raw_->release_addresses((*it)->base, (*it)->size());
  expandable_segments_.erase(it);
  recycle_block(block);
}

// Carves the request from the front of the block found, caching the tail when should_split says so.
CachingAllocator::Block* CachingAllocator::take_found_block(Request& request) {
  Block* block = request.block;
  BlockPool& pool = *request.pool;
  const PoolKind kind = pool.kind;
  const bool already_split = block->is_split();
  const bool no_split = pool.owner && no_split_pools_.count(pool.owner->id) > 0;
  if (!no_split && should_split(kind, block->size, request.size, config_)) {
    Block* remaining = block;  // keeps its stale requested_size, as PyTorch's does
    block = new_block();
    block->ptr = remaining->ptr;
    block->tie_shift = remaining->tie_shift;
    block->segment_tie_address = remaining->segment_tie_address;
    block->size = request.size;
    block->stream = request.stream;
    block->pool = &pool;
    block->segment = remaining->segment;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    remaining->prev = block;
    remaining->ptr += request.size;
    remaining->size -= request.size;
    insert_free(pool, remaining);
    // Expandable segments' free pages can always be unmapped, so they never count as inactive_split.
    if (!block->segment) {
      if (already_split) {
        stats_.inactive_split_bytes.decrease(kind, static_cast<int64_t>(block->size));
      } else {
        stats_.inactive_split_bytes.increase(kind, static_cast<int64_t>(remaining->size));
        stats_.inactive_split.increase(kind, 1);
      }
    }
  } else if (already_split && !block->segment) {
    stats_.inactive_split_bytes.decrease(kind, static_cast<int64_t>(block->size));
    stats_.inactive_split.decrease(kind, 1);
  }
  block->allocated = true;
  block->requested_size = request.requested;
  active_blocks_.emplace(block->ptr, block);
  const auto size = static_cast<int64_t>(block->size);
  stats_.allocation.increase(kind, 1);
  stats_.allocated_bytes.increase(kind, size);
  stats_.active.increase(kind, 1);
  stats_.active_bytes.increase(kind, size);
  stats_.requested_bytes.increase(kind, static_cast<int64_t>(request.requested));
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.increase(1);
  return block;
}

// ------------------------------------------------------------------------------------------------ free

// The live block at `ptr`; anything else throws, naming `caller`.
std::unordered_map<uintptr_t, CachingAllocator::Block*>::iterator CachingAllocator::live_block(const void* ptr,
                                                                                               const char* caller) {
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == active_blocks_.end())
    throw std::invalid_argument(std::string(caller) + ": pointer " + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                                " was not allocated by this allocator (or was already freed)");
  return it;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  const auto it = live_block(ptr, "CachingAllocator::free");
  Block* block = it->second;
  active_blocks_.erase(it);
  const MemoryCategory category = categories_.on_free(block->category);
  raw_->mark_in_use(ptr, block->size, false);
  block->allocated = false;
  const PoolKind kind = block->pool->kind;
  stats_.allocation.decrease(kind, 1);
  stats_.allocated_bytes.decrease(kind, static_cast<int64_t>(block->size));
  history_.record(TraceAction::free_requested, block->ptr, block->requested_size, block->stream, categories_.totals(),
                  {block->size, category, MemoryCategory::other, !block->stream_uses.empty()});
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.decrease(1);
  block->freed_category = category;
  if (block->stream_uses.empty()) free_block(block);
  else if (allocating_to_pools()) frees_deferred_.push_back(block);  // events recorded later
  else insert_events(block);
}

void CachingAllocator::record_stream(const void* ptr, StreamId stream) {
  std::lock_guard lock(mutex_);
  Block* block = live_block(ptr, "record_stream")->second;
  if (stream == block->stream) return;
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

// The free waits: one event on every stream that used the block, recorded now (PyTorch's insert_events).
void CachingAllocator::insert_events(Block* block) {
  std::vector<StreamId> streams = std::move(block->stream_uses);
  block->stream_uses.clear();
  for (StreamId stream : streams) {
    const EventHandle event = timeline_->create_event(false);
    timeline_->record(event, stream);
    ++block->event_count;
    pending_frees_[stream].emplace_back(event, block);
  }
}

// At every malloc: the pending frees whose events have completed become real, per stream in free order,
// stopping at a stream's first event still pending.
void CachingAllocator::process_events() {
  insert_deferred_events();
  for (auto it = pending_frees_.begin(); it != pending_frees_.end();) {
    auto& frees = it->second;
    while (!frees.empty()) {
      auto [event, block] = frees.front();
      if (!timeline_->query(event)) break;
      timeline_->destroy_event(event);
      frees.pop_front();
      if (--block->event_count == 0) free_block(block);
    }
    it = frees.empty() ? pending_frees_.erase(it) : std::next(it);
  }
}

// Waits for every pending free's events and completes the frees (empty_cache, an out-of-memory retry);
// with `only`, just those of that private pool's blocks.
void CachingAllocator::synchronize_and_free_events(const PrivatePool* only) {
  ++stats_.num_sync_all_streams;
  if (!allocating_to_pools()) insert_deferred_events();
  for (auto it = pending_frees_.begin(); it != pending_frees_.end();) {
    auto& frees = it->second;
    for (auto e = frees.begin(); e != frees.end();) {
      auto [event, block] = *e;
      if (only && block->pool->owner != only) {
        ++e;
        continue;
      }
      timeline_->synchronize(event);
      timeline_->destroy_event(event);
      e = frees.erase(e);
      if (--block->event_count == 0) free_block(block);
    }
    it = frees.empty() ? pending_frees_.erase(it) : std::next(it);
  }
}

// The frees deferred while threads allocated to private pools get their events now, recorded on each
// using stream at this point (PyTorch's insert_events_deferred_until_no_capture).
void CachingAllocator::insert_deferred_events() {
  if (frees_deferred_.empty()) return;
  std::vector<Block*> deferred = std::move(frees_deferred_);
  frees_deferred_.clear();
  for (Block* block : deferred) insert_events(block);
}

// The block becomes free: merge with free neighbours, cache it, and settle the split statistics by their
// net change.
void CachingAllocator::free_block(Block* block) {
  history_.record(TraceAction::free_completed, block->ptr, block->requested_size, block->stream, categories_.totals(),
                  {block->size, block->freed_category});
  const size_t original_size = block->size;
  const size_t requested = block->requested_size;
  BlockPool& pool = *block->pool;
  int64_t net_split_blocks = 0;
  int64_t net_split_bytes = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    if (size_t absorbed = merge_into(block, neighbour, pool)) {
      net_split_blocks -= 1;
      net_split_bytes -= static_cast<int64_t>(absorbed);
    }
  }
  insert_free(pool, block);
  if (block->is_split()) {
    net_split_blocks += 1;
    net_split_bytes += static_cast<int64_t>(block->size);
  }
  const PoolKind kind = pool.kind;
  if (block->segment) net_split_blocks = net_split_bytes = 0;  // not counted for expandable segments
  if (net_split_blocks > 0) stats_.inactive_split.increase(kind, net_split_blocks);
  else if (net_split_blocks < 0) stats_.inactive_split.decrease(kind, -net_split_blocks);
  if (net_split_bytes > 0) stats_.inactive_split_bytes.increase(kind, net_split_bytes);
  else if (net_split_bytes < 0) stats_.inactive_split_bytes.decrease(kind, -net_split_bytes);
  stats_.active.decrease(kind, 1);
  stats_.active_bytes.decrease(kind, static_cast<int64_t>(original_size));
  stats_.requested_bytes.decrease(kind, static_cast<int64_t>(requested));
}

// Absorbs a free neighbour into dst (taking its address when it lies before); returns the bytes absorbed.
// Mapped and unmapped runs of an expandable segment never merge with each other.
size_t CachingAllocator::merge_into(Block* dst, Block* src, BlockPool& pool) {
  if (!src || !src->is_free() || src->mapped != dst->mapped) return 0;
  if (src->mapped) pool.free_blocks.erase(src);
  else pool.unmapped.erase(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const size_t absorbed = src->size;
  dst->size += absorbed;
  recycle_block(src);
  return absorbed;
}

// ------------------------------------------------------------------------------------------- releasing

namespace {
std::atomic<BeforeMemoryReturned> before_memory_returned{nullptr};
}  // namespace

void set_before_memory_returned(BeforeMemoryReturned hook) { before_memory_returned.store(hook); }

void CachingAllocator::notify_before_memory_returned() const {
  const BeforeMemoryReturned hook = before_memory_returned.load();
  if (hook != nullptr && device_) hook(*device_);
}

void CachingAllocator::release_segment(Block* block) {
  notify_before_memory_returned();
  BlockPool& pool = *block->pool;
  pool.free_blocks.erase(block);
  raw_->release(reinterpret_cast<void*>(block->ptr), block->size);
  total_reserved_ -= block->size;
  if (pool.owner) --pool.owner->segment_count;
  stats_.segment.decrease(pool.kind, 1);
  stats_.reserved_bytes.decrease(pool.kind, static_cast<int64_t>(block->size));
  if (block->size >= config_.max_split_size) stats_.oversize_segments.decrease(1);
  ++stats_.num_device_free;
  history_.record(TraceAction::segment_free, block->ptr, block->size, block->stream, categories_.totals());
  recycle_block(block);
}

// Whole free segments are released in free-set order; free blocks of expandable segments are gathered in
// that order and their whole pages unmapped afterwards (unmapping changes the set).
void CachingAllocator::release_free_segments(BlockPool& pool) {
  std::vector<Block*> to_unmap;
  for (auto it = pool.free_blocks.begin(); it != pool.free_blocks.end();) {
    Block* block = *it++;
    if (block->segment) to_unmap.push_back(block);
    else if (!block->is_split()) release_segment(block);
  }
  for (Block* block : to_unmap) {
    unmap_block(block);
    if (!block->is_split()) release_expandable_segment(block);
  }
}

// What empty_cache does. For the default pool (unless a thread allocates to a private pool): wait for the
// pending frees, then release the large pool's free segments, then the small pool's, each in free-set
// order. Then every freeable private pool, small before large (with a pool's id: only that pool, waiting
// for its own pending frees first); a freeable pool left with no segment is forgotten.
void CachingAllocator::release_cached_blocks(MempoolId pool_id) {
  if (pool_id == kDefaultMempool && !allocating_to_pools()) {
    synchronize_and_free_events();
    release_free_segments(large_pool_);
    release_free_segments(small_pool_);
  }
  for (auto it = freeable_pools_.begin(); it != freeable_pools_.end();) {
    const MempoolId id = *it++;
    if (pool_id != kDefaultMempool && id != pool_id) continue;
    PrivatePool& pool = *private_pools_.at(id);
    if (pool_id != kDefaultMempool) synchronize_and_free_events(&pool);
    release_free_segments(pool.small);
    release_free_segments(pool.large);
    erase_pool_if_done(id);
  }
}

void CachingAllocator::erase_pool_if_done(MempoolId id) {
  auto it = private_pools_.find(id);
  if (it == private_pools_.end() || it->second->use_count > 0 || it->second->segment_count > 0) return;
  use_on_oom_pools_.erase(id);
  no_split_pools_.erase(id);
  freeable_pools_.erase(id);
  private_pools_.erase(it);
}

// ------------------------------------------------------------------------------------------ private pools

CachingAllocator::BlockPool& CachingAllocator::pool_for_request(size_t size) {
  const PoolKind kind = pool_for(size);
  if (allocating_to_pools()) {
    const std::thread::id me = std::this_thread::get_id();
    for (auto it = allocating_to_pool_.rbegin(); it != allocating_to_pool_.rend(); ++it) {
      if (it->second != me) continue;
      PrivatePool& pool = *private_pools_.at(it->first);
      return kind == PoolKind::small ? pool.small : pool.large;
    }
  }
  return kind == PoolKind::small ? small_pool_ : large_pool_;
}

CachingAllocator::PrivatePool& CachingAllocator::private_pool(MempoolId id, const char* caller) const {
  auto it = private_pools_.find(id);
  if (it == private_pools_.end())
    throw std::invalid_argument(std::string(caller) + ": no memory pool (" + std::to_string(id.first) + ", " +
                                std::to_string(id.second) + ") on device " + std::to_string(device_index_));
  return *it->second;
}

// PyTorch's try_mempool_fallback: a request of the default pools that found no room takes a free block of a
// use_on_oom pool (best fit there), which then belongs to that pool.
bool CachingAllocator::try_use_on_oom_pools(Request& request) {
  if (request.pool->owner) return false;
  for (const MempoolId& id : use_on_oom_pools_) {
    PrivatePool& pool = *private_pools_.at(id);
    Request fallback = request;
    fallback.pool = request.pool->kind == PoolKind::small ? &pool.small : &pool.large;
    if (find_free_block(fallback)) {
      request = fallback;
      return true;
    }
  }
  return false;
}

void CachingAllocator::create_or_incref_pool(MempoolId id) {
  if (id == kDefaultMempool) throw std::invalid_argument("create_or_incref_pool: (0, 0) is the default pool");
  std::lock_guard lock(mutex_);
  auto it = private_pools_.find(id);
  if (it == private_pools_.end()) {
    auto pool = std::make_unique<PrivatePool>();
    pool->id = id;
    pool->small.owner = pool->large.owner = pool.get();
    private_pools_.emplace(id, std::move(pool));
    return;
  }
  if (it->second->use_count == 0)
    throw std::logic_error("create_or_incref_pool: memory pool (" + std::to_string(id.first) + ", " +
                           std::to_string(id.second) + ") was released and cannot be used again");
  ++it->second->use_count;
}

void CachingAllocator::release_pool(MempoolId id) {
  std::lock_guard lock(mutex_);
  PrivatePool& pool = private_pool(id, "release_pool");
  if (pool.use_count == 0) throw std::logic_error("release_pool: the memory pool has no users left to release");
  if (--pool.use_count == 0) freeable_pools_.insert(id);
}

int CachingAllocator::pool_use_count(MempoolId id) const {
  std::lock_guard lock(mutex_);
  return private_pool(id, "pool_use_count").use_count;
}

void CachingAllocator::set_use_on_oom(MempoolId id, bool use_on_oom) {
  std::lock_guard lock(mutex_);
  if (use_on_oom) use_on_oom_pools_.insert(id);
  else use_on_oom_pools_.erase(id);
}

void CachingAllocator::set_no_split(MempoolId id) {
  std::lock_guard lock(mutex_);
  no_split_pools_.insert(id);
}

void CachingAllocator::begin_allocate_to_pool(MempoolId id) {
  create_or_incref_pool(id);
  std::lock_guard lock(mutex_);
  for (const auto& [pool, thread] : allocating_to_pool_)
    if (pool == id) {
      --private_pools_.at(id)->use_count;  // undo this begin's reference
      throw std::logic_error("begin_allocate_to_pool: already allocating to memory pool (" + std::to_string(id.first) +
                             ", " + std::to_string(id.second) + ")");
    }
  allocating_to_pool_.emplace_back(id, std::this_thread::get_id());
}

void CachingAllocator::end_allocate_to_pool(MempoolId id) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(allocating_to_pool_.begin(), allocating_to_pool_.end(),
                         [&](const auto& entry) { return entry.first == id; });
  if (it == allocating_to_pool_.end())
    throw std::logic_error("end_allocate_to_pool: not allocating to memory pool (" + std::to_string(id.first) + ", " +
                           std::to_string(id.second) + ")");
  allocating_to_pool_.erase(it);
}

// Only with max_split_size set: free one cached oversize segment big enough for the request, or else the
// largest ones until enough bytes are freed.
bool CachingAllocator::release_available_cached_blocks(const Request& request) {
  const size_t max_split = config_.max_split_size;
  if (max_split == std::numeric_limits<size_t>::max()) return false;
  auto& blocks = request.pool->free_blocks;
  Block key;
  key.stream = request.stream;
  key.size = std::max(request.size, max_split);
  auto it = blocks.lower_bound(&key);
  if (it != blocks.end() && (*it)->stream == request.stream) {
    if ((*it)->is_split()) return false;
    release_segment(*it);
    return true;
  }
  if (it == blocks.begin()) return false;
  size_t released = 0;
  --it;  // the largest block of this stream, if any
  while (released < key.size && (*it)->size >= max_split && (*it)->stream == request.stream) {
    auto current = it;
    const bool is_first = current == blocks.begin();
    if (!is_first) --it;
    Block* block = *current;
    if (!block->is_split()) {
      released += block->size;
      release_segment(block);
    }
    if (is_first) break;
  }
  return released >= key.size;
}

// garbage_collection_threshold: once reserved memory exceeds threshold * cap, release whole cached large
// segments that have gone unused for at least the average age, until enough is reclaimed.
void CachingAllocator::collect_garbage() {
  const auto threshold =
      static_cast<size_t>(config_.garbage_collection_threshold * static_cast<double>(allowed_maximum_));
  if (total_reserved_ <= threshold) return;
  const size_t target = total_reserved_ - threshold;
  auto age = [this](const Block* block) { return large_pool_.search_count - block->gc_count_base; };
  uint64_t total_age = 0;
  size_t candidates = 0;
  for (const Block* block : large_pool_.free_blocks) {
    if (!block->is_split()) {
      total_age += age(block);
      ++candidates;
    }
  }
  size_t reclaimed = 0;
  bool freed_any = true;
  while (reclaimed < target && freed_any && candidates > 0) {
    const double age_threshold = static_cast<double>(total_age) / static_cast<double>(candidates);
    freed_any = false;
    for (auto it = large_pool_.free_blocks.begin(); it != large_pool_.free_blocks.end();) {
      Block* block = *it++;
      if (!block->is_split() && static_cast<double>(age(block)) >= age_threshold) {
        freed_any = true;
        reclaimed += block->size;
        total_age -= age(block);
        --candidates;
        release_segment(block);
      }
    }
  }
}

void CachingAllocator::empty_cache(MempoolId pool) {
  std::lock_guard lock(mutex_);
  release_cached_blocks(pool);
}

void CachingAllocator::throw_out_of_memory(const Request& request, std::unique_lock<std::mutex>& lock) {
  RawMemory::Info info = raw_->info();
  history_.record(TraceAction::oom, 0, request.size, request.stream, categories_.totals(), {}, info.free);
  ++stats_.num_ooms;
  OutOfMemoryReport report;
  report.device_index = device_index_;
  report.requested_bytes = request.requested;
  report.block_bytes = request.size;
  report.pool = request.pool->kind;
  report.segment_bytes = request.segment_size;
  report.device_total = info.total;
  report.device_free = info.free;
  report.process_in_use = raw_->process_memory_in_use();
  if (fraction_set_) report.allowed_bytes = allowed_maximum_;
  report.allocated_bytes = static_cast<size_t>(stats_.allocated_bytes.all().current);
  report.reserved_bytes = static_cast<size_t>(stats_.reserved_bytes.all().current);
  report.categories = categories_.totals();
  report.phase = current_phase();
  report.cached_free_bytes = report.reserved_bytes - report.allocated_bytes;
  for (const auto& [id, pool] : private_pools_)
    for (const BlockPool* blocks : {&pool->large, &pool->small})
      for (const Block* block : blocks->free_blocks) report.private_free_bytes += block->size;
  for (const Block* block : request.pool->free_blocks) {
    ++report.cached_free_pieces;
    report.largest_free_piece = std::max(report.largest_free_piece, block->size);
  }
  report.largest_live = categories_.largest(10);
  // Observers run outside the lock, as PyTorch's do, so that they may read this allocator's figures.
  const OutOfMemoryNotice notice{device_index_, request.segment_size,
                                 fraction_set_ ? allowed_maximum_ : static_cast<size_t>(info.total), info.free};
  const std::vector<OutOfMemoryObserver> observers = oom_observers_;
  lock.unlock();
  // Asked outside the lock: a source (a process group) may hold its own lock while calling the allocator.
  if (device_)
    if (const auto figures = outside_allocator_figures(*device_))
      report.outside_allocator =
          outside_allocator_line(*figures, static_cast<int64_t>(info.total) - static_cast<int64_t>(info.free) -
                                               static_cast<int64_t>(report.reserved_bytes));
  for (const OutOfMemoryObserver& observer : observers) observer(notice);
  throw OutOfMemoryError(std::move(report));
}

void CachingAllocator::attach_out_of_memory_observer(OutOfMemoryObserver observer) {
  if (!observer) throw std::invalid_argument("attach_out_of_memory_observer: the observer is empty");
  std::lock_guard lock(mutex_);
  oom_observers_.push_back(std::move(observer));
}

void CachingAllocator::apply_settings(AllocatorConfig config) {
  std::lock_guard lock(mutex_);
  config_ = std::move(config);
  stats_.max_split_size =
      config_.max_split_size == std::numeric_limits<size_t>::max() ? -1 : static_cast<int64_t>(config_.max_split_size);
}

// ------------------------------------------------------------------------------------- limits and stats

namespace {
// Returns f() computed with `mutex` held: the accessors below that read or reset one thing. The result is
// returned by value, so it is copied before the lock is released.
template <typename F>
auto under_lock(std::mutex& mutex, F&& f) {
  std::lock_guard lock(mutex);
  return f();
}
}  // namespace

void CachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw std::invalid_argument("set_memory_fraction: fraction must be between 0 and 1, got " +
                                std::to_string(fraction));
  std::lock_guard lock(mutex_);
  device_total_ = raw_->info().total;
  allowed_maximum_ = static_cast<size_t>(fraction * static_cast<double>(device_total_));
  fraction_set_ = true;  // stays set, even at 1.0
}

void CachingAllocator::set_tie_order(TieOrder order) {
  std::lock_guard lock(mutex_);
  tie_order_ = order;
}

CachingAllocator::TieOrder CachingAllocator::tie_order() const {
  std::lock_guard lock(mutex_);
  return tie_order_;
}

void CachingAllocator::set_early_regions(EarlyRegions placement) {
  std::lock_guard lock(mutex_);
  early_regions_ = placement;
  raw_->set_early_regions(placement);
}

void CachingAllocator::set_host_map_holes(bool holes) {
  std::lock_guard lock(mutex_);
  raw_->set_host_map_holes(holes);
}

CachingAllocator::EarlyRegions CachingAllocator::early_regions() const {
  std::lock_guard lock(mutex_);
  return early_regions_;
}

bool CachingAllocator::early_regions_decided() const {
  std::lock_guard lock(mutex_);
  return raw_->early_regions_decided();
}

int64_t CachingAllocator::placement_ties() const {
  std::lock_guard lock(mutex_);
  return placement_ties_;
}

double CachingAllocator::memory_fraction() const {
  std::lock_guard lock(mutex_);
  if (!fraction_set_ || device_total_ == 0) return 1.0;
  return static_cast<double>(allowed_maximum_) / static_cast<double>(device_total_);
}

DeviceStats CachingAllocator::stats() const {
  return under_lock(mutex_, [&] { return stats_; });
}

Stat CachingAllocator::all_pools(StatArray DeviceStats::*stat) const {
  return under_lock(mutex_, [&] { return (stats_.*stat).all(); });
}

int64_t CachingAllocator::memory_allocated() const { return all_pools(&DeviceStats::allocated_bytes).current; }
int64_t CachingAllocator::max_memory_allocated() const { return all_pools(&DeviceStats::allocated_bytes).peak; }
int64_t CachingAllocator::memory_reserved() const { return all_pools(&DeviceStats::reserved_bytes).current; }
int64_t CachingAllocator::max_memory_reserved() const { return all_pools(&DeviceStats::reserved_bytes).peak; }

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
  categories_.reset_peak(stats_.allocated_bytes.by_type[kAggregate].current);
}

// A `category` history entry; `totals` are the category bytes just after the change.
void CachingAllocator::record_category_change(const CategoryChange& change, const CategoryBytes& totals) {
  if (change.bytes == 0 || !history_.enabled()) return;
  auto it = active_blocks_.find(change.address);
  const Block* block = it == active_blocks_.end() ? nullptr : it->second;
  history_.record(TraceAction::category, change.address, block ? block->requested_size : 0, block ? block->stream : 0,
                  totals, {static_cast<size_t>(change.bytes), change.to, change.from});
}

BlockCategoryEntry* CachingAllocator::category_entry(const void* ptr) {
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  return it == active_blocks_.end() ? nullptr : &it->second->category;
}

void CachingAllocator::add_block_role(const void* ptr, MemoryCategory role, std::string_view owner) {
  std::lock_guard lock(mutex_);
  record_category_change(categories_.add_role(category_entry(ptr), role, owner), categories_.totals());
}

void CachingAllocator::remove_block_role(const void* ptr, MemoryCategory role) {
  std::lock_guard lock(mutex_);
  record_category_change(categories_.remove_role(category_entry(ptr), role), categories_.totals());
}

void CachingAllocator::rebirth_blocks(MemoryCategory from, MemoryCategory to) {
  std::lock_guard lock(mutex_);
  if (!history_.enabled()) {
    categories_.rebirth(from, to);
    return;
  }
  std::vector<CategoryChange> changes;
  categories_.rebirth(from, to, &changes);
  // One entry per block, each with the totals just after its own change: undo them all, then redo one by one.
  CategoryBytes running = categories_.totals();
  for (const CategoryChange& c : changes) {
    running[static_cast<size_t>(c.to)] -= c.bytes;
    running[static_cast<size_t>(c.from)] += c.bytes;
  }
  for (const CategoryChange& c : changes) {
    running[static_cast<size_t>(c.from)] -= c.bytes;
    running[static_cast<size_t>(c.to)] += c.bytes;
    record_category_change(c, running);
  }
}

CategoryBytes CachingAllocator::category_bytes() const {
  return under_lock(mutex_, [&] { return categories_.totals(); });
}

std::string CachingAllocator::block_owner(const void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  return it == active_blocks_.end() ? std::string() : BlockCategories::module_owner(it->second->category);
}

std::vector<LedgerBlock> CachingAllocator::largest_blocks(size_t count) const {
  return under_lock(mutex_, [&] { return categories_.largest(count); });
}

PeakRecord CachingAllocator::peak_record() const {
  return under_lock(mutex_, [&] { return categories_.peak(); });
}

void CachingAllocator::reset_accumulated_stats() {
  under_lock(mutex_, [&] { stats_.reset_accumulated(); });
}

RawMemory::Info CachingAllocator::mem_get_info() {
  return under_lock(mutex_, [&] { return raw_->info(); });
}

void CachingAllocator::note_driver_allocations(uint32_t what) {
  // Every flag but kBlasHandle is a one-time allocation: once noted, later launches have nothing to add.
  const uint32_t one_time = what & ~uint32_t{kBlasHandle};
  if (what == one_time && (driver_allocations_noted_.load(std::memory_order_relaxed) & what) == what) return;
  std::lock_guard lock(mutex_);
  raw_->note_driver_allocations(what);
  driver_allocations_noted_.fetch_or(one_time, std::memory_order_relaxed);
}

size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  return it == active_blocks_.end() ? 0 : it->second->size;
}

void CachingAllocator::record_history(bool enabled, size_t max_entries) {
  under_lock(mutex_, [&] { history_.set_enabled(enabled, max_entries); });
}

bool CachingAllocator::history_enabled() const {
  return under_lock(mutex_, [&] { return history_.user_enabled(); });
}

uint64_t CachingAllocator::attach_history_observer() {
  std::lock_guard lock(mutex_);
  history_.attach_observer();
  return history_.first_sequence() + history_.size();
}

void CachingAllocator::detach_history_observer() {
  under_lock(mutex_, [&] { history_.detach_observer(); });
}

// -------------------------------------------------------------------------------------------- snapshot

MemorySnapshot CachingAllocator::snapshot(MempoolId pool_id) {
  std::lock_guard lock(mutex_);
  std::vector<const Block*> heads;
  // A segment starts at a block with no mapped block before it: each mapped range of an expandable
  // segment is reported as a segment of its own. With a private pool's id, only that pool's segments.
  const PrivatePool* only = nullptr;
  if (pool_id != kDefaultMempool) {
    auto it = private_pools_.find(pool_id);
    if (it != private_pools_.end()) only = it->second.get();
  }
  auto wanted = [&](const Block* block) {
    return (!block->prev || !block->prev->mapped) &&
           (pool_id == kDefaultMempool || (only && block->pool->owner == only));
  };
  std::vector<const BlockPool*> pools{&small_pool_, &large_pool_};
  for (const auto& [id, pool] : private_pools_) pools.insert(pools.end(), {&pool->small, &pool->large});
  for (const BlockPool* pool : pools)
    for (const Block* block : pool->free_blocks)
      if (wanted(block)) heads.push_back(block);
  for (const auto& [ptr, block] : active_blocks_)
    if (wanted(block)) heads.push_back(block);
  for (const auto& [stream, frees] : pending_frees_)
    for (const auto& [event, block] : frees)
      if (wanted(block)) heads.push_back(block);
  for (const Block* block : frees_deferred_)
    if (wanted(block)) heads.push_back(block);
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());  // a pending block waits on several streams

  MemorySnapshot snap;
  snap.device_index = device_index_;
  snap.settings = config_;
  size_t total_active = 0;
  for (const Block* head : heads) {
    SegmentInfo segment;
    segment.address = head->ptr;
    segment.stream = head->stream;
    segment.pool = head->pool->kind;
    segment.is_expandable = head->segment != nullptr;
    if (head->pool->owner) segment.pool_id = head->pool->owner->id;
    for (const Block* block = head; block && block->mapped; block = block->next) {
      const BlockState state = block->allocated           ? BlockState::active_allocated
                               : block->is_pending_free() ? BlockState::active_pending_free
                                                          : BlockState::inactive;
      BlockInfo info{block->ptr, block->size, block->requested_size, state,
                     block->allocated ? block->category.current : MemoryCategory::other};
      segment.total_size += block->size;
      if (block->allocated) segment.allocated_size += block->size;
      if (state != BlockState::inactive) {
        segment.active_size += block->size;
        segment.requested_size += block->requested_size;
      }
      segment.blocks.push_back(info);
    }
    total_active += segment.active_size;
    snap.segments.push_back(std::move(segment));
  }
  // PyTorch reads the trace before recording the snapshot's own entry: the returned trace ends with the
  // last alloc/free, and this entry first shows in the next snapshot.
  snap.trace = history_.entries();
  snap.trace_start = history_.first_sequence();
  history_.record(TraceAction::snapshot, 0, total_active, 0, categories_.totals());
  return snap;
}

}  // namespace bytegrad
