// MemoryProbe: a device's memory figures relative to the moment the probe was made, and the allocations
// and frees in between with the op that made each block — what a test of exact memory behaviour asserts.
//
//   bytegrad::testing::MemoryProbe probe(bytegrad::kSim);
//   auto y = bytegrad::relu(x);
//   CHECK(probe.allocated_delta() == 4096);          // 1024 floats * 4 bytes
//   CHECK(probe.allocated_delta_is(4096));           // the same, with a message that names the ops
//
// Making a probe resets the device's peak statistics (as torch.cuda.reset_peak_memory_stats), so
// peak_allocated_delta() is the highest point since the probe, relative to its start. It turns on the
// allocator's history for its lifetime (and turns it off again if it was off), which events() reads.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/device_allocators.h"

namespace bytegrad::testing {

// One allocation or free since the probe began.
struct MemoryEvent {
  enum class Kind { alloc, free };
  Kind kind;
  int64_t requested_bytes;  // what the op asked for
  int64_t block_bytes;      // what the allocator handed out (rounded; a whole block when not split)
  std::string op;           // the op that allocated the block ("linear", "workspace"; "earlier": before the probe)
  uintptr_t address;
};

// The outcome of a *_is check: converts to bool, prints expected, actual and the ops behind the difference.
struct DeltaCheck {
  bool passed = false;
  std::string message;
  explicit operator bool() const { return passed; }
  friend std::ostream& operator<<(std::ostream& out, const DeltaCheck& check) { return out << check.message; }
};

class MemoryProbe {
 public:
  // Throws std::invalid_argument for cpu (not cached; use host figures instead).
  explicit MemoryProbe(Device device = default_device());
  ~MemoryProbe();
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;

  Device device() const { return device_; }

  int64_t allocated_delta() const;       // memory_allocated() now minus at the start
  int64_t reserved_delta() const;        // memory_reserved()
  int64_t peak_allocated_delta() const;  // the peak of memory_allocated() since the start, minus the start
  int64_t blocks_delta() const;          // live blocks ("allocation.all.current")
  int64_t requested_delta() const;       // requested bytes of live blocks ("requested_bytes.all.current")
  std::vector<MemoryEvent> events() const;

  // Checks with messages: "allocated delta: expected 4.00 KiB (4096 B), got 8.00 KiB (8192 B), 4.00 KiB
  // (4096 B) more; blocks allocated since the probe and still live, by op: +4096 relu, +4096 mul".
  DeltaCheck allocated_delta_is(int64_t expected) const;
  DeltaCheck reserved_delta_is(int64_t expected) const;
  DeltaCheck peak_allocated_delta_is(int64_t expected) const;
  // The live blocks made since the probe, summed by op, largest first: "+4096 relu, +512 sum".
  std::string live_blocks_by_op() const;

 private:
  CachingAllocator& allocator() const;  // throws std::logic_error when the device was given a new allocator
  int64_t stat(const char* key) const;
  DeltaCheck check(const char* what, int64_t expected, int64_t actual) const;

  Device device_;
  uint64_t allocator_id_ = 0;   // CachingAllocator::id() of the allocator probed
  uint64_t history_start_ = 0;  // the sequence number of the first history entry made since the probe began
  int64_t start_allocated_, start_reserved_, start_blocks_, start_requested_;
};

}  // namespace bytegrad::testing
