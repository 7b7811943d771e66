// A caching allocator driven under a model: CheckedAllocator makes each malloc / free / empty_cache /
// set_memory_fraction / reset_peak_stats call, predicts from an independent model of best fit (reference
// section 4.3), should_split (4.7) and the segment size (2.4) what the call must do, and afterwards checks
// that the snapshot is a well-formed tiling and that every statistic equals the sum it counts (sections 3,
// 4, 5, 6 and 8.1). An out-of-memory must leave every statistic as it was except the OOM counters and the
// cached segments the flush released. Used by the memory suite's randomized runs (tests/memory/invariants.cpp)
// and the allocator fuzzer (tests/fuzz).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/memory/size_rules.h"

namespace bytegrad::testing {

// Sizes spanning both pools, weighted to small: boundary values, then log-uniform small (1 B .. 1 MiB),
// mid (1 .. 10 MiB) and uniform large (10 MiB .. max_request).
inline size_t random_request_size(std::mt19937& rng, size_t max_request) {
  constexpr size_t MiB = size_t{1} << 20;
  static const size_t kBoundaries[] = {1,       511,     512,          513,      4096,     1048575,      1048576,
                                       1048577, 9 * MiB, 10 * MiB - 1, 10 * MiB, 25 * MiB, 25 * MiB + 1, 26 * MiB};
  auto log_uniform = [&](double lo, double hi) {
    std::uniform_real_distribution<double> exponent(std::log2(lo), std::log2(hi));
    return std::max<size_t>(1, static_cast<size_t>(std::exp2(exponent(rng))));
  };
  const int bucket = static_cast<int>(rng() % 100);
  if (bucket < 5) return std::min(kBoundaries[rng() % std::size(kBoundaries)], max_request);
  if (bucket < 65) return log_uniform(1, static_cast<double>(MiB));
  if (bucket < 92) return log_uniform(static_cast<double>(MiB), static_cast<double>(10 * MiB));
  return std::uniform_int_distribution<size_t>(std::min(10 * MiB, max_request), max_request)(rng);
}

// Section 2.4, written out independently.
inline size_t model_segment_size(size_t s, const AllocatorConfig& config) {
  if (s <= 1048576) return 2097152;
  if (s < 10485760) return config.large_segment_size;
  return (s + 2097151) / 2097152 * 2097152;
}

// Section 4.7.
inline bool model_should_split(bool small, size_t block, size_t s, const AllocatorConfig& config) {
  const size_t remaining = block - s;
  if (small) return remaining >= 512;
  return s < config.max_split_size && remaining > 1048576;
}

inline const BlockInfo* find_block(const MemorySnapshot& snap, uintptr_t address,
                                   const SegmentInfo** segment_out = nullptr) {
  for (const SegmentInfo& segment : snap.segments) {
    if (address < segment.address || address >= segment.address + segment.total_size) continue;
    for (const BlockInfo& block : segment.blocks)
      if (address >= block.address && address < block.address + block.size) {
        if (segment_out) *segment_out = &segment;
        return &block;
      }
  }
  return nullptr;
}

inline bool fully_free(const SegmentInfo& segment) {
  return segment.blocks.size() == 1 && segment.blocks[0].state == BlockState::inactive;
}

inline size_t fully_free_segments(const MemorySnapshot& snap) {
  return static_cast<size_t>(std::count_if(snap.segments.begin(), snap.segments.end(), fully_free));
}

// The keys of memory_stats() whose values differ, "key: before -> after" (empty when equal).
inline std::string stat_differences(const DeviceStats& want, const DeviceStats& got) {
  const auto a = want.flatten(), b = got.flatten();
  std::string out;
  for (const auto& [key, value] : a) {
    const auto it = b.find(key);
    if (it == b.end() || it->second != value)
      out += key + ": expected " + std::to_string(value) + ", got " +
             (it == b.end() ? std::string("(missing)") : std::to_string(it->second)) + "; ";
  }
  return out;
}

class CheckedAllocator {
 public:
  struct Live {
    size_t requested;
    StreamId stream;
  };
  struct Counts {
    long mallocs = 0, cache_hits = 0, frees = 0, flushes = 0, ooms = 0, too_large = 0, fractions = 0, peak_resets = 0;
  };

  // `capacity` is what the allocator's sim device was made with (mem_get_info is checked against it). With
  // `fill_blocks`, every block handed out is stamped with a pattern that is checked when it is freed, so two
  // live blocks that overlap, or a block written by the allocator, are caught.
  CheckedAllocator(CachingAllocator& allocator, SimulatedCapacity capacity, bool fill_blocks = false)
      : allocator_(allocator),
        config_(allocator.config()),
        capacity_(capacity),
        fill_blocks_(fill_blocks),
        stats_(allocator.stats()),
        snap_(allocator.snapshot()) {
    ok_ = check(stats_, false);
  }

  const Counts& counts() const { return counts_; }
  size_t live_count() const { return live_order_.size(); }
  size_t live_bytes() const { return live_bytes_; }
  bool ok() const { return ok_; }  // false once any check failed: callers stop instead of flooding the output

  // malloc(n) on `stream`, checked against the model: the block best fit must pick, or a new segment of the
  // section 2.4 size, or an OutOfMemoryError that changes nothing but the OOM counters and the flushed cache.
  void malloc(size_t n, StreamId stream) {
    ++counts_.mallocs;
    const DeviceStats before = stats_;
    const MemorySnapshot snap_before = snap_;
    INFO("malloc " << n << " on stream " << stream);
    if (n >= kOneExaByte) {  // refused before any attempt: nothing at all changes
      ++counts_.too_large;
      CHECK_THROWS_AS(allocator_.malloc(n, stream), OutOfMemoryError);
      refresh();
      expect(stat_differences(before, stats_).empty(), "a request of 1 EB or more changes no statistic");
      ok_ = ok_ && check(before, false);
      return;
    }
    const size_t s = round_size(n, config_);
    const bool small = s <= 1048576;
    const BlockInfo* best = nullptr;
    for (const SegmentInfo& segment : snap_before.segments) {
      if ((segment.pool == PoolKind::small) != small || segment.stream != stream) continue;
      for (const BlockInfo& block : segment.blocks)
        if (block.state == BlockState::inactive && block.size >= s &&
            (!best || block.size < best->size || (block.size == best->size && block.address < best->address)))
          best = &block;
    }
    const size_t max_split = config_.max_split_size;
    const bool cached = best && !(s < max_split && best->size >= max_split) &&
                        !(s >= max_split && best->size >= s + config_.max_non_split_rounding_size);
    void* ptr = nullptr;
    try {
      ptr = allocator_.malloc(n, stream);
    } catch (const OutOfMemoryError& e) {
      ++counts_.ooms;
      refresh();
      expect(!cached, "a cached block never fails");
      expect(e.segment_bytes == model_segment_size(s, config_), "the OOM names the segment it tried");
      const size_t reserved = static_cast<size_t>(stats_.reserved_bytes.all().current);
      const bool over_cap = fraction_set_ && reserved + e.segment_bytes > allowed_bytes_;
      expect(over_cap || allocator_.mem_get_info().free < e.segment_bytes, "an OOM's segment really did not fit");
      check_oom_changed_only_counters(before, snap_before);
      ok_ = ok_ && check(before, false);
      return;
    }
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    live_.emplace(address, Live{n, stream});
    live_order_.push_back(address);
    refresh();
    const SegmentInfo* segment = nullptr;
    const BlockInfo* block = find_block(snap_, address, &segment);
    if (!expect(block != nullptr, "the block handed out is in the snapshot")) return;
    expect(block->address == address, "the pointer is the block's start");
    expect(block->state == BlockState::active_allocated, "the block is allocated");
    expect(block->requested_size == n, "the block records the request");
    expect(address % 512 == 0, "blocks are 512-byte aligned");
    if (cached) {
      ++counts_.cache_hits;
      expect(address == best->address, "best fit: the smallest adequate cached block, lowest address first");
      expect(stats_.num_device_alloc == before.num_device_alloc, "a cache hit maps no segment");
      expect(stats_.num_device_free == before.num_device_free, "a cache hit releases no segment");
      expect(block->size == (model_should_split(small, best->size, s, config_) ? s : best->size),
             "should_split decides the block's size");
    } else {
      const size_t segment_size = model_segment_size(s, config_);
      expect(stats_.num_device_alloc == before.num_device_alloc + 1, "a miss maps exactly one segment");
      expect(segment->address == address, "a new segment is carved from its front");
      expect(segment->total_size == segment_size, "the segment has the section 2.4 size");
      expect(block->size == (model_should_split(small, segment_size, s, config_) ? s : segment_size),
             "should_split decides the block's size");
      expect(!fraction_set_ || static_cast<size_t>(stats_.reserved_bytes.all().current) <= allowed_bytes_,
             "no segment is mapped beyond the memory-fraction cap");
    }
    live_bytes_ += block->size;
    if (fill_blocks_) stamp(ptr, n, true);
    ok_ = ok_ && check(before, false);
  }

  // Frees the live block at `index` of the live list (any order); checks that it became a cached free block.
  void free(size_t index) {
    ++counts_.frees;
    const DeviceStats before = stats_;
    const uintptr_t address = live_order_[index];
    live_order_[index] = live_order_.back();
    live_order_.pop_back();
    const Live freed = live_.at(address);
    live_.erase(address);
    INFO("free of a " << freed.requested << "-byte block");
    const size_t freed_size = allocator_.block_size(reinterpret_cast<void*>(address));
    live_bytes_ -= freed_size;
    if (fill_blocks_) stamp(reinterpret_cast<void*>(address), freed.requested, false);
    allocator_.free(reinterpret_cast<void*>(address));
    refresh();
    const BlockInfo* block = find_block(snap_, address);
    if (!expect(block != nullptr, "a free never releases its segment")) return;
    expect(block->state == BlockState::inactive, "the freed block is cached");
    expect(stats_.num_device_free == before.num_device_free, "a free releases no segment");
    expect(
        stats_.allocated_bytes.all().current == before.allocated_bytes.all().current - static_cast<int64_t>(freed_size),
        "allocated_bytes falls by the block's size");
    ok_ = ok_ && check(before, false);
  }

  void empty_cache() {
    ++counts_.flushes;
    const DeviceStats before = stats_;
    const size_t releasable = fully_free_segments(snap_);
    allocator_.empty_cache();
    refresh();
    expect(stats_.num_sync_all_streams == before.num_sync_all_streams + 1, "empty_cache counts a sync");
    expect(stats_.num_device_free - before.num_device_free == static_cast<int64_t>(releasable),
           "empty_cache releases every fully free segment");
    expect(fully_free_segments(snap_) == 0, "no fully free segment is left");
    expect(stats_.inactive_split_bytes.all().current == before.inactive_split_bytes.all().current,
           "split free blocks stay cached");
    ok_ = ok_ && check(before, false);
  }

  // A fraction outside [0, 1] (or NaN) is refused with std::invalid_argument and changes nothing.
  void set_memory_fraction(double fraction) {
    ++counts_.fractions;
    const DeviceStats before = stats_;
    const double previous = allocator_.memory_fraction();
    INFO("set_memory_fraction(" << fraction << ")");
    if (!(fraction >= 0.0 && fraction <= 1.0)) {
      CHECK_THROWS_AS(allocator_.set_memory_fraction(fraction), std::invalid_argument);
      expect(allocator_.memory_fraction() == previous, "a refused fraction keeps the previous one");
    } else {
      allocator_.set_memory_fraction(fraction);
      fraction_set_ = true;
      allowed_bytes_ = static_cast<size_t>(fraction * static_cast<double>(capacity_.total_bytes));
    }
    refresh();
    expect(stat_differences(before, stats_).empty(), "setting a fraction changes no statistic");
    ok_ = ok_ && check(before, false);
  }

  void reset_peak_stats() {
    ++counts_.peak_resets;
    const DeviceStats before = stats_;
    allocator_.reset_peak_stats();
    refresh();
    DeviceStats want = before;
    want.reset_peaks();
    expect(stat_differences(want, stats_).empty(), "reset_peak_stats sets every peak to its current value");
    ok_ = ok_ && check(before, true);
  }

  // Frees every live block and empties the cache: nothing may be left behind.
  void free_all_and_flush() {
    while (ok_ && !live_order_.empty()) free(live_order_.size() - 1);
    if (!ok_) return;
    empty_cache();
    expect(stats_.allocated_bytes.all().current == 0, "allocated_bytes back to 0");
    expect(stats_.requested_bytes.all().current == 0, "requested_bytes back to 0");
    expect(stats_.reserved_bytes.all().current == 0, "reserved_bytes back to 0");
    expect(stats_.segment.all().current == 0, "no segment left");
    expect(stats_.inactive_split.all().current == 0, "no split block left");
    expect(stats_.inactive_split_bytes.all().current == 0, "no split bytes left");
    expect(stats_.num_device_alloc == stats_.num_device_free, "every segment mapped was released");
  }

 private:
  bool expect(bool condition, const char* what) {
    if (!condition) {
      ok_ = false;
      FAIL_CHECK(what);
    }
    return condition;
  }
  bool expect(bool condition, const std::string& what) { return expect(condition, what.c_str()); }

  void refresh() {
    stats_ = allocator_.stats();
    snap_ = allocator_.snapshot();
  }

  // A pattern over the block's first and last requested bytes (all of them for small blocks), derived from
  // the address: written at malloc, checked at free.
  static void stamp_range(unsigned char* p, size_t n, uintptr_t seed, bool write, bool& intact) {
    for (size_t i = 0; i < n; ++i) {
      const auto v = static_cast<unsigned char>((seed >> 9) * 31 + i * 7 + 1);
      if (write) p[i] = v;
      else if (p[i] != v) intact = false;
    }
  }
  void stamp(void* ptr, size_t n, bool write) {
    auto* p = static_cast<unsigned char*>(ptr);
    const auto seed = reinterpret_cast<uintptr_t>(ptr);
    constexpr size_t kEdge = 64;
    bool intact = true;
    if (n <= 2 * kEdge) {
      stamp_range(p, n, seed, write, intact);
    } else {
      stamp_range(p, kEdge, seed, write, intact);
      stamp_range(p + n - kEdge, kEdge, seed + 1, write, intact);
    }
    if (!write) expect(intact, "a live block's bytes are unchanged until it is freed (no overlap)");
  }

  // After an OOM: the allocation side of the statistics is untouched, and the only segments gone are ones
  // that were entirely free (flushed by the retry); every other statistic moves by exactly those releases.
  void check_oom_changed_only_counters(const DeviceStats& before, const MemorySnapshot& snap_before) {
    std::unordered_set<uintptr_t> remaining;
    for (const SegmentInfo& segment : snap_.segments) remaining.insert(segment.address);
    DeviceStats want = before;
    for (const SegmentInfo& segment : snap_before.segments) {
      if (remaining.count(segment.address)) continue;
      expect(fully_free(segment), "an OOM releases only entirely free segments");
      want.segment.decrease(segment.pool, 1);
      want.reserved_bytes.decrease(segment.pool, static_cast<int64_t>(segment.total_size));
      if (segment.total_size >= config_.max_split_size) want.oversize_segments.decrease(1);
      ++want.num_device_free;
    }
    ++want.num_ooms;
    ++want.num_alloc_retries;
    ++want.num_sync_all_streams;
    const std::string differences = stat_differences(want, stats_);
    expect(differences.empty(), "an OOM changes only the OOM counters and the flushed segments: " + differences);
    expect(fully_free_segments(snap_) == 0, "the OOM's flush released every entirely free segment");
    expect(snap_.segments.size() == snap_before.segments.size() - (snap_before.segments.size() - remaining.size()),
           "an OOM maps no segment");
  }

  // The snapshot's shape and every statistic against the sums it counts. `peaks_reset`: peaks may have
  // fallen since `previous`.
  bool check(const DeviceStats& previous, bool peaks_reset) {
    const MemorySnapshot& snap = snap_;
    const DeviceStats& stats = stats_;
    bool ok = true;
    auto expect_here = [&](bool condition, const char* what, const char* detail = "") {
      if (!condition) {
        ok = false;
        FAIL_CHECK(what << detail);
      }
      return condition;
    };
    using Sum = std::array<int64_t, kNumStatTypes>;
    Sum allocation{}, allocated_bytes{}, requested_bytes{}, segments{}, reserved_bytes{}, inactive_split{},
        inactive_split_bytes{};
    int64_t oversize_allocations = 0, oversize_segments = 0;
    size_t allocated_blocks = 0;
    uintptr_t previous_end = 0;
    for (const SegmentInfo& segment : snap.segments) {
      const size_t t = stat_type_for(segment.pool);
      expect_here(segment.address >= previous_end, "segments sorted by address and not overlapping");
      previous_end = segment.address + segment.total_size;
      if (!expect_here(!segment.blocks.empty(), "a segment has blocks")) continue;
      if (segment.pool == PoolKind::small) expect_here(segment.total_size == 2097152, "small segments are 2 MiB");
      else
        expect_here(segment.total_size == config_.large_segment_size ||
                        (segment.total_size % 2097152 == 0 && segment.total_size > 1048576),
                    "large segments: large_segment_size or 2 MiB multiples");
      uintptr_t address = segment.address;
      bool previous_free = false;
      size_t allocated = 0, requested = 0;
      for (const BlockInfo& block : segment.blocks) {
        expect_here(block.address == address, "blocks tile the segment with no gap or overlap");
        expect_here(block.size > 0 && block.size % 512 == 0, "block sizes are positive 512 multiples");
        address += block.size;
        const bool is_free = block.state == BlockState::inactive;
        expect_here(!(is_free && previous_free), "no two adjacent free blocks (they merge)");
        previous_free = is_free;
        expect_here(block.state != BlockState::active_pending_free, "no pending frees on one stream per block");
        if (is_free) {
          if (segment.blocks.size() > 1) {
            inactive_split[t] += 1;
            inactive_split_bytes[t] += static_cast<int64_t>(block.size);
          }
          continue;
        }
        ++allocated_blocks;
        allocated += block.size;
        requested += block.requested_size;
        allocation[t] += 1;
        allocated_bytes[t] += static_cast<int64_t>(block.size);
        requested_bytes[t] += static_cast<int64_t>(block.requested_size);
        if (block.size >= config_.max_split_size) ++oversize_allocations;
        const auto it = live_.find(block.address);
        if (expect_here(it != live_.end(), "every allocated block is one the test holds")) {
          const size_t rounded = round_size(it->second.requested, config_);
          expect_here(block.requested_size == it->second.requested, "an allocated block keeps its request");
          expect_here(segment.stream == it->second.stream, "a block lives in a segment of its stream");
          expect_here(block.size >= rounded, "a block covers its rounded request");
          expect_here(pool_for(rounded) == segment.pool, "a block lives in its pool");
        }
      }
      expect_here(address == segment.address + segment.total_size, "blocks add up to the segment size");
      expect_here(segment.allocated_size == allocated, "segment allocated_size");
      expect_here(segment.active_size == allocated, "segment active_size (no pending frees)");
      expect_here(segment.requested_size == requested, "segment requested_size counts active blocks only");
      segments[t] += 1;
      reserved_bytes[t] += static_cast<int64_t>(segment.total_size);
      if (segment.total_size >= config_.max_split_size) ++oversize_segments;
    }
    expect_here(allocated_blocks == live_.size(), "every live block appears in the snapshot");
    for (Sum* sum : {&allocation, &allocated_bytes, &requested_bytes, &segments, &reserved_bytes, &inactive_split,
                     &inactive_split_bytes})
      (*sum)[kAggregate] = (*sum)[kSmallPool] + (*sum)[kLargePool];

    static const char* kPool[] = {" (all)", " (small_pool)", " (large_pool)"};
    for (size_t t = 0; t < kNumStatTypes; ++t) {
      const auto type = static_cast<StatType>(t);
      expect_here(stats.allocation[type].current == allocation[t], "allocation == allocated blocks", kPool[t]);
      expect_here(stats.allocated_bytes[type].current == allocated_bytes[t], "allocated_bytes == their sizes",
                  kPool[t]);
      expect_here(stats.active[type].current == allocation[t], "active == allocation", kPool[t]);
      expect_here(stats.active_bytes[type].current == allocated_bytes[t], "active_bytes == allocated_bytes", kPool[t]);
      expect_here(stats.requested_bytes[type].current == requested_bytes[t], "requested_bytes == the requests",
                  kPool[t]);
      expect_here(stats.segment[type].current == segments[t], "segment == segments", kPool[t]);
      expect_here(stats.reserved_bytes[type].current == reserved_bytes[t], "reserved_bytes == segment sizes", kPool[t]);
      expect_here(stats.inactive_split[type].current == inactive_split[t], "inactive_split", kPool[t]);
      expect_here(stats.inactive_split_bytes[type].current == inactive_split_bytes[t], "inactive_split_bytes",
                  kPool[t]);
    }
    expect_here(stats.oversize_allocations.current == oversize_allocations, "oversize_allocations");
    expect_here(stats.oversize_segments.current == oversize_segments, "oversize_segments");
    // allocated == the sum of the live requests, rounded (split blocks may be larger than the rounding:
    // should_split keeps a small remainder with the block).
    int64_t rounded_requests = 0;
    for (const auto& [address, live] : live_)
      rounded_requests += static_cast<int64_t>(round_size(live.requested, config_));
    expect_here(stats.allocated_bytes.all().current >= rounded_requests, "allocated >= the live requests rounded");

    // Stat bookkeeping (section 6): with no accumulated resets, current == allocated - freed; peaks never
    // fall (unless reset); `all` moves with exactly one pool type each time.
    const StatArray DeviceStats::*arrays[] = {&DeviceStats::allocation,      &DeviceStats::segment,
                                              &DeviceStats::active,          &DeviceStats::inactive_split,
                                              &DeviceStats::allocated_bytes, &DeviceStats::reserved_bytes,
                                              &DeviceStats::active_bytes,    &DeviceStats::inactive_split_bytes,
                                              &DeviceStats::requested_bytes};
    for (const auto member : arrays) {
      const StatArray& a = stats.*member;
      const StatArray& b = previous.*member;
      for (size_t t = 0; t < kNumStatTypes; ++t) {
        const Stat& s = a.by_type[t];
        expect_here(s.current == s.allocated - s.freed, "current == allocated - freed");
        expect_here(s.peak >= s.current, "peak >= current");
        expect_here(peaks_reset || s.peak >= b.by_type[t].peak, "peaks never fall");
        expect_here(s.current >= 0, "current >= 0");
      }
      expect_here(a.all().allocated == a[kSmallPool].allocated + a[kLargePool].allocated,
                  "all.allocated == small + large");
      expect_here(a.all().freed == a[kSmallPool].freed + a[kLargePool].freed, "all.freed == small + large");
    }
    for (const Stat* s : {&stats.oversize_allocations, &stats.oversize_segments})
      expect_here(s->current == s->allocated - s->freed && s->peak >= s->current, "oversize stat bookkeeping");
    expect_here(stats.num_device_alloc - stats.num_device_free == stats.segment.all().current,
                "num_device_alloc - num_device_free == live segments");

    // The simulated device's view agrees with the allocator's.
    const RawMemory::Info info = allocator_.mem_get_info();
    expect_here(info.total == capacity_.total_bytes, "mem_get_info total");
    expect_here(info.free == capacity_.total_bytes - capacity_.context_bytes - static_cast<size_t>(reserved_bytes[0]),
                "mem_get_info free == total - context - reserved");
    return ok;
  }

  CachingAllocator& allocator_;
  const AllocatorConfig config_;
  SimulatedCapacity capacity_;
  bool fill_blocks_;
  std::unordered_map<uintptr_t, Live> live_;
  std::vector<uintptr_t> live_order_;  // for picking a random live block
  size_t live_bytes_ = 0;
  bool fraction_set_ = false;
  size_t allowed_bytes_ = 0;
  DeviceStats stats_;
  MemorySnapshot snap_;
  Counts counts_;
  bool ok_ = true;
};

}  // namespace bytegrad::testing
