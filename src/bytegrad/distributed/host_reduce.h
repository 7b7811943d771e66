// Reductions in host memory shared by the backends that move bytes on the host (threads, store): every
// rank's buffer combined in rank order, so both backends give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bytegrad/core/scalar_type.h"
#include "bytegrad/distributed/process_group.h"

namespace bytegrad::distributed {

// Reduces `count` elements of every rank's buffer (sources[r], rank order) into `result`:
// ((r0 op r1) op r2) ..., then divides by the number of sources for avg. bool follows NCCL's mapping
// (sum: or, product: and); 16-bit floats compute in float and round at each step; signed integers wrap.
void reduce_in_rank_order(const std::vector<const std::byte*>& sources, ScalarType dtype, int64_t count, ReduceOp op,
                          std::vector<std::byte>& result);

}  // namespace bytegrad::distributed
