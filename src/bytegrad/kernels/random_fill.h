// The random factories' values (rand, randn, randint, the nn::init fills, dropout's mask), drawn on the host
// from Philox4x32-10 (philox.h) straight into a buffer of the tensor's dtype.
//
// A draw is keyed by the generator's seed; its counters start at the call's offset (a block index: the
// generator hands each call the next range of blocks, draw_blocks of them). Element i of a draw reads block
// offset + i / per_block, where per_block is how many elements one block's four 32-bit words make:
//   uniform    float32, float16, bfloat16: 4 (word i % 4; its top 24, 11 or 8 bits, times 2^-bits: exact, in
//              [0, 1), as PyTorch's uniform takes the dtype's digits); float64: 2 (words 2k, 2k + 1: 53 bits)
//   normal     float32, float16, bfloat16: 4 (Box-Muller in float on the word pairs (0, 1) and (2, 3): cos to
//              the even element, sin to the odd; 16-bit dtypes round the float); float64: 2 (Box-Muller in
//              double on two 53-bit uniforms, words 0-1 and 2-3)
//   integers   2 (a 53-bit uniform from words 2k, 2k + 1: low + floor(u * (high - low)), at most high - 1)
//   bernoulli  4 (word i % 4 below floor(p * 2^32): 1, else 0)
// So an element's value depends only on (seed, offset, i): any chunking and any thread count give the same
// values. The float math is plain IEEE arithmetic (no library calls, no contraction: random_fill.cpp is
// compiled with -ffp-contract=off), so every build and every processor gives the same bits; float64's
// normals call the C library's log, sin and cos.
#pragma once

#include <cstdint>

#include "bytegrad/core/scalar_type.h"

namespace bytegrad::random_fill {

enum class Kind : uint8_t { uniform, normal, integers, bernoulli };

// One call's draw: its key, first block and the distribution's parameters (uniform: [a, b); normal: mean a,
// standard deviation b; integers: [low, high) as a, b are exact below 2^53, read from ilow, ihigh;
// bernoulli: probability a of a 1).
struct Draw {
  Kind kind = Kind::uniform;
  ScalarType dtype = ScalarType::float32;
  uint64_t seed = 0;
  uint64_t offset = 0;
  double a = 0.0, b = 1.0;
  int64_t ilow = 0, ihigh = 1;
};

// How many elements one counter block gives this draw (the table above).
int64_t per_block(Kind kind, ScalarType dtype);
// The blocks a draw of n elements takes: ceil(n / per_block).
uint64_t draw_blocks(Kind kind, ScalarType dtype, int64_t n);

// Writes elements [first, first + count) of the draw, contiguous, in draw.dtype, to dst (count elements).
void fill(const Draw& draw, int64_t first, int64_t count, void* dst);

// The four words of block `block` of the key `seed` (the counter is the 64-bit block index in words 0 and
// 1, zero in 2 and 3).
void block_words(uint64_t seed, uint64_t block, uint32_t out[4]);

}  // namespace bytegrad::random_fill
