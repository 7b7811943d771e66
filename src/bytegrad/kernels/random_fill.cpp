// The random factories' host kernels (random_fill.h). Compiled with -ffp-contract=off and -fno-math-errno
// (kernels/CMakeLists.txt): no multiply-add is fused, whatever -march says, so every build rounds alike, and
// the loops over blocks vectorize.
#include "bytegrad/kernels/random_fill.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>

#include "bytegrad/kernels/philox.h"

namespace bytegrad::random_fill {

namespace {

// Blocks drawn at once: their words and values stay in the first-level cache.
constexpr int64_t kBatch = 256;

void philox_batch(uint64_t seed, uint64_t first_block, int64_t blocks, uint32_t* __restrict words) {
  const auto k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint64_t block = first_block + static_cast<uint64_t>(b);
    const PhiloxWords w =
        philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u, k0, k1);
    words[4 * b] = w.w[0];
    words[4 * b + 1] = w.w[1];
    words[4 * b + 2] = w.w[2];
    words[4 * b + 3] = w.w[3];
  }
}

// The top `bits` bits of a word, times scale = 2^-bits: exact in float, in [0, 1).
inline float unit_float(uint32_t word, int bits, float scale) {
  return static_cast<float>(static_cast<int32_t>(word >> (32 - bits))) * scale;
}

// 53 bits of two words, times 2^-53: exact in double, in [0, 1).
inline double unit_double(uint32_t low, uint32_t high) {
  const uint64_t bits = ((static_cast<uint64_t>(high) << 32) | low) >> 11;
  return static_cast<double>(static_cast<int64_t>(bits)) * 0x1.0p-53;
}

// log(u) for u in [2^-24, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), then log(m) = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| < 0.172, as its odd series to s^9 (the next term is below 2^-28 of the sum);
// e ln 2 in two parts (the first exact for any e here). Within a few float ulps of the true logarithm.
inline float log_unit(float u) {
  constexpr uint32_t kSqrtHalfBits = 0x3f3504f3u;  // 0.70710677f
  const uint32_t shifted = std::bit_cast<uint32_t>(u) - kSqrtHalfBits;
  const int32_t exponent = static_cast<int32_t>(shifted) >> 23;  // arithmetic shift: below sqrt(1/2), < 0
  const float m = std::bit_cast<float>((shifted & 0x007fffffu) + kSqrtHalfBits);
  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;
  const float series = 1.0f + z * (1.0f / 3 + z * (1.0f / 5 + z * (1.0f / 7 + z * (1.0f / 9))));
  const auto e = static_cast<float>(exponent);
  constexpr float kLn2High = 0.693145751953125f;     // 0x3f317200: few bits, so e * kLn2High is exact
  constexpr float kLn2Low = 1.428606765330187e-06f;  // ln 2 - kLn2High
  return e * kLn2High + (e * kLn2Low + 2.0f * s * series);
}

// sin and cos of 2 pi m / 2^24 for m < 2^24: the nearest quarter turn k (integer arithmetic) and the rest,
// theta in [-pi/4, pi/4], whose sine and cosine are Taylor polynomials to theta^9 and theta^10 (the next
// terms are below 2^-28); k mod 4 then picks and signs them.
inline void sincos_turns(int32_t m, float& sine, float& cosine) {
  const int32_t k = (m + (1 << 21)) >> 22;                        // 0 .. 4
  const auto d = static_cast<float>(m - (k << 22)) * 0x1.0p-22f;  // exact, in [-1/2, 1/2)
  const float theta = d * static_cast<float>(std::numbers::pi / 2);
  const float z = theta * theta;
  const float s = theta + theta * z * (-1.0f / 6 + z * (1.0f / 120 + z * (-1.0f / 5040 + z * (1.0f / 362880))));
  const float c = 1.0f + z * (-0.5f + z * (1.0f / 24 + z * (-1.0f / 720 + z * (1.0f / 40320 + z * (-1.0f / 3628800)))));
  const uint32_t q = static_cast<uint32_t>(k) & 3u;
  const bool swap = (q & 1u) != 0;
  const float a = swap ? c : s, b = swap ? s : c;
  sine = std::bit_cast<float>(std::bit_cast<uint32_t>(a) ^ ((q & 2u) << 30));
  cosine = std::bit_cast<float>(std::bit_cast<uint32_t>(b) ^ (((q + 1u) & 2u) << 30));
}

// IEEE half and bfloat16 bits of a float, rounding to nearest even.
inline uint16_t half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exponent = static_cast<int32_t>((x >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x200u : 0u));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const auto shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u) != 0)) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;
  return static_cast<uint16_t>(half);
}

inline uint16_t bfloat16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float half_value(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float bfloat16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// The float a value of a 16-bit dtype holds after rounding (float32: itself).
float rounded_to(ScalarType dtype, float value) {
  if (dtype == ScalarType::float16) return half_value(half_bits(value));
  if (dtype == ScalarType::bfloat16) return bfloat16_value(bfloat16_bits(value));
  return value;
}

int significand_bits(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float16: return 11;
    case ScalarType::bfloat16: return 8;
    default: return 24;
  }
}

bool is_float_kind(const Draw& draw) {
  return (draw.kind == Kind::uniform || draw.kind == Kind::normal) && draw.dtype != ScalarType::float64;
}

// Values of `blocks` blocks' words, per_block of them a block, into float (float32/16-bit uniform and
// normal draws) or double (everything else).
void float_values(const Draw& draw, int64_t blocks, const uint32_t* __restrict words, float* __restrict out) {
  if (draw.kind == Kind::uniform) {
    const int bits = significand_bits(draw.dtype);
    const float scale = std::ldexp(1.0f, -bits);
    for (int64_t j = 0; j < 4 * blocks; ++j) out[j] = unit_float(words[j], bits, scale);
    if (draw.a != 0.0 || draw.b != 1.0) {
      // PyTorch's uniform_(from, to): u (to - from) + from, a value that rounds to `to` given `from`.
      const auto range = static_cast<float>(draw.b - draw.a), low = static_cast<float>(draw.a);
      const float high = rounded_to(draw.dtype, static_cast<float>(draw.b));
      for (int64_t j = 0; j < 4 * blocks; ++j) {
        const float v = out[j] * range + low;
        out[j] = rounded_to(draw.dtype, v) == high ? low : v;
      }
    }
    return;
  }
  // Box-Muller on each word pair: (0, 1] keeps the logarithm finite.
  for (int64_t pair = 0; pair < 2 * blocks; ++pair) {
    const auto u = static_cast<float>(static_cast<int32_t>((words[2 * pair] >> 8) + 1)) * 0x1.0p-24f;
    const float radius = std::sqrt(-2.0f * log_unit(u));
    float sine = 0.0f, cosine = 0.0f;
    sincos_turns(static_cast<int32_t>(words[2 * pair + 1] >> 8), sine, cosine);
    out[2 * pair] = radius * cosine;
    out[2 * pair + 1] = radius * sine;
  }
  if (draw.a != 0.0 || draw.b != 1.0) {
    const auto mean = static_cast<float>(draw.a), std = static_cast<float>(draw.b);
    for (int64_t j = 0; j < 4 * blocks; ++j) out[j] = out[j] * std + mean;
  }
}

void double_values(const Draw& draw, int64_t blocks, const uint32_t* __restrict words, double* __restrict out) {
  switch (draw.kind) {
    case Kind::uniform:
      for (int64_t j = 0; j < 2 * blocks; ++j) {
        const double v = unit_double(words[2 * j], words[2 * j + 1]);
        out[j] = (draw.a != 0.0 || draw.b != 1.0) ? v * (draw.b - draw.a) + draw.a : v;
        if (out[j] == draw.b) out[j] = draw.a;
      }
      return;
    case Kind::normal:
      for (int64_t b = 0; b < blocks; ++b) {
        const double u = unit_double(words[4 * b], words[4 * b + 1]) + 0x1.0p-53;  // exact, (0, 1]
        const double radius = std::sqrt(-2.0 * std::log(u));
        const double angle = 2.0 * std::numbers::pi * unit_double(words[4 * b + 2], words[4 * b + 3]);
        out[2 * b] = radius * std::cos(angle);
        out[2 * b + 1] = radius * std::sin(angle);
        if (draw.a != 0.0 || draw.b != 1.0) {
          out[2 * b] = out[2 * b] * draw.b + draw.a;
          out[2 * b + 1] = out[2 * b + 1] * draw.b + draw.a;
        }
      }
      return;
    case Kind::integers: {
      // high - low may overflow int64; min: for spans beyond 2^53 the product can round up to high itself.
      const double span = static_cast<double>(draw.ihigh) - static_cast<double>(draw.ilow);
      const auto low = static_cast<double>(draw.ilow), last = static_cast<double>(draw.ihigh - 1);
      for (int64_t j = 0; j < 2 * blocks; ++j)
        out[j] = std::min(low + std::floor(unit_double(words[2 * j], words[2 * j + 1]) * span), last);
      return;
    }
    case Kind::bernoulli: {
      // A word below floor(p 2^32) (a 64-bit comparison: p = 1 gives 2^32, always).
      const auto threshold = static_cast<uint64_t>(std::floor(std::clamp(draw.a, 0.0, 1.0) * 0x1.0p32));
      for (int64_t j = 0; j < 4 * blocks; ++j) out[j] = static_cast<uint64_t>(words[j]) < threshold ? 1.0 : 0.0;
      return;
    }
  }
}

void store_floats(ScalarType dtype, const float* values, int64_t count, char* dst) {
  switch (dtype) {
    case ScalarType::float32: std::memcpy(dst, values, static_cast<size_t>(count) * 4); return;
    case ScalarType::float16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t bits = half_bits(values[i]);
        std::memcpy(dst + 2 * i, &bits, 2);
      }
      return;
    case ScalarType::bfloat16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t bits = bfloat16_bits(values[i]);
        std::memcpy(dst + 2 * i, &bits, 2);
      }
      return;
    default: throw std::logic_error("random_fill: float values for a dtype that is not float32, float16 or bfloat16");
  }
}

template <typename T>
void store_as(const double* values, int64_t count, char* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const auto typed = static_cast<T>(values[i]);
    std::memcpy(dst + static_cast<size_t>(i) * sizeof(T), &typed, sizeof(T));
  }
}

// Whole numbers (integers: within the dtype, checked by the caller), zeros and ones, or float64 values.
void store_doubles(ScalarType dtype, const double* values, int64_t count, char* dst) {
  switch (dtype) {
    case ScalarType::float64: std::memcpy(dst, values, static_cast<size_t>(count) * 8); return;
    case ScalarType::float32: store_as<float>(values, count, dst); return;
    case ScalarType::float16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t bits = half_bits(static_cast<float>(values[i]));
        std::memcpy(dst + 2 * i, &bits, 2);
      }
      return;
    case ScalarType::bfloat16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t bits = bfloat16_bits(static_cast<float>(values[i]));
        std::memcpy(dst + 2 * i, &bits, 2);
      }
      return;
    case ScalarType::int64: store_as<int64_t>(values, count, dst); return;
    case ScalarType::int32: store_as<int32_t>(values, count, dst); return;
    case ScalarType::uint8: store_as<uint8_t>(values, count, dst); return;
    case ScalarType::bool_: store_as<bool>(values, count, dst); return;
  }
}

}  // namespace

int64_t per_block(Kind kind, ScalarType dtype) {
  switch (kind) {
    case Kind::uniform:
    case Kind::normal: return dtype == ScalarType::float64 ? 2 : 4;
    case Kind::integers: return 2;
    case Kind::bernoulli: return 4;
  }
  return 1;
}

uint64_t draw_blocks(Kind kind, ScalarType dtype, int64_t n) {
  const int64_t per = per_block(kind, dtype);
  return static_cast<uint64_t>((std::max<int64_t>(n, 0) + per - 1) / per);
}

void block_words(uint64_t seed, uint64_t block, uint32_t out[4]) { philox_batch(seed, block, 1, out); }

void fill(const Draw& draw, int64_t first, int64_t count, void* dst) {
  if (count <= 0) return;
  if ((draw.kind == Kind::uniform || draw.kind == Kind::normal) && !is_floating_point(draw.dtype))
    throw std::invalid_argument("random_fill: uniform and normal draws need a floating dtype, got " +
                                std::string(scalar_type_name(draw.dtype)));
  const int64_t per = per_block(draw.kind, draw.dtype);
  const size_t width = element_size(draw.dtype);
  const bool in_float = is_float_kind(draw);
  alignas(64) uint32_t words[4 * kBatch];
  alignas(64) float floats[4 * kBatch];
  alignas(64) double doubles[4 * kBatch];
  const int64_t end = first + count;
  for (int64_t block = first / per; block * per < end; block += kBatch) {
    const int64_t blocks = std::min(kBatch, (end - block * per + per - 1) / per);
    philox_batch(draw.seed, draw.offset + static_cast<uint64_t>(block), blocks, words);
    // The batch holds elements [block * per, (block + blocks) * per); the part inside [first, end) is written.
    const int64_t from = std::max(first, block * per), to = std::min(end, (block + blocks) * per);
    const int64_t skip = from - block * per;
    char* out = static_cast<char*>(dst) + static_cast<size_t>(from - first) * width;
    if (in_float) {
      float_values(draw, blocks, words, floats);
      store_floats(draw.dtype, floats + skip, to - from, out);
    } else {
      double_values(draw, blocks, words, doubles);
      store_doubles(draw.dtype, doubles + skip, to - from, out);
    }
  }
}

}  // namespace bytegrad::random_fill
