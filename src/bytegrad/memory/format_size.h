// Human-readable byte counts, with the thresholds and rounding PyTorch's allocator messages use.
#pragma once

#include <cstdint>
#include <string>

namespace bytegrad {

// <= 1024: "N bytes"; <= 1 MiB: "x.xx KiB"; <= 1 GiB: "x.xx MiB"; otherwise "x.xx GiB" (no TiB).
std::string format_size(uint64_t bytes);

}  // namespace bytegrad
