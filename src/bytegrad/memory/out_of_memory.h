// The out-of-memory error: PyTorch 2.11's message, figure for figure, in what(); and report(), which takes
// the failure apart: the request, where memory went by category, the largest free piece, what
// fragmentation cost, and the largest live blocks with their owners.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/memory/block_categories.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/memory/size_rules.h"

namespace bytegrad {

// Everything known at the failure, gathered after the allocator flushed its cache and retried.
struct OutOfMemoryReport {
  int device_index = 0;
  // The request: what the caller asked for, the block it rounds to, its pool, and the segment (or, with
  // expandable segments, the pages) the allocator then tried to obtain ("Tried to allocate" in what()).
  size_t requested_bytes = 0;
  size_t block_bytes = 0;
  PoolKind pool = PoolKind::large;
  size_t segment_bytes = 0;
  // The device: cudaMemGetInfo's figures (sim/meta: the simulated card), the driver's count of this
  // process's memory where known, and the memory-fraction cap once one was set.
  size_t device_total = 0;
  size_t device_free = 0;
  std::optional<size_t> process_in_use;
  std::optional<size_t> allowed_bytes;
  // The allocator: allocated by category (sums to allocated_bytes), reserved, and the cached free bytes
  // left after the flush: they all lie in segments that still hold live blocks, so only a free piece at
  // least block_bytes long could have served the request.
  size_t allocated_bytes = 0;
  size_t reserved_bytes = 0;
  CategoryBytes categories{};
  MemoryPhase phase = MemoryPhase::forward;
  size_t cached_free_bytes = 0;   // reserved - allocated
  size_t private_free_bytes = 0;  // free blocks held in private pools (MemPool), part of cached_free_bytes
  size_t cached_free_pieces = 0;  // free blocks in the request's pool
  size_t largest_free_piece = 0;  // the largest of them (0 when none)
  std::vector<LedgerBlock> largest_live;
  // NCCL's memory on the device when a process group has figures there (outside_allocator.h's line;
  // "" when none): part of what made the device full, never of allocated or reserved.
  std::string outside_allocator;

  // Room for a new segment: what the device has free, or under a cap what the cap leaves.
  size_t room_for_segment() const;
  // The request would have fit had the cached free bytes been one piece: fragmentation made it fail.
  bool fragmentation_caused() const;
  std::string str() const;  // the report as text, human units with exact bytes
};
std::ostream& operator<<(std::ostream& out, const OutOfMemoryReport& report);

// PyTorch's message from the report's figures (what() of the error).
std::string out_of_memory_message(const OutOfMemoryReport& report);

class OutOfMemoryError : public std::runtime_error {
 public:
  explicit OutOfMemoryError(OutOfMemoryReport report)
      : std::runtime_error(out_of_memory_message(report)),
        requested_bytes(report.requested_bytes),
        segment_bytes(report.segment_bytes),
        report_(std::make_shared<const OutOfMemoryReport>(std::move(report))) {}
  OutOfMemoryError(const std::string& message, size_t requested_bytes, size_t segment_bytes)
      : std::runtime_error(message), requested_bytes(requested_bytes), segment_bytes(segment_bytes) {}
  size_t requested_bytes;  // what the caller asked for
  size_t segment_bytes;    // the segment the allocator tried to obtain ("Tried to allocate")

  // The failure taken apart. An error raised before any attempt (a request over 1 EB) has only what().
  bool has_report() const { return report_ != nullptr; }
  const OutOfMemoryReport& report() const;

 private:
  std::shared_ptr<const OutOfMemoryReport> report_;  // shared: exceptions are copied
};

// What an out-of-memory observer is told (PyTorch's observer arguments, in order): the device, the bytes the
// allocator tried to obtain, the bytes it may hold (the memory-fraction cap, else the device's total), and the
// device's free bytes.
struct OutOfMemoryNotice {
  int device_index = 0;
  size_t alloc_bytes = 0;
  size_t device_allowed = 0;
  size_t device_free = 0;
};
// Called when an allocator is about to raise OutOfMemoryError, after its flush and retry, outside its lock
// (so it may read the allocator's figures). An exception it throws replaces the OutOfMemoryError.
using OutOfMemoryObserver = std::function<void(const OutOfMemoryNotice&)>;

// Requests this large are refused before any attempt, as PyTorch does.
inline constexpr size_t kOneExaByte = size_t{1} << 60;
inline constexpr const char* kTooLargeMessage = "CUDA out of memory. Tried to allocate more than 1EB memory.";

}  // namespace bytegrad
