// The allocator's statistics, defined exactly as PyTorch's: a Stat keeps current, peak and the running
// totals of increases (allocated) and decreases (freed); array stats keep one Stat per pool type.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "bytegrad/memory/size_rules.h"

namespace bytegrad {

struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;

  void increase(int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

enum StatType : size_t { kAggregate = 0, kSmallPool = 1, kLargePool = 2, kNumStatTypes = 3 };

inline StatType stat_type_for(PoolKind pool) { return pool == PoolKind::small ? kSmallPool : kLargePool; }

// Every update touches `all` and the pool's own entry; each keeps its own peak.
struct StatArray {
  std::array<Stat, kNumStatTypes> by_type;
  void increase(PoolKind pool, int64_t amount) {
    by_type[kAggregate].increase(amount);
    by_type[stat_type_for(pool)].increase(amount);
  }
  void decrease(PoolKind pool, int64_t amount) {
    by_type[kAggregate].decrease(amount);
    by_type[stat_type_for(pool)].decrease(amount);
  }
  const Stat& all() const { return by_type[kAggregate]; }
  const Stat& operator[](StatType type) const { return by_type[type]; }
};

struct DeviceStats {
  StatArray allocation;            // live blocks handed to callers (count)
  StatArray segment;               // live cudaMalloc segments (count)
  StatArray active;                // allocated or awaiting a cross-stream free (count)
  StatArray inactive_split;        // free blocks inside segments that also hold other blocks (count)
  StatArray allocated_bytes;       // bytes of allocated blocks (rounded sizes)
  StatArray reserved_bytes;        // bytes of all segments
  StatArray active_bytes;          // bytes of active blocks
  StatArray inactive_split_bytes;  // bytes of inactive split blocks (cannot be released)
  StatArray requested_bytes;       // unrounded bytes callers asked for, of active blocks
  Stat oversize_allocations;       // allocations of at least max_split_size
  Stat oversize_segments;          // segments of at least max_split_size
  int64_t num_alloc_retries = 0;   // third attempts (after flushing the cache)
  int64_t num_ooms = 0;
  int64_t num_sync_all_streams = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;
  int64_t max_split_size = -1;  // configured value; "unlimited" reads as -1

  void reset_peaks();
  void reset_accumulated();
  // PyTorch's memory_stats(): flattened "group.pool.field" keys, sorted, 122 entries.
  std::map<std::string, int64_t> flatten() const;
};

}  // namespace bytegrad
