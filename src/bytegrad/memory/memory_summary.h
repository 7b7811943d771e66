// PyTorch's memory_summary() table, built from flattened memory_stats().
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace bytegrad {

// Every line is 75 columns wrapped in |...|; each cell's unit is chosen from the `all` row of its metric
// and column, and values are floor-divided into that unit.
std::string format_memory_summary(const std::map<std::string, int64_t>& stats, int device_index,
                                  bool abbreviated = false);

}  // namespace bytegrad
