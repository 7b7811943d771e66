// One device's caching allocator, following PyTorch's CUDA caching allocator rule for rule:
// requests are rounded (size_rules.h), served best-fit from cached free blocks of the same stream and
// pool, carved from the front of the block found, and otherwise from a new segment; frees merge with free
// neighbours and stay cached until empty_cache (or an OOM retry) releases whole free segments.
// With expandable_segments, each (stream, pool) instead reserves one address range and maps pages into
// it on demand; empty_cache unmaps the pages no block touches.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/core/recycling_allocator.h"
#include "bytegrad/memory/alloc_config.h"
#include "bytegrad/memory/block_categories.h"
#include "bytegrad/memory/history.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/memory/raw_memory.h"
#include "bytegrad/memory/size_rules.h"
#include "bytegrad/memory/stats.h"
#include "bytegrad/memory/stream_timeline.h"

namespace bytegrad {

// A memory pool's id, as PyTorch's MempoolId_t: (0, 0) is the default pool; a user's pool (MemPool,
// memory/mem_pool.h) is (0, n), n counting up from 1 in the process.
using MempoolId = std::pair<uint64_t, uint64_t>;
inline constexpr MempoolId kDefaultMempool{0, 0};

enum class BlockState { active_allocated, active_pending_free, inactive };
std::string_view block_state_name(BlockState state);

struct BlockInfo {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;  // stale on free blocks, as in PyTorch
  BlockState state = BlockState::inactive;
  MemoryCategory category = MemoryCategory::other;  // what a live block is for (memory_category.h)
};

struct SegmentInfo {
  uintptr_t address = 0;
  size_t total_size = 0;
  size_t allocated_size = 0;
  size_t active_size = 0;
  size_t requested_size = 0;  // of active blocks only
  StreamId stream = 0;
  PoolKind pool = PoolKind::small;
  bool is_expandable = false;           // one contiguous mapped range of an expandable segment
  MempoolId pool_id = kDefaultMempool;  // the private pool (MemPool) that owns it, or the default pool
  std::vector<BlockInfo> blocks;        // in address order, tiling the segment
};

struct MemorySnapshot {
  int device_index = 0;
  std::vector<SegmentInfo> segments;  // sorted by address
  std::vector<TraceEntry> trace;      // the history, oldest first (empty unless recording)
  uint64_t trace_start = 0;           // the sequence number of trace[0] (History::first_sequence)
  AllocatorConfig settings;
};

// Called before an allocator gives device memory back to the driver (a segment released, pages unmapped),
// with that allocator's lock held and its device: the tensor layer writes out the deferred gradients that
// may read it (tensor/gradient_reader.h). One hook per process.
using BeforeMemoryReturned = void (*)(Device);
void set_before_memory_returned(BeforeMemoryReturned hook);

class CachingAllocator {
 public:
  // `timeline`: the device's streams and events (streams.h); null gives the allocator a simulated one.
  CachingAllocator(std::unique_ptr<RawMemory> raw, AllocatorConfig config, int device_index = 0,
                   std::shared_ptr<StreamTimeline> timeline = nullptr);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block for `bytes` on `stream`; nullptr for 0 bytes. Throws OutOfMemoryError after flushing the
  // cache and retrying; the allocator stays consistent, so the caller may free memory and try again.
  void* malloc(size_t bytes, StreamId stream = 0);
  // Returns a block from malloc; nullptr is ignored. An unknown pointer throws std::invalid_argument.
  // A block other streams used (record_stream) stops counting as allocated now but stays active until
  // their work queued so far has completed: a later malloc notices that (process_events), or empty_cache
  // and an out-of-memory retry wait for it.
  void free(void* ptr);
  // The live block at `ptr` is used on `stream` too (Tensor::record_stream); its own stream is ignored.
  void record_stream(const void* ptr, StreamId stream);
  // Waits for every pending free's events, then releases every cached segment that is entirely free: the
  // default pool's (not while a thread allocates to a private pool) and those of private pools no longer in
  // use. With a private pool's id: only that pool's, if it is no longer in use (PyTorch's emptyCache(id)).
  void empty_cache(MempoolId pool = kDefaultMempool);

  // Private pools (PyTorch's graph_pools, used by torch.cuda.MemPool; mem_pool.h is the user's API). A pool
  // serves only requests made while its thread allocates to it; its blocks and segments are its own, counted
  // in the same statistics. use_count: its users (the MemPool, each allocation scope); at 0 the pool is
  // freeable and empty_cache releases its free segments, forgetting it once it holds none.
  void create_or_incref_pool(MempoolId pool);
  void release_pool(MempoolId pool);  // one user fewer
  int pool_use_count(MempoolId pool) const;
  void set_use_on_oom(MempoolId pool, bool use_on_oom);  // its free blocks serve others before an OOM
  void set_no_split(MempoolId pool);                     // its blocks never split a segment
  // Requests made by the calling thread go to `pool` until end_allocate_to_pool; scopes nest (the latest
  // wins). Each begin is a user of the pool (create_or_incref_pool); end does not release it.
  void begin_allocate_to_pool(MempoolId pool);
  void end_allocate_to_pool(MempoolId pool);

  // Which of several equal free blocks best fit takes. PyTorch takes the lowest address, and addresses
  // come from the CUDA driver, so a figure that turns on such a tie depends on where segments landed
  // (issue 31; docs/status.md): highest_address runs a program the other way to show the other outcome.
  // placement_ties() counts the requests best fit served with equal candidates in more than one segment
  // (expandable segments excepted; inside one segment the order is the offsets', not the driver's), and
  // highest_address takes the highest such segment's first candidate: the segments' order reversed. Not part
  // of PyTorch's statistics.
  enum class TieOrder { lowest_address, highest_address };
  void set_tie_order(TieOrder order);
  TieOrder tie_order() const;
  int64_t placement_ties() const;
  // The second placement outcome: where the regions reserved before the first kernel launch go against the
  // stretch that launch frees (EarlyRegions, raw_memory.h): as the host's address map implies
  // (set_host_map_holes: whether the program's host work before the first launch left holes in it; unless
  // set, as the host work noted so far says, host_work.h), or reversed. Set both on a fresh allocator, before the first
  // launch; as_host_map unless set. early_regions_decided(): the first launch found such regions, so the other
  // placement orders segments differently (and can give other figures). Devices whose addresses are not modelled ignore
  // it.
  using EarlyRegions = bytegrad::EarlyRegions;
  void set_early_regions(EarlyRegions placement);
  void set_host_map_holes(bool holes);
  EarlyRegions early_regions() const;
  bool early_regions_decided() const;

  // Caps the segments this allocator may hold at fraction * total device memory (0 <= fraction <= 1).
  void set_memory_fraction(double fraction);
  // New settings between allocations (set_allocator_settings, memory_functions.h): later requests follow
  // them; existing segments stay as they are (expandable or not). The memory fraction is not touched: its
  // setting applies when an allocator is made.
  void apply_settings(AllocatorConfig config);
  // Adds an observer called just before each OutOfMemoryError (out_of_memory.h).
  void attach_out_of_memory_observer(OutOfMemoryObserver observer);
  double memory_fraction() const;  // 1.0 until one is set

  DeviceStats stats() const;
  std::map<std::string, int64_t> memory_stats() const { return stats().flatten(); }
  int64_t memory_allocated() const;
  int64_t max_memory_allocated() const;
  int64_t memory_reserved() const;
  int64_t max_memory_reserved() const;
  void reset_peak_stats();
  void reset_accumulated_stats();

  // For PyTorch's memory_viz viewer: memory_viz_json / dump_memory_viz (reports/memory_viz.h). With a
  // private pool's id, only that pool's segments (none once it is gone), as torch.cuda.memory_snapshot(id).
  MemorySnapshot snapshot(MempoolId pool = kDefaultMempool);
  void record_history(bool enabled, size_t max_entries = std::numeric_limits<size_t>::max());
  bool history_enabled() const;  // whether record_history(true) is in effect
  // For tools that read the history from a point on (MemoryStory, MemoryProbe): while attached, the
  // history records whatever record_history says, and no other observer or record_history(false) clears
  // it. Each attach is matched by one detach. Returns the sequence number the next entry will have.
  uint64_t attach_history_observer();
  void detach_history_observer();
  // Unique among the allocators made in this process: tells a reconfigured device's new allocator from the
  // old one even when it sits at the same address.
  uint64_t id() const { return id_; }

  RawMemory::Info mem_get_info();
  // The driver's own allocations at a kernel launch or a new cuBLAS handle (DriverAllocation flags,
  // virtual_address_space.h), for devices whose segment addresses are modelled (RawMemory). Cheap once
  // the one-time ones are made: every kernel launch on sim, meta and cuda reports here.
  void note_driver_allocations(uint32_t what);
  const AllocatorConfig& config() const { return config_; }
  int device_index() const { return device_index_; }
  // The device this allocator serves, for the out-of-memory report's line on memory outside the allocator
  // (outside_allocator.h); set by device_allocators, unset for an allocator made on its own.
  void set_device(Device device) { device_ = device; }

  // The rounded block size behind a live pointer (0 if it is not one of ours).
  size_t block_size(const void* ptr) const;

  // What each live block is for (memory_category.h): roles given and taken by the layers above (a
  // module's parameter, a .grad, optimizer state, a saved activation), bytes per category (summing to
  // memory_allocated()), the largest blocks with their owners, and the same at the last peak.
  void add_block_role(const void* ptr, MemoryCategory role, std::string_view owner = {});
  void remove_block_role(const void* ptr, MemoryCategory role);
  void rebirth_blocks(MemoryCategory from, MemoryCategory to);  // BlockCategories::rebirth
  CategoryBytes category_bytes() const;
  std::string block_owner(const void* ptr) const;  // BlockCategories::module_owner
  std::vector<LedgerBlock> largest_blocks(size_t count) const;
  PeakRecord peak_record() const;

 private:
  struct Block;
  struct ExpandableSegment;
  // One of stats_'s arrays for all pools together, read under the lock.
  Stat all_pools(StatArray DeviceStats::*stat) const;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  struct AddressOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  struct PrivatePool;
  struct BlockPool {
    PoolKind kind;
    PrivatePool* owner = nullptr;  // null for the default pools
    // The sets' and active_blocks_' nodes come and go with every malloc and free: recycled (their order
    // is the comparators', whatever allocates the nodes).
    std::set<Block*, BlockOrder, RecyclingAllocator<Block*>> free_blocks;
    std::set<Block*, AddressOrder, RecyclingAllocator<Block*>> unmapped;  // expandable segments' ranges without
                                                                          // pages, by (stream, address)
    uint64_t search_count = 0;  // get_free_block calls, the clock that ages blocks for garbage collection
  };
  struct PrivatePool {
    MempoolId id;
    int use_count = 1;
    size_t segment_count = 0;  // segments (or mapped ranges) it holds: forgotten when freeable and 0
    BlockPool small{PoolKind::small};
    BlockPool large{PoolKind::large};
  };
  struct Request {
    size_t requested = 0;  // bytes asked for
    size_t size = 0;       // rounded block size
    size_t segment_size = 0;
    StreamId stream = 0;
    BlockPool* pool = nullptr;
    Block* block = nullptr;
  };

  // The pool a request of this block size goes to: the latest private pool the calling thread allocates to,
  // else the default pools.
  BlockPool& pool_for_request(size_t size);
  PrivatePool& private_pool(MempoolId pool, const char* caller) const;
  bool allocating_to_pools() const { return !allocating_to_pool_.empty(); }
  bool try_use_on_oom_pools(Request& request);
  void erase_pool_if_done(MempoolId pool);
  bool find_free_block(Request& request);
  bool allocate_segment(Request& request, bool is_retry);
  bool allocate_expandable(Request& request);
  Block* find_expandable_block(StreamId stream, BlockPool& pool, size_t size);
  bool map_block(Block* to_map, size_t size);
  void unmap_block(Block* block);
  void release_expandable_segment(Block* block);
  bool release_available_cached_blocks(const Request& request);
  void release_cached_blocks(MempoolId pool = kDefaultMempool);
  void release_free_segments(BlockPool& pool);
  void release_segment(Block* block);
  void notify_before_memory_returned() const;  // set_before_memory_returned's hook
  void collect_garbage();
  Block* take_found_block(Request& request);
  void record_category_change(const CategoryChange& change, const CategoryBytes& totals);
  void free_block(Block* block);
  void insert_events(Block* block);
  std::unordered_map<uintptr_t, Block*>::iterator live_block(const void* ptr, const char* caller);
  void process_events();
  void synchronize_and_free_events(const PrivatePool* only = nullptr);
  void insert_deferred_events();
  size_t merge_into(Block* dst, Block* src, BlockPool& pool);
  void insert_free(BlockPool& pool, Block* block);
  [[noreturn]] void throw_out_of_memory(const Request& request, std::unique_lock<std::mutex>& lock);
  BlockCategoryEntry* category_entry(const void* ptr);  // the live block's, or null
  Block* new_block();
  void recycle_block(Block* block);

  std::unique_ptr<RawMemory> raw_;
  std::shared_ptr<StreamTimeline> timeline_;
  // Blocks freed while other streams may still use them: per used stream, in the order the frees came,
  // each with the event recorded on that stream at the free.
  std::map<StreamId, std::deque<std::pair<EventHandle, Block*>>> pending_frees_;
  std::atomic<uint32_t> driver_allocations_noted_{0};  // note_driver_allocations' flags so far
  AllocatorConfig config_;
  int device_index_;
  std::optional<Device> device_;
  mutable std::mutex mutex_;
  BlockPool small_pool_{PoolKind::small};
  BlockPool large_pool_{PoolKind::large};
  // Private pools by id, and the ids of those no longer in use (ordered by id: PyTorch's hash maps have no
  // order of their own, so where several pools are released at once the order is ours).
  std::map<MempoolId, std::unique_ptr<PrivatePool>> private_pools_;
  std::set<MempoolId> freeable_pools_;
  std::set<MempoolId> use_on_oom_pools_;
  std::set<MempoolId> no_split_pools_;
  // Threads allocating to a private pool, in the order they began (PyTorch's captures_underway).
  std::vector<std::pair<MempoolId, std::thread::id>> allocating_to_pool_;
  // Blocks with other streams' uses freed while some thread allocated to a private pool: their events are
  // recorded once no thread does (PyTorch defers them the same way during capture).
  std::vector<Block*> frees_deferred_;
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_segments_;
  std::unordered_map<uintptr_t, Block*, std::hash<uintptr_t>, std::equal_to<>,
                     RecyclingAllocator<std::pair<const uintptr_t, Block*>>>
      active_blocks_;
  std::vector<Block*> spare_blocks_;  // recycled Block objects
  DeviceStats stats_;
  BlockCategories categories_;
  size_t total_reserved_ = 0;  // bytes of all segments: what the fraction cap and GC test
  bool fraction_set_ = false;
  TieOrder tie_order_ = TieOrder::lowest_address;
  EarlyRegions early_regions_ = EarlyRegions::as_host_map;
  int64_t placement_ties_ = 0;
  size_t allowed_maximum_ = 0;
  size_t device_total_ = 0;
  History history_;
  std::vector<OutOfMemoryObserver> oom_observers_;
  uint64_t id_ = 0;
};

}  // namespace bytegrad
