// The process generator (tensor.h, kernels/random_fill.h): Philox4x32-10 against its published known-answer
// vectors, and the factories' values against formulas written here from those words: which counter block
// and word gives each element, uniforms as exact multiples of 2^-bits, Box-Muller normals checked against the
// same formula in double. Values depend on (seed, offset, index) only: not on chunks, threads or devices.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <sstream>
#include <vector>

#include "bytegrad/kernels/parallel.h"
#include "bytegrad/kernels/philox.h"
#include "bytegrad/tensor/random.h"
#include "bytegrad/tensor/tensor.h"

using namespace bytegrad;

namespace {

// Word `word` of counter block `block` of key `seed` (the counter is the block's index in words 0 and 1).
uint32_t word_at(uint64_t seed, uint64_t block, int word) {
  const PhiloxWords w = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0,
                                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return w.w[word];
}

// A float32 normal as the same Box-Muller gives it in double: element i of a draw starting at `offset`.
double normal_reference(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t block = offset + static_cast<uint64_t>(i / 4);
  const int pair = static_cast<int>(i % 4) / 2;
  const double u = static_cast<double>((word_at(seed, block, 2 * pair) >> 8) + 1) * 0x1.0p-24;
  const double t = static_cast<double>(word_at(seed, block, 2 * pair + 1) >> 8) * 0x1.0p-24;
  const double radius = std::sqrt(-2.0 * std::log(u)), angle = 2.0 * std::numbers::pi * t;
  return i % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle);
}

double unit53(uint32_t low, uint32_t high) {
  return static_cast<double>(((static_cast<uint64_t>(high) << 32) | low) >> 11) * 0x1.0p-53;
}

const TensorOptions kHost{ScalarType::float32, kCpu};

}  // namespace

TEST_CASE("Philox4x32-10 gives Random123's known answers") {
  // Random123's kat_vectors, philox4x32 10: counter (4 words), key (2 words), expected output (4 words).
  const PhiloxWords zero = philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(zero.w[0] == 0x6627e8d5u);
  CHECK(zero.w[1] == 0xe169c58du);
  CHECK(zero.w[2] == 0xbc57ac4cu);
  CHECK(zero.w[3] == 0x9b00dbd8u);
  const PhiloxWords ones = philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  CHECK(ones.w[0] == 0x408f276du);
  CHECK(ones.w[1] == 0x41c83b0eu);
  CHECK(ones.w[2] == 0xa20bc7c6u);
  CHECK(ones.w[3] == 0x6d5451fdu);
  // The digits of pi.
  const PhiloxWords pi = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(pi.w[0] == 0xd16cfe09u);
  CHECK(pi.w[1] == 0x94fdccebu);
  CHECK(pi.w[2] == 0x5001e420u);
  CHECK(pi.w[3] == 0x24126ea1u);
}

TEST_CASE("rand and randn: element i from block offset + i / 4, each call taking the next blocks") {
  constexpr uint64_t seed = 42;
  manual_seed(seed);
  CHECK(get_rng_state().engine == "philox4x32_10 42 0");
  const std::vector<double> u = rand({10}, kHost).tolist();  // blocks 0 .. 2
  CHECK(get_rng_state().engine == "philox4x32_10 42 3");
  for (int64_t i = 0; i < 10; ++i)  // the top 24 bits times 2^-24: exact
    CHECK(u[static_cast<size_t>(i)] ==
          static_cast<double>(word_at(seed, i / 4, static_cast<int>(i % 4)) >> 8) * 0x1.0p-24);
  const std::vector<double> z = randn({7}, kHost).tolist();  // blocks 3 and 4
  CHECK(get_rng_state().engine == "philox4x32_10 42 5");
  for (int64_t i = 0; i < 7; ++i)
    CHECK(z[static_cast<size_t>(i)] == doctest::Approx(normal_reference(seed, 3, i)).epsilon(1e-6));
  // float64: two elements a block, 53 bits each.
  const std::vector<double> d = rand({3}, TensorOptions{ScalarType::float64, kCpu}).tolist();  // blocks 5, 6
  CHECK(d[0] == unit53(word_at(seed, 5, 0), word_at(seed, 5, 1)));
  CHECK(d[1] == unit53(word_at(seed, 5, 2), word_at(seed, 5, 3)));
  CHECK(d[2] == unit53(word_at(seed, 6, 0), word_at(seed, 6, 1)));
  const double n64 = randn({1}, TensorOptions{ScalarType::float64, kCpu}).item();  // block 7
  const double radius = std::sqrt(-2.0 * std::log(unit53(word_at(seed, 7, 0), word_at(seed, 7, 1)) + 0x1.0p-53));
  CHECK(n64 ==
        doctest::Approx(radius * std::cos(2.0 * std::numbers::pi * unit53(word_at(seed, 7, 2), word_at(seed, 7, 3))))
            .epsilon(1e-14));
  // The 16-bit dtypes: their own digits (8 for bfloat16, 11 for float16), exact multiples in [0, 1).
  manual_seed(seed);
  const std::vector<double> b = rand({4}, TensorOptions{ScalarType::bfloat16, kCpu}).tolist();
  const std::vector<double> h = rand({4}, TensorOptions{ScalarType::float16, kCpu}).tolist();
  for (int i = 0; i < 4; ++i) {
    CHECK(b[static_cast<size_t>(i)] == static_cast<double>(word_at(seed, 0, i) >> 24) * 0x1.0p-8);
    CHECK(h[static_cast<size_t>(i)] == static_cast<double>(word_at(seed, 1, i) >> 21) * 0x1.0p-11);
  }
}

TEST_CASE("every float32 normal of a long draw is the double formula's, rounded to float") {
  // The fill computes Box-Muller in float with its own log, sin and cos (no library calls, so every build gives
  // the same bits); here each of 65536 values is held to the same formula in double, within a few float32 units
  // in the last place of the value (plus a small absolute part for values near zero, where sin and cos lose
  // relative accuracy to their arguments' rounding).
  manual_seed(42);
  const std::vector<double> many = randn({65536}, kHost).tolist();
  double worst = 0;
  for (int64_t i = 0; i < 65536; ++i) {
    const double reference = normal_reference(42, 0, i);
    const double error = std::fabs(many[static_cast<size_t>(i)] - reference) / (std::fabs(reference) + 0.01);
    worst = std::max(worst, error);
  }
  MESSAGE("worst relative error ", worst);
  CHECK(worst < 8 * 0x1.0p-24);
}

TEST_CASE("a draw is the same in any chunking, at any thread count, on cpu and sim") {
  // Over a million elements: two staging chunks, each split across the threads.
  const int64_t n = (int64_t{1} << 20) + 4099;
  const int threads = get_num_threads();
  set_num_threads(1);
  manual_seed(7);
  const std::vector<double> one = randn({n}, kHost).tolist();
  set_num_threads(2);
  manual_seed(7);
  const std::vector<double> two = randn({n}, kHost).tolist();
  manual_seed(7);
  const std::vector<double> sim = randn({n}, TensorOptions{ScalarType::float32, kSim}).tolist();
  set_num_threads(threads);
  CHECK(one == two);
  CHECK(one == sim);
  for (const int64_t i :
       {int64_t{0}, (int64_t{1} << 16) - 1, int64_t{1} << 16, (int64_t{1} << 20) - 1, int64_t{1} << 20, n - 1})
    CHECK(one[static_cast<size_t>(i)] == doctest::Approx(normal_reference(7, 0, i)).epsilon(1e-6));
  // The moments of a million normals, within five standard errors: mean 0 and variance 1 (standard errors
  // 0.001 and 0.0014), and the two-sided tail beyond 3 (0.0027, standard error 0.00005).
  double sum = 0, squares = 0;
  int64_t beyond3 = 0;
  for (const double v : one) {
    sum += v;
    squares += v * v;
    beyond3 += std::fabs(v) > 3.0 ? 1 : 0;
  }
  const double mean = sum / static_cast<double>(n), variance = squares / static_cast<double>(n) - mean * mean;
  CHECK(std::fabs(mean) < 0.005);
  CHECK(std::fabs(variance - 1.0) < 0.007);
  CHECK(static_cast<double>(beyond3) / static_cast<double>(n) == doctest::Approx(0.0027).epsilon(0.1));
}

TEST_CASE("randint, uniform_fill_, normal_fill_ and bernoulli_fill_ from the counters") {
  manual_seed(5);
  const std::vector<double> r = randint(-3, 10, {5}, TensorOptions{ScalarType::int64, kCpu}).tolist();
  for (int64_t i = 0; i < 5; ++i) {  // two elements a block: low + floor(u (high - low))
    const auto block = static_cast<uint64_t>(i / 2);
    const int word = 2 * static_cast<int>(i % 2);
    CHECK(r[static_cast<size_t>(i)] ==
          -3 + std::floor(unit53(word_at(5, block, word), word_at(5, block, word + 1)) * 13));
  }
  // uniform_ in bfloat16 over [-1, 1): never 1 (a value rounding to the upper bound gives the lower one).
  const Tensor w = empty({4096}, TensorOptions{ScalarType::bfloat16, kCpu});
  uniform_fill_(w, -1.0, 1.0);
  for (const double v : w.tolist()) CHECK((v >= -1.0 && v < 1.0));
  const Tensor g = empty({100000}, kHost);
  normal_fill_(g, 3.0, 0.5);
  CHECK(std::fabs(g.mean().item() - 3.0) < 0.008);  // five standard errors: 5 * 0.5 / sqrt(100000)
  const Tensor mask = empty({100000}, TensorOptions{ScalarType::bool_, kCpu});
  bernoulli_fill_(mask, 0.25);
  double ones = 0;
  for (const double v : mask.tolist()) ones += v;
  CHECK(std::fabs(ones / 100000 - 0.25) < 0.007);  // five standard errors: 5 * sqrt(0.25 * 0.75 / 100000)
  bernoulli_fill_(mask, 1.0);
  for (const double v : mask.tolist()) CHECK(v == 1.0);
  CHECK_THROWS_WITH_AS(bernoulli_fill_(mask, 1.5), doctest::Contains("p must be in [0, 1]"), std::invalid_argument);
  // A strided tensor is filled through a contiguous temporary: its every element written.
  const Tensor wide = zeros({8, 6}, kHost);
  uniform_fill_(wide.transpose(0, 1), 2.0, 3.0);
  for (const double v : wide.tolist()) CHECK((v >= 2.0 && v < 3.0));
}

TEST_CASE("the state: seed and offset as text; another engine's state is refused by name") {
  manual_seed(3);
  (void)rand({9}, kHost);  // 3 blocks
  const RngState state = get_rng_state();
  CHECK(state.engine == "philox4x32_10 3 3");
  const std::vector<double> next = randn({6}, kHost).tolist();
  set_rng_state(state);
  CHECK(randn({6}, kHost).tolist() == next);
  // What get_rng_state returned before Philox: a mt19937_64 dump.
  std::ostringstream old;
  old << std::mt19937_64(3);
  CHECK_THROWS_WITH_AS(set_rng_state(RngState{old.str()}), doctest::Contains("mt19937_64"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(set_rng_state(RngState{"philox4x32_10 3"}), doctest::Contains("SEED OFFSET"),
                       std::invalid_argument);
  CHECK_THROWS_AS(set_rng_state(RngState{"philox4x32_10 3 3 extra"}), std::invalid_argument);
  // A Generator's state likewise.
  Generator gen(9);
  (void)gen.random64();
  CHECK(gen.get_state() == "philox4x32_10 9 1");
  CHECK_THROWS_WITH_AS(gen.set_state("9 " + old.str()), doctest::Contains("mt19937_64"), std::invalid_argument);
  // random_uniform / random_normal: one block each.
  manual_seed(3);
  const double u = random_uniform();
  CHECK(u == unit53(word_at(3, 0, 0), word_at(3, 0, 1)));
  (void)random_normal();
  CHECK(get_rng_state().engine == "philox4x32_10 3 2");
}
