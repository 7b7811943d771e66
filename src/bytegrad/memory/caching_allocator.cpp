#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/allocation_context.h"

#include <algorithm>
#include <stdexcept>

#include "bytegrad/memory/memory_summary.h"
#include "bytegrad/memory/out_of_memory.h"

namespace bytegrad {

// A block is a run of a segment: segments are cudaMalloc'ed whole and tiled, in address order, by a
// doubly linked list of blocks. A block is "split" when its segment holds more than one block.
struct CachingAllocator::Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  size_t requested_size = 0;  // last request served from this block; not cleared on free
  StreamId stream = 0;
  BlockPool* pool = nullptr;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
  uint64_t gc_count_base = 0;  // the pool's search count when this block was last cached

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Best fit: within a stream, the smallest adequate size, ties to the lowest address.
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

std::string_view block_state_name(BlockState state) {
  switch (state) {
    case BlockState::active_allocated: return "active_allocated";
    case BlockState::active_pending_free: return "active_pending_free";
    case BlockState::inactive: return "inactive";
  }
  return "unknown";
}

CachingAllocator::CachingAllocator(std::unique_ptr<RawMemory> raw, AllocatorConfig config, int device_index)
    : raw_(std::move(raw)), config_(std::move(config)), device_index_(device_index) {
  stats_.max_split_size = config_.max_split_size == std::numeric_limits<size_t>::max()
                              ? -1
                              : static_cast<int64_t>(config_.max_split_size);
}

CachingAllocator::~CachingAllocator() {
  std::vector<Block*> all;
  for (BlockPool* pool : {&small_pool_, &large_pool_}) all.insert(all.end(), pool->free_blocks.begin(), pool->free_blocks.end());
  for (auto& [ptr, block] : active_blocks_) all.push_back(block);
  for (Block* block : all) {
    if (block->prev != nullptr) continue;
    size_t segment_bytes = 0;
    for (Block* b = block; b; b = b->next) segment_bytes += b->size;
    raw_->release(reinterpret_cast<void*>(block->ptr), segment_bytes);
  }
  for (Block* block : all) delete block;
  for (Block* block : spare_blocks_) delete block;
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block();
  Block* block = spare_blocks_.back();
  spare_blocks_.pop_back();
  *block = Block();
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

  std::lock_guard lock(mutex_);
  Request request{bytes, 0, 0, stream, nullptr};
  request.size = round_size(bytes, config_);
  request.pool = &pool_of(pool_for(request.size));
  request.segment_size = segment_size_for(request.size, config_);

  bool found = find_free_block(request);
  if (!found) {
    if (fraction_set_ && config_.garbage_collection_threshold > 0.0) collect_garbage();
    // A new segment; else free oversize cached blocks and retry; else flush the whole cache and retry.
    found = allocate_segment(request, false) ||
            (release_available_cached_blocks(request) && allocate_segment(request, false));
    if (!found) {
      release_cached_blocks();
      found = allocate_segment(request, true);
    }
  }
  if (!found) throw_out_of_memory(request);
  Block* block = take_found_block(request);
  void* ptr = reinterpret_cast<void*>(block->ptr);
  raw_->mark_in_use(ptr, bytes, true);  // the requested bytes only: a write past them is a bug
  categories_.on_alloc(block->ptr, block->size, current_allocation_tag());
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
  if (fraction_set_ && total_reserved_ + bytes > allowed_maximum_) return false;
  void* ptr = raw_->allocate(bytes);
  if (!ptr) return false;
  total_reserved_ += bytes;
  Block* block = new_block();
  block->ptr = reinterpret_cast<uintptr_t>(ptr);
  block->size = bytes;
  block->stream = request.stream;
  block->pool = request.pool;
  const PoolKind kind = request.pool->kind;
  stats_.segment.increase(kind, 1);
  stats_.reserved_bytes.increase(kind, static_cast<int64_t>(bytes));
  if (bytes >= config_.max_split_size) stats_.oversize_segments.increase(1);
  ++stats_.num_device_alloc;
  history_.record(TraceAction::segment_alloc, block->ptr, bytes, request.stream);
  request.block = block;
  return true;
}

// Carves the request from the front of the block found, caching the tail when should_split says so.
CachingAllocator::Block* CachingAllocator::take_found_block(Request& request) {
  Block* block = request.block;
  BlockPool& pool = *request.pool;
  const PoolKind kind = pool.kind;
  const bool already_split = block->is_split();
  if (should_split(kind, block->size, request.size, config_)) {
    Block* remaining = block;  // keeps its stale requested_size, as PyTorch's does
    block = new_block();
    block->ptr = remaining->ptr;
    block->size = request.size;
    block->stream = request.stream;
    block->pool = &pool;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    remaining->prev = block;
    remaining->ptr += request.size;
    remaining->size -= request.size;
    insert_free(pool, remaining);
    if (already_split) {
      stats_.inactive_split_bytes.decrease(kind, static_cast<int64_t>(block->size));
    } else {
      stats_.inactive_split_bytes.increase(kind, static_cast<int64_t>(remaining->size));
      stats_.inactive_split.increase(kind, 1);
    }
  } else if (already_split) {
    stats_.inactive_split_bytes.decrease(kind, static_cast<int64_t>(block->size));
    stats_.inactive_split.decrease(kind, 1);
  }
  block->allocated = true;
  block->requested_size = request.requested;
  history_.record(TraceAction::alloc, block->ptr, request.requested, block->stream);
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

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == active_blocks_.end())
    throw std::invalid_argument("CachingAllocator::free: pointer " + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                                " was not allocated by this allocator (or was already freed)");
  Block* block = it->second;
  active_blocks_.erase(it);
  categories_.on_free(block->ptr);
  raw_->mark_in_use(ptr, block->size, false);
  block->allocated = false;
  const PoolKind kind = block->pool->kind;
  stats_.allocation.decrease(kind, 1);
  stats_.allocated_bytes.decrease(kind, static_cast<int64_t>(block->size));
  history_.record(TraceAction::free_requested, block->ptr, block->requested_size, block->stream);
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.decrease(1);
  // One stream per block today, so no cross-stream events defer the real free.
  free_block(block);
}

// The block becomes free: merge with free neighbours, cache it, and settle the split statistics by their
// net change.
void CachingAllocator::free_block(Block* block) {
  history_.record(TraceAction::free_completed, block->ptr, block->requested_size, block->stream);
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
  if (net_split_blocks > 0) stats_.inactive_split.increase(kind, net_split_blocks);
  else if (net_split_blocks < 0) stats_.inactive_split.decrease(kind, -net_split_blocks);
  if (net_split_bytes > 0) stats_.inactive_split_bytes.increase(kind, net_split_bytes);
  else if (net_split_bytes < 0) stats_.inactive_split_bytes.decrease(kind, -net_split_bytes);
  stats_.active.decrease(kind, 1);
  stats_.active_bytes.decrease(kind, static_cast<int64_t>(original_size));
  stats_.requested_bytes.decrease(kind, static_cast<int64_t>(requested));
}

// Absorbs a free neighbour into dst (taking its address when it lies before); returns the bytes absorbed.
size_t CachingAllocator::merge_into(Block* dst, Block* src, BlockPool& pool) {
  if (!src || src->allocated) return 0;
  pool.free_blocks.erase(src);
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

void CachingAllocator::release_segment(Block* block) {
  BlockPool& pool = *block->pool;
  pool.free_blocks.erase(block);
  raw_->release(reinterpret_cast<void*>(block->ptr), block->size);
  total_reserved_ -= block->size;
  stats_.segment.decrease(pool.kind, 1);
  stats_.reserved_bytes.decrease(pool.kind, static_cast<int64_t>(block->size));
  if (block->size >= config_.max_split_size) stats_.oversize_segments.decrease(1);
  ++stats_.num_device_free;
  history_.record(TraceAction::segment_free, block->ptr, block->size, block->stream);
  recycle_block(block);
}

void CachingAllocator::release_free_segments(BlockPool& pool) {
  for (auto it = pool.free_blocks.begin(); it != pool.free_blocks.end();) {
    Block* block = *it++;
    if (!block->is_split()) release_segment(block);
  }
}

// What empty_cache does: large pool first, then small, each in free-set order.
void CachingAllocator::release_cached_blocks() {
  ++stats_.num_sync_all_streams;  // no cross-stream events to wait for, but the sync is still counted
  release_free_segments(large_pool_);
  release_free_segments(small_pool_);
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

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_blocks();
}

void CachingAllocator::throw_out_of_memory(const Request& request) {
  RawMemory::Info info = raw_->info();
  history_.record(TraceAction::oom, 0, request.size, request.stream, info.free);
  ++stats_.num_ooms;
  OutOfMemoryReport report;
  report.segment_bytes = request.segment_size;
  report.device_index = device_index_;
  report.device_total = info.total;
  report.device_free = info.free;
  report.process_in_use = raw_->process_memory_in_use();
  if (fraction_set_) report.allowed_bytes = allowed_maximum_;
  report.allocated_bytes = static_cast<size_t>(stats_.allocated_bytes.all().current);
  report.reserved_bytes = static_cast<size_t>(stats_.reserved_bytes.all().current);
  throw OutOfMemoryError(out_of_memory_message(report), request.requested, request.segment_size);
}

// ------------------------------------------------------------------------------------- limits and stats

void CachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw std::invalid_argument("set_memory_fraction: fraction must be between 0 and 1, got " +
                                std::to_string(fraction));
  std::lock_guard lock(mutex_);
  device_total_ = raw_->info().total;
  allowed_maximum_ = static_cast<size_t>(fraction * static_cast<double>(device_total_));
  fraction_set_ = true;  // stays set, even at 1.0
}

double CachingAllocator::memory_fraction() const {
  std::lock_guard lock(mutex_);
  if (!fraction_set_ || device_total_ == 0) return 1.0;
  return static_cast<double>(allowed_maximum_) / static_cast<double>(device_total_);
}

DeviceStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

int64_t CachingAllocator::memory_allocated() const {
  std::lock_guard lock(mutex_);
  return stats_.allocated_bytes.all().current;
}

int64_t CachingAllocator::max_memory_allocated() const {
  std::lock_guard lock(mutex_);
  return stats_.allocated_bytes.all().peak;
}

int64_t CachingAllocator::memory_reserved() const {
  std::lock_guard lock(mutex_);
  return stats_.reserved_bytes.all().current;
}

int64_t CachingAllocator::max_memory_reserved() const {
  std::lock_guard lock(mutex_);
  return stats_.reserved_bytes.all().peak;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
  categories_.reset_peak(stats_.allocated_bytes.by_type[kAggregate].current);
}

void CachingAllocator::add_block_role(const void* ptr, MemoryCategory role, std::string_view owner) {
  std::lock_guard lock(mutex_);
  categories_.add_role(reinterpret_cast<uintptr_t>(ptr), role, owner);
}

void CachingAllocator::remove_block_role(const void* ptr, MemoryCategory role) {
  std::lock_guard lock(mutex_);
  categories_.remove_role(reinterpret_cast<uintptr_t>(ptr), role);
}

void CachingAllocator::rebirth_blocks(MemoryCategory from, MemoryCategory to) {
  std::lock_guard lock(mutex_);
  categories_.rebirth(from, to);
}

CategoryBytes CachingAllocator::category_bytes() const {
  std::lock_guard lock(mutex_);
  return categories_.totals();
}

std::vector<LedgerBlock> CachingAllocator::largest_blocks(size_t count) const {
  std::lock_guard lock(mutex_);
  return categories_.largest(count);
}

PeakRecord CachingAllocator::peak_record() const {
  std::lock_guard lock(mutex_);
  return categories_.peak();
}

void CachingAllocator::reset_accumulated_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_accumulated();
}

std::string CachingAllocator::memory_summary(bool abbreviated) const {
  return format_memory_summary(memory_stats(), device_index_, abbreviated);
}

RawMemory::Info CachingAllocator::mem_get_info() {
  std::lock_guard lock(mutex_);
  return raw_->info();
}

size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = active_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  return it == active_blocks_.end() ? 0 : it->second->size;
}

void CachingAllocator::record_history(bool enabled, size_t max_entries) {
  std::lock_guard lock(mutex_);
  history_.set_enabled(enabled, max_entries);
}

bool CachingAllocator::history_enabled() const {
  std::lock_guard lock(mutex_);
  return history_.enabled();
}

// -------------------------------------------------------------------------------------------- snapshot

MemorySnapshot CachingAllocator::snapshot() {
  std::lock_guard lock(mutex_);
  std::vector<const Block*> heads;
  for (const BlockPool* pool : {&small_pool_, &large_pool_})
    for (const Block* block : pool->free_blocks)
      if (!block->prev) heads.push_back(block);
  for (const auto& [ptr, block] : active_blocks_)
    if (!block->prev) heads.push_back(block);
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });

  MemorySnapshot snap;
  snap.device_index = device_index_;
  snap.settings = config_;
  size_t total_active = 0;
  for (const Block* head : heads) {
    SegmentInfo segment;
    segment.address = head->ptr;
    segment.stream = head->stream;
    segment.pool = head->pool->kind;
    for (const Block* block = head; block; block = block->next) {
      BlockInfo info{block->ptr, block->size, block->requested_size,
                     block->allocated ? BlockState::active_allocated : BlockState::inactive};
      segment.total_size += block->size;
      if (block->allocated) {
        segment.allocated_size += block->size;
        segment.active_size += block->size;
        segment.requested_size += block->requested_size;
      }
      segment.blocks.push_back(info);
    }
    total_active += segment.active_size;
    snap.segments.push_back(std::move(segment));
  }
  history_.record(TraceAction::snapshot, 0, total_active, 0);
  snap.trace = history_.entries();
  return snap;
}

}  // namespace bytegrad
