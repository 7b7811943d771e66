// Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// counter-based generator of curand and PyTorch's CUDA generator: a 128-bit counter and a 64-bit key give
// four 32-bit words, each block independent of every other, so any element of a draw can be computed on its
// own, on any thread and any device. Integer arithmetic only.
#pragma once

#include <cstdint>

#include "bytegrad/kernels/host_device.h"

namespace bytegrad {

struct PhiloxWords {
  uint32_t w[4];
};

// The ten rounds: each multiplies words 0 and 2 by the round constants (high and low halves of the 64-bit
// products), mixes in words 1 and 3 and the key, and the key advances by the Weyl constants between rounds.
BYTEGRAD_HOST_DEVICE PhiloxWords philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                               uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
  }
  return PhiloxWords{{c0, c1, c2, c3}};
}

}  // namespace bytegrad
