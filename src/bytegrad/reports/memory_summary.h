// PyTorch's memory_summary() table, built from flattened memory_stats().
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/device_allocators.h"  // default_device

namespace bytegrad {

// PyTorch's 75-column memory_summary() table for an allocator, and for a device's allocator
// (torch.cuda.memory_summary; `cpu` is not cached and throws std::invalid_argument). The device's form adds,
// below the table, memory/outside_allocator.h's line when a process group has NCCL figures there.
std::string memory_summary(const CachingAllocator& allocator, bool abbreviated = false);
std::string memory_summary(Device device = default_device(), bool abbreviated = false);

// Every line is 75 columns wrapped in |...|; each cell's unit is chosen from the `all` row of its metric
// and column, and values are floor-divided into that unit.
std::string format_memory_summary(const std::map<std::string, int64_t>& stats, int device_index,
                                  bool abbreviated = false);

}  // namespace bytegrad
