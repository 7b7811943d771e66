// Long randomized runs (seeded std::mt19937) of malloc / free / empty_cache, checking after every step that
// the snapshot is a well-formed tiling and that every statistic equals the sum it counts (reference sections 3,
// 4, 5, 6 and 8.1). Before each malloc, an independent model of best fit (section 4.3), should_split (4.7) and
// the segment size (2.4) predicts which block the allocator must hand out.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "helpers.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/memory/size_rules.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct Variant {
  const char* name;
  const char* config;
  SimulatedCapacity capacity;
  size_t max_request;  // largest request drawn
  size_t live_budget;  // free instead of allocating above this many live bytes (0: no limit)
  int steps;
  bool two_streams;
};

struct Live {
  size_t requested;
  StreamId stream;
};

// Sizes spanning both pools, weighted to small: boundary values, then log-uniform small (1 B .. 1 MiB),
// mid (1 .. 10 MiB) and uniform large (10 MiB .. max_request).
size_t random_size(std::mt19937& rng, size_t max_request) {
  static const size_t kBoundaries[] = {1, 511, 512, 513, 4096, 1048575, 1048576, 1048577,
                                       9 * MiB, 10 * MiB - 1, 10 * MiB, 25 * MiB, 25 * MiB + 1, 26 * MiB};
  auto log_uniform = [&](double lo, double hi) {
    std::uniform_real_distribution<double> exponent(std::log2(lo), std::log2(hi));
    return std::max<size_t>(1, static_cast<size_t>(std::exp2(exponent(rng))));
  };
  const int bucket = static_cast<int>(rng() % 100);
  if (bucket < 5) {
    size_t n = kBoundaries[rng() % std::size(kBoundaries)];
    return std::min(n, max_request);
  }
  if (bucket < 65) return log_uniform(1, static_cast<double>(MiB));
  if (bucket < 92) return log_uniform(static_cast<double>(MiB), static_cast<double>(10 * MiB));
  return std::uniform_int_distribution<size_t>(10 * MiB, max_request)(rng);
}

// Section 2.4, written out independently.
size_t model_segment_size(size_t s, const AllocatorConfig& config) {
  if (s <= 1048576) return 2097152;
  if (s < 10485760) return config.large_segment_size;
  return (s + 2097151) / 2097152 * 2097152;
}

// Section 4.7.
bool model_should_split(bool small, size_t block, size_t s, const AllocatorConfig& config) {
  const size_t remaining = block - s;
  if (small) return remaining >= 512;
  return s < config.max_split_size && remaining > 1048576;
}

const BlockInfo* find_block(const MemorySnapshot& snap, uintptr_t address, const SegmentInfo** segment_out = nullptr) {
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

size_t fully_free_segments(const MemorySnapshot& snap) {
  size_t n = 0;
  for (const SegmentInfo& segment : snap.segments)
    n += segment.blocks.size() == 1 && segment.blocks[0].state == BlockState::inactive;
  return n;
}

std::vector<std::pair<const char*, const StatArray*>> arrays_of(const DeviceStats& s) {
  return {{"allocation", &s.allocation},         {"segment", &s.segment},
          {"active", &s.active},                 {"inactive_split", &s.inactive_split},
          {"allocated_bytes", &s.allocated_bytes}, {"reserved_bytes", &s.reserved_bytes},
          {"active_bytes", &s.active_bytes},     {"inactive_split_bytes", &s.inactive_split_bytes},
          {"requested_bytes", &s.requested_bytes}};
}

// Sums over the snapshot, per stat type (all, small, large).
struct Sums {
  std::array<int64_t, kNumStatTypes> allocation{}, allocated_bytes{}, requested_bytes{}, segment{}, reserved_bytes{},
      inactive_split{}, inactive_split_bytes{};
  int64_t oversize_allocations = 0, oversize_segments = 0;
};

// Checks the snapshot's shape and every stat against the sums it counts. Returns false on the first failure
// (so a broken run stops instead of flooding the output).
bool check_invariants(const MemorySnapshot& snap, const DeviceStats& stats, const DeviceStats& previous,
                      const std::unordered_map<uintptr_t, Live>& live, const AllocatorConfig& config,
                      const SimulatedCapacity& capacity, CachingAllocator& allocator) {
  bool ok = true;
  auto expect = [&](bool condition, const std::string& what) {
    if (!condition) {
      ok = false;
      FAIL_CHECK(what);
    }
    return condition;
  };

  Sums sums;
  size_t allocated_blocks = 0;
  uintptr_t previous_end = 0;
  for (const SegmentInfo& segment : snap.segments) {
    const size_t t = stat_type_for(segment.pool);
    expect(segment.address >= previous_end, "segments sorted by address and not overlapping");
    previous_end = segment.address + segment.total_size;
    if (!expect(!segment.blocks.empty(), "a segment has blocks")) continue;
    if (segment.pool == PoolKind::small) expect(segment.total_size == 2097152, "small segments are 2 MiB");
    else expect(segment.total_size % 2097152 == 0 && segment.total_size > 1048576, "large segments: 2 MiB multiples");

    uintptr_t address = segment.address;
    bool previous_free = false;
    size_t allocated = 0, requested = 0;
    for (const BlockInfo& block : segment.blocks) {
      expect(block.address == address, "blocks tile the segment with no gap or overlap");
      expect(block.size > 0 && block.size % 512 == 0, "block sizes are positive 512 multiples");
      address += block.size;
      const bool is_free = block.state == BlockState::inactive;
      expect(!(is_free && previous_free), "no two adjacent free blocks (they merge)");
      previous_free = is_free;
      expect(block.state != BlockState::active_pending_free, "no pending frees on one stream per block");
      if (is_free) {
        if (segment.blocks.size() > 1) {
          sums.inactive_split[t] += 1;
          sums.inactive_split_bytes[t] += static_cast<int64_t>(block.size);
        }
        continue;
      }
      ++allocated_blocks;
      allocated += block.size;
      requested += block.requested_size;
      sums.allocation[t] += 1;
      sums.allocated_bytes[t] += static_cast<int64_t>(block.size);
      sums.requested_bytes[t] += static_cast<int64_t>(block.requested_size);
      if (block.size >= config.max_split_size) ++sums.oversize_allocations;
      auto it = live.find(block.address);
      if (expect(it != live.end(), "every allocated block is one the test holds")) {
        expect(block.requested_size == it->second.requested, "an allocated block keeps its request");
        expect(segment.stream == it->second.stream, "a block lives in a segment of its stream");
        expect(block.size >= round_size(it->second.requested, config), "a block covers its rounded request");
        expect(pool_for(round_size(it->second.requested, config)) == segment.pool, "a block lives in its pool");
      }
    }
    expect(address == segment.address + segment.total_size, "blocks add up to the segment size");
    expect(segment.allocated_size == allocated, "segment allocated_size");
    expect(segment.active_size == allocated, "segment active_size (no pending frees)");
    expect(segment.requested_size == requested, "segment requested_size counts active blocks only");
    sums.segment[t] += 1;
    sums.reserved_bytes[t] += static_cast<int64_t>(segment.total_size);
    if (segment.total_size >= config.max_split_size) ++sums.oversize_segments;
  }
  expect(allocated_blocks == live.size(), "every live block appears in the snapshot");

  for (auto* sum : {&sums.allocation, &sums.allocated_bytes, &sums.requested_bytes, &sums.segment, &sums.reserved_bytes,
                    &sums.inactive_split, &sums.inactive_split_bytes})
    (*sum)[kAggregate] = (*sum)[kSmallPool] + (*sum)[kLargePool];

  for (size_t t = 0; t < kNumStatTypes; ++t) {
    const auto type = static_cast<StatType>(t);
    const std::string pool = t == kAggregate ? "all" : t == kSmallPool ? "small_pool" : "large_pool";
    expect(stats.allocation[type].current == sums.allocation[t], "allocation." + pool);
    expect(stats.allocated_bytes[type].current == sums.allocated_bytes[t], "allocated_bytes." + pool);
    expect(stats.active[type].current == sums.allocation[t], "active." + pool + " == allocation");
    expect(stats.active_bytes[type].current == sums.allocated_bytes[t], "active_bytes." + pool + " == allocated_bytes");
    expect(stats.requested_bytes[type].current == sums.requested_bytes[t], "requested_bytes." + pool);
    expect(stats.segment[type].current == sums.segment[t], "segment." + pool);
    expect(stats.reserved_bytes[type].current == sums.reserved_bytes[t], "reserved_bytes." + pool);
    expect(stats.inactive_split[type].current == sums.inactive_split[t], "inactive_split." + pool);
    expect(stats.inactive_split_bytes[type].current == sums.inactive_split_bytes[t], "inactive_split_bytes." + pool);
  }
  expect(stats.oversize_allocations.current == sums.oversize_allocations, "oversize_allocations");
  expect(stats.oversize_segments.current == sums.oversize_segments, "oversize_segments");

  // Stat bookkeeping (section 6): with no resets, current == allocated - freed; peaks never fall; `all`
  // moves with exactly one pool type each time.
  const auto now = arrays_of(stats), before = arrays_of(previous);
  for (size_t i = 0; i < now.size(); ++i) {
    const StatArray& a = *now[i].second;
    const StatArray& b = *before[i].second;
    for (size_t t = 0; t < kNumStatTypes; ++t) {
      const Stat& s = a.by_type[t];
      expect(s.current == s.allocated - s.freed, std::string(now[i].first) + ": current == allocated - freed");
      expect(s.peak >= s.current && s.peak >= b.by_type[t].peak, std::string(now[i].first) + ": peak");
      expect(s.current >= 0, std::string(now[i].first) + ": current >= 0");
    }
    expect(a.all().allocated == a[kSmallPool].allocated + a[kLargePool].allocated,
           std::string(now[i].first) + ": all.allocated == small + large");
    expect(a.all().freed == a[kSmallPool].freed + a[kLargePool].freed,
           std::string(now[i].first) + ": all.freed == small + large");
  }
  for (const Stat* s : {&stats.oversize_allocations, &stats.oversize_segments})
    expect(s->current == s->allocated - s->freed && s->peak >= s->current, "oversize stat bookkeeping");
  expect(stats.num_device_alloc - stats.num_device_free == stats.segment.all().current,
         "num_device_alloc - num_device_free == live segments");

  // The simulated device's view agrees with the allocator's.
  const RawMemory::Info info = allocator.mem_get_info();
  expect(info.total == capacity.total_bytes, "mem_get_info total");
  expect(info.free == capacity.total_bytes - capacity.context_bytes - static_cast<size_t>(sums.reserved_bytes[0]),
         "mem_get_info free == total - context - reserved");
  return ok;
}

void run_variant(const Variant& variant, uint32_t seed) {
  INFO("variant '" << std::string(variant.name) << "', seed " << seed);
  const AllocatorConfig config = AllocatorConfig::parse(variant.config);
  auto allocator = make_allocator(config, variant.capacity);
  std::mt19937 rng(seed);
  std::unordered_map<uintptr_t, Live> live;
  std::vector<uintptr_t> live_order;  // for picking a random live block
  size_t live_bytes = 0;
  MemorySnapshot snap = allocator->snapshot();
  DeviceStats stats = allocator->stats();
  int mallocs = 0, frees = 0, flushes = 0, ooms = 0, cache_hits = 0;

  for (int step = 0; step < variant.steps; ++step) {
    const int roll = static_cast<int>(rng() % 1000);
    const bool over_budget = variant.live_budget != 0 && live_bytes > variant.live_budget;
    const DeviceStats before = stats;
    const MemorySnapshot snap_before = snap;
    std::string action;

    if (roll < 15) {
      action = "empty_cache";
      ++flushes;
      const size_t releasable = fully_free_segments(snap_before);
      allocator->empty_cache();
      stats = allocator->stats();
      snap = allocator->snapshot();
      CHECK(stats.num_sync_all_streams == before.num_sync_all_streams + 1);
      CHECK(stats.num_device_free - before.num_device_free == static_cast<int64_t>(releasable));
      CHECK(fully_free_segments(snap) == 0);
      CHECK(stats.inactive_split_bytes.all().current == before.inactive_split_bytes.all().current);
    } else if (!live_order.empty() && (roll < 450 || over_budget)) {
      const size_t index = rng() % live_order.size();
      const uintptr_t address = live_order[index];
      live_order[index] = live_order.back();
      live_order.pop_back();
      const Live freed = live.at(address);
      live.erase(address);
      const size_t freed_size = allocator->block_size(reinterpret_cast<void*>(address));
      live_bytes -= freed_size;
      action = "free " + std::to_string(freed.requested);
      ++frees;
      allocator->free(reinterpret_cast<void*>(address));
      stats = allocator->stats();
      snap = allocator->snapshot();
      const BlockInfo* block = find_block(snap, address);
      REQUIRE_MESSAGE(block != nullptr, "a free never releases its segment");
      CHECK(block->state == BlockState::inactive);
      CHECK(stats.num_device_free == before.num_device_free);
      CHECK(stats.allocated_bytes.all().current == before.allocated_bytes.all().current - static_cast<int64_t>(freed_size));
    } else {
      const size_t n = random_size(rng, variant.max_request);
      const StreamId stream = variant.two_streams && rng() % 5 == 0 ? 1 : 0;
      action = "malloc " + std::to_string(n) + " on stream " + std::to_string(stream);
      ++mallocs;
      // The model: best fit among free blocks of the same stream and pool (smallest size, then lowest
      // address), subject to the max_split_size rules; else a new segment of the 2.4 size.
      const size_t s = round_size(n, config);
      const bool small = s <= 1048576;
      const BlockInfo* best = nullptr;
      for (const SegmentInfo& segment : snap_before.segments) {
        if ((segment.pool == PoolKind::small) != small || segment.stream != stream) continue;
        for (const BlockInfo& block : segment.blocks)
          if (block.state == BlockState::inactive && block.size >= s &&
              (!best || block.size < best->size || (block.size == best->size && block.address < best->address)))
            best = &block;
      }
      const size_t max_split = config.max_split_size;
      const bool cached = best && !(s < max_split && best->size >= max_split) &&
                          !(s >= max_split && best->size >= s + config.max_non_split_rounding_size);
      void* ptr = nullptr;
      try {
        ptr = allocator->malloc(n, stream);
      } catch (const OutOfMemoryError& e) {
        ++ooms;
        stats = allocator->stats();
        snap = allocator->snapshot();
        INFO("step " << step << ": " << action);
        CHECK_FALSE(cached);  // a cached block never fails
        CHECK(e.segment_bytes == model_segment_size(s, config));
        CHECK(allocator->mem_get_info().free < e.segment_bytes);  // it really did not fit
        CHECK(stats.num_ooms == before.num_ooms + 1);
        CHECK(stats.num_alloc_retries == before.num_alloc_retries + 1);
        CHECK(stats.num_sync_all_streams == before.num_sync_all_streams + 1);
        CHECK(stats.num_device_alloc == before.num_device_alloc);
        CHECK(stats.allocation.all().current == before.allocation.all().current);
        CHECK(stats.allocated_bytes.all().current == before.allocated_bytes.all().current);
        CHECK(stats.requested_bytes.all().current == before.requested_bytes.all().current);
        CHECK(fully_free_segments(snap) == 0);  // the flush released every whole free segment
      }
      if (ptr) {
        const auto address = reinterpret_cast<uintptr_t>(ptr);
        live.emplace(address, Live{n, stream});
        live_order.push_back(address);
        stats = allocator->stats();
        snap = allocator->snapshot();
        const SegmentInfo* segment = nullptr;
        const BlockInfo* block = find_block(snap, address, &segment);
        INFO("step " << step << ": " << action);
        REQUIRE(block != nullptr);
        CHECK(block->address == address);
        CHECK(block->state == BlockState::active_allocated);
        CHECK(block->requested_size == n);
        CHECK(address % 512 == 0);
        if (cached) {
          ++cache_hits;
          CHECK(address == best->address);
          CHECK(stats.num_device_alloc == before.num_device_alloc);
          CHECK(stats.num_device_free == before.num_device_free);
          CHECK(block->size == (model_should_split(small, best->size, s, config) ? s : best->size));
        } else {
          const size_t segment_size = model_segment_size(s, config);
          CHECK(stats.num_device_alloc == before.num_device_alloc + 1);
          CHECK(segment->address == address);  // carved from the front of the new segment
          CHECK(segment->total_size == segment_size);
          CHECK(block->size == (model_should_split(small, segment_size, s, config) ? s : segment_size));
        }
        live_bytes += block->size;
      }
    }

    INFO("after step " << step << ": " << action);
    if (!check_invariants(snap, stats, before, live, config, variant.capacity, *allocator)) break;
  }

  MESSAGE(std::string(variant.name) << ": " << mallocs << " mallocs (" << cache_hits << " from the cache), " << frees
                       << " frees, " << flushes << " empty_cache, " << ooms << " OOMs");
  CHECK(mallocs > variant.steps / 3);
  CHECK(frees > variant.steps / 4);
  CHECK(cache_hits > 0);
  if (variant.capacity.total_bytes < 1 * GiB) CHECK(ooms > 0);
  // Clean up: everything freed and flushed leaves nothing behind.
  for (uintptr_t address : live_order) allocator->free(reinterpret_cast<void*>(address));
  allocator->empty_cache();
  const DeviceStats end = allocator->stats();
  CHECK(end.allocated_bytes.all().current == 0);
  CHECK(end.requested_bytes.all().current == 0);
  CHECK(end.reserved_bytes.all().current == 0);
  CHECK(end.segment.all().current == 0);
  CHECK(end.inactive_split.all().current == 0);
  CHECK(end.inactive_split_bytes.all().current == 0);
  CHECK(end.num_device_alloc == end.num_device_free);
}

}  // namespace

TEST_CASE("randomized invariants: default config, two streams") {
  run_variant({"default", "", {}, 30 * MiB, 512 * MiB, 4000, true}, 20240611);
}

TEST_CASE("randomized invariants: small device, OOMs caught") {
  run_variant({"small device", "", {160 * MiB, 8 * MiB}, 30 * MiB, 0, 4000, false}, 7);
}

TEST_CASE("randomized invariants: max_split_size_mb:40") {
  // Requests up to 64 MiB so that oversize blocks (>= 40 MiB) exist; a 512 MiB device so that
  // release_available_cached_blocks (attempt B) runs.
  run_variant({"max_split_size_mb:40", "max_split_size_mb:40", {512 * MiB, 0}, 64 * MiB, 0, 4000, true}, 99);
}

TEST_CASE("randomized invariants: roundup_power2_divisions:4") {
  run_variant({"roundup_power2_divisions:4", "roundup_power2_divisions:4", {}, 30 * MiB, 512 * MiB, 4000, false}, 3);
}

TEST_CASE("randomized invariants: mixed options on a small device") {
  run_variant({"mixed", "max_split_size_mb:24,max_non_split_rounding_mb:24,roundup_power2_divisions:[2:4,>:2]",
               {256 * MiB, 0}, 48 * MiB, 0, 3000, true},
              12345);
}
