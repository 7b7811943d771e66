// The dropout draw of the fused attention kernels (backend.h's AttentionExtras): one counter-based draw per
// (b, h, i, j) element of the probabilities, Philox4x32-10 keyed by the call's seed with the element's linear
// index and the call's offset as the counter, so forward and backward (and cpu, sim and cuda) drop the same
// elements without storing a mask. Integer arithmetic only: every device decides alike.
#pragma once

#include <cmath>
#include <cstdint>

#include "bytegrad/kernels/host_device.h"
#include "bytegrad/kernels/philox.h"

namespace bytegrad {

BYTEGRAD_HOST_DEVICE uint32_t philox_first_word(uint64_t seed, uint64_t index, uint64_t offset) {
  return philox4x32_10(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(offset >> 32), static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32))
      .w[0];
}

// Which elements survive: a draw at or above threshold = floor(p * 2^32) is kept (probability 1 - p up to
// 2^-32); p == 1 keeps nothing. kept_scale is 1 / (1 - p), the survivors' factor.
struct DropoutDraw {
  uint64_t seed = 0, offset = 0;
  uint32_t threshold = 0;
  bool active = false, drop_all = false;
  double kept_scale = 1.0;

  BYTEGRAD_HOST_DEVICE bool kept(uint64_t index) const {
    if (!active) return true;
    if (drop_all) return false;
    return philox_first_word(seed, index, offset) >= threshold;
  }
};

inline DropoutDraw dropout_draw(double p, uint64_t seed, uint64_t offset) {
  DropoutDraw d;
  d.seed = seed;
  d.offset = offset;
  d.active = p > 0.0;
  d.drop_all = p >= 1.0;
  if (d.active && !d.drop_all) {
    d.threshold = static_cast<uint32_t>(std::floor(p * 4294967296.0));
    d.kept_scale = 1.0 / (1.0 - p);
  }
  return d;
}

}  // namespace bytegrad
