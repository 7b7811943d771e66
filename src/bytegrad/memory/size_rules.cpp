#include "bytegrad/memory/size_rules.h"

#include <bit>

namespace bytegrad {

size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if (std::has_single_bit(size)) return size;
  size_t floor = std::bit_floor(size);
  size_t step = floor >> (std::bit_width(divisions) - 1);  // floor / divisions, divisions a power of two
  if (step == 0) return floor << 1;
  size_t rounded_down = size & ~(step - 1);
  return rounded_down == size ? size : rounded_down + step;
}

size_t round_size(size_t requested, const AllocatorConfig& config) {
  if (requested < kMinBlockSize) return kMinBlockSize;
  size_t divisions = config.divisions_for(requested);
  // Since PyTorch 2.5 a division count of 1 means "off" (the test is > 1, not > 0).
  if (divisions > 1 && requested > kMinBlockSize * divisions) return roundup_power2_next_division(requested, divisions);
  return kMinBlockSize * ((requested + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size_for(size_t block_size, const AllocatorConfig& config) {
  if (block_size <= kSmallSize) return kSmallBuffer;
  if (block_size < kMinLargeAlloc) return config.large_segment_size;
  return kRoundLarge * ((block_size + kRoundLarge - 1) / kRoundLarge);
}

size_t expandable_page_size(PoolKind pool, const AllocatorConfig& config) {
  return pool == PoolKind::small ? kSmallBuffer : config.large_segment_size;
}

bool should_split(PoolKind pool, size_t block_size, size_t wanted, const AllocatorConfig& config) {
  size_t remaining = block_size - wanted;
  // Expandable segments split any tail of 512 bytes or more in both pools: free pages can be unmapped.
  if (pool == PoolKind::small || config.expandable_segments) return remaining >= kMinBlockSize;
  // Large pool: the tail must exceed 1 MiB (strictly), and oversize requests are never split.
  return wanted < config.max_split_size && remaining > kSmallSize;
}

}  // namespace bytegrad
