// The out-of-memory error: PyTorch 2.11's message, figure for figure, as a typed exception.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace bytegrad {

class OutOfMemoryError : public std::runtime_error {
 public:
  OutOfMemoryError(const std::string& message, size_t requested_bytes, size_t segment_bytes)
      : std::runtime_error(message), requested_bytes(requested_bytes), segment_bytes(segment_bytes) {}
  size_t requested_bytes;  // what the caller asked for
  size_t segment_bytes;    // the segment the allocator tried to obtain ("Tried to allocate")
};

// The figures the message is built from, gathered after the cache was flushed.
struct OutOfMemoryReport {
  size_t segment_bytes = 0;
  int device_index = 0;
  size_t device_total = 0;
  size_t device_free = 0;
  std::optional<size_t> process_in_use;  // driver-reported process usage, when known
  std::optional<size_t> allowed_bytes;   // the memory-fraction cap, once one was set
  size_t allocated_bytes = 0;
  size_t reserved_bytes = 0;
};

std::string out_of_memory_message(const OutOfMemoryReport& report);

// Requests this large are refused before any attempt, as PyTorch does.
inline constexpr size_t kOneExaByte = size_t{1} << 60;
inline constexpr const char* kTooLargeMessage = "CUDA out of memory. Tried to allocate more than 1EB memory.";

}  // namespace bytegrad
