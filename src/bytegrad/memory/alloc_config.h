// The caching allocator's options, read from BYTEGRAD_ALLOC_CONF in PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax:
//   "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6"
//   "expandable_segments:True"
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace bytegrad {

inline constexpr size_t kMiB = size_t{1024} * 1024;
inline constexpr size_t kRoundupPower2Intervals = 16;  // slots for [1 MiB, 2 MiB) ... [32 GiB, 64 GiB)

struct AllocatorConfig {
  std::string raw;  // the text it was parsed from ("" when unset)
  // Blocks at least this large are never split, and are not handed to smaller requests.
  size_t max_split_size = std::numeric_limits<size_t>::max();
  // A request >= max_split_size may take a cached block at most this much larger than itself.
  size_t max_non_split_rounding_size = 20 * kMiB;
  // Segment size for requests between 1 MiB and 10 MiB.
  size_t large_segment_size = 20 * kMiB;
  // Per size interval: round requests up to one of this many steps between powers of two (0/1 = off).
  std::array<size_t, kRoundupPower2Intervals> roundup_power2_divisions{};
  // With a memory fraction set: reclaim old cached segments once reserved exceeds this share of the cap.
  double garbage_collection_threshold = 0.0;
  // Per (stream, pool) one reserved address range with pages mapped on demand instead of whole segments.
  bool expandable_segments = false;
  // per_process_memory_fraction (PyTorch 2.11): a cap of this share of the device's memory, applied when the
  // allocator is made (as set_per_process_memory_fraction); 1.0 sets no cap.
  double per_process_memory_fraction = 1.0;

  // The division count that applies to a request of `size` bytes.
  size_t divisions_for(size_t size) const;

  // Parses PyTorch's syntax. Throws std::invalid_argument naming the key or value at fault.
  static AllocatorConfig parse(std::string_view text);
  // The settings after `text` is applied to `current` at run time (PyTorch's _set_allocator_settings): as in
  // PyTorch, max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold go back to their
  // defaults unless `text` gives them; every other key keeps its current value unless given. Errors as parse's.
  static AllocatorConfig updated(const AllocatorConfig& current, std::string_view text);
  // Parses the environment variable BYTEGRAD_ALLOC_CONF (defaults when unset).
  static AllocatorConfig from_environment();
};

// `text` in single quotes, cut to its first 80 characters (then "..." and its length): how configuration
// errors quote what they were given, so that a huge setting is not echoed whole.
std::string quote_setting(std::string_view text);

}  // namespace bytegrad
