// Every byte explained: what a device's allocated memory is for, by category (memory_category.h), and
// what its reserved memory is made of; the same at the peak.
//
//   std::cout << bytegrad::memory_ledger(kSim);   // or .bytes[MemoryCategory::gradient], ...
//   std::cout << bytegrad::peak_report(kSim);
//
// The categories' block bytes sum to memory_allocated() exactly. reserved = allocated + cached free, and
// allocated = requested + rounding (blocks are 512-byte multiples, or whole unsplit blocks); the cached
// free bytes are either pieces of segments that still hold live blocks (inactive splits: empty_cache cannot
// return them) or whole free segments (it can). Beyond reserved, the device's memory holds the driver's
// context and whatever else other holders took: total - free - reserved by cudaMemGetInfo on cuda, the
// modelled context on sim and meta. When a process group on the device has NCCL figures (measured on
// cuda, modelled on sim and meta: memory/outside_allocator.h), a line names them apart: "outside the
// allocator: NCCL communicator X, ring buffers Y, CUDA context Z"; they are never part of allocated or
// reserved.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/block_categories.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/memory/outside_allocator.h"

namespace bytegrad {

struct MemoryLedger {
  Device device;
  CategoryBytes bytes{};  // indexed by MemoryCategory; sums to `allocated`
  int64_t allocated = 0;
  int64_t requested = 0;
  int64_t rounding = 0;  // allocated - requested
  int64_t reserved = 0;
  int64_t cached_free = 0;               // reserved - allocated
  int64_t cached_in_split_segments = 0;  // free pieces of segments holding live blocks (inactive_split_bytes)
  int64_t cached_whole_segments = 0;     // free segments empty_cache would return
  int64_t device_total = 0;
  int64_t device_free = 0;
  int64_t outside_allocator = 0;  // device_total - device_free - reserved: driver context and other holders
  std::optional<OutsideAllocatorFigures> nccl;  // NCCL's part of it (measured) or beside it (modelled)
  std::vector<LedgerBlock> largest;

  int64_t operator[](MemoryCategory c) const { return bytes[static_cast<size_t>(c)]; }
  std::string str() const;  // a table with human units and exact bytes
};
std::ostream& operator<<(std::ostream& out, const MemoryLedger& ledger);

// The ledger now, with the `largest` biggest live blocks and their owners.
MemoryLedger memory_ledger(Device device = default_device(), size_t largest = 10);

struct PeakReport {
  Device device;
  PeakRecord record;              // max_memory_allocated's moment: bytes per category, phase, largest blocks
  std::string outside_allocator;  // outside_allocator_line when the report was made ("" when none)
  std::string str() const;
};
std::ostream& operator<<(std::ostream& out, const PeakReport& report);

// The moment max_memory_allocated() was reached (since the last reset_peak_memory_stats).
PeakReport peak_report(Device device = default_device());

}  // namespace bytegrad
