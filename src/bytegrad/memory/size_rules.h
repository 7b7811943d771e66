// The caching allocator's size rules, in one place: how a request becomes a block size, which pool it
// draws from, how large a segment is cudaMalloc'ed for it, and when a found block is split.
#pragma once

#include <cstddef>

#include "bytegrad/memory/alloc_config.h"

namespace bytegrad {

inline constexpr size_t kMinBlockSize = 512;        // every block is a multiple of this
inline constexpr size_t kSmallSize = 1048576;       // rounded sizes up to this use the small pool
inline constexpr size_t kSmallBuffer = 2097152;     // every small-pool segment is this size
inline constexpr size_t kMinLargeAlloc = 10485760;  // below this, large requests get a large_segment_size segment
inline constexpr size_t kRoundLarge = 2097152;      // bigger segments are rounded up to a multiple of this

enum class PoolKind { small, large };

// Request bytes -> block size: 512-byte multiples, or power-of-two divisions where configured.
size_t round_size(size_t requested, const AllocatorConfig& config);

// Rounds up to one of `divisions` equal steps between the surrounding powers of two.
size_t roundup_power2_next_division(size_t size, size_t divisions);

inline PoolKind pool_for(size_t block_size) { return block_size <= kSmallSize ? PoolKind::small : PoolKind::large; }

// Block size -> the size of a new segment to hold it (also the "Tried to allocate" figure of an OOM).
size_t segment_size_for(size_t block_size, const AllocatorConfig& config);

// The page an expandable segment of this pool maps at a time: 2 MiB (small), 20 MiB (large, by default).
size_t expandable_page_size(PoolKind pool, const AllocatorConfig& config);

// Whether a free block of `block_size`, chosen for a request of `wanted` bytes, gives its tail back.
bool should_split(PoolKind pool, size_t block_size, size_t wanted, const AllocatorConfig& config);

}  // namespace bytegrad
