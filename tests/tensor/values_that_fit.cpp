// Values that fit their dtype still work (the refusals are in tests/bad_inputs/scalar_rows.cpp), with the
// results PyTorch 2.11 gives for the same calls (tests/data/pytorch_probes/bad_inputs/pytorch_2_11.txt)
// and one block of PyTorch's 512-byte rounding for each small tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <span>

#include "helpers.h"
#include "bytegrad/core/checked_convert.h"
#include "bytegrad/testing/memory_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

TensorOptions sim(ScalarType dtype) { return TensorOptions{dtype, kSim}; }
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("overflows follows c10's rule at each dtype's edges") {
  using S = ScalarType;
  CHECK_FALSE(overflows(0x1.fffffep127, S::float32));  // FLT_MAX
  CHECK(overflows(1e39, S::float32));
  CHECK(overflows(-1e39, S::float32));
  CHECK_FALSE(overflows(kInf, S::float32));
  CHECK_FALSE(overflows(kNan, S::float16));
  CHECK_FALSE(overflows(65504.0, S::float16));
  CHECK(overflows(65505.0, S::float16));
  CHECK(overflows(1e39, S::bfloat16));
  CHECK_FALSE(overflows(3e38, S::bfloat16));
  CHECK_FALSE(overflows(1e300, S::float64));
  CHECK_FALSE(overflows(255.0, S::uint8));
  CHECK(overflows(256.0, S::uint8));
  CHECK_FALSE(overflows(-255.0, S::uint8));  // a negative int wraps, as a Python int does in PyTorch
  CHECK(overflows(-256.0, S::uint8));
  CHECK(overflows(-1.5, S::uint8));  // not a whole number: no wrap
  CHECK_FALSE(overflows(2147483647.0, S::int32));
  CHECK(overflows(2147483648.0, S::int32));
  CHECK_FALSE(overflows(-2147483648.0, S::int32));
  CHECK(overflows(0x1p63, S::int64));
  CHECK_FALSE(overflows(-0x1p63, S::int64));
  CHECK(overflows(kNan, S::int64));
  CHECK(overflows(-kInf, S::int32));
  CHECK_FALSE(overflows(kNan, S::bool_));
  CHECK_FALSE(overflows(2.0, S::bool_));
  CHECK(checked_convert(-1.0, S::uint8, "t") == 255.0);
  CHECK(checked_convert(2.5, S::int64, "t") == 2.5);
  CHECK(pytorch_type_name(S::int64) == "Long");
}

TEST_CASE("full, fill_ and masked_fill_ take every value that fits, with PyTorch's results") {
  fresh(kSim);
  CHECK(full({2}, 255, sim(ScalarType::uint8)).tolist() == std::vector<double>{255, 255});
  CHECK(full({2}, -1, sim(ScalarType::uint8)).tolist() == std::vector<double>{255, 255});  // PyTorch: 255
  CHECK(full({2}, -255, sim(ScalarType::uint8)).tolist() == std::vector<double>{1, 1});    // PyTorch: 1
  CHECK(full({2}, kInf, sim(ScalarType::float32)).tolist() == std::vector<double>{kInf, kInf});
  CHECK(full({2}, 65504, sim(ScalarType::float16)).tolist() == std::vector<double>{65504, 65504});
  const std::vector<double> half_nan = full({2}, kNan, sim(ScalarType::float16)).tolist();
  CHECK((std::isnan(half_nan[0]) && std::isnan(half_nan[1])));
  CHECK(full({2}, 2.5, sim(ScalarType::int64)).tolist() == std::vector<double>{2, 2});  // truncated, as PyTorch
  CHECK(full({2}, 2, sim(ScalarType::bool_)).tolist() == std::vector<double>{1, 1});    // any nonzero is true
  CHECK(full({2}, kNan, sim(ScalarType::bool_)).tolist() == std::vector<double>{1, 1});
  CHECK(full({1}, -2147483648.0, sim(ScalarType::int32)).item() == -2147483648.0);
  CHECK(full({1}, 3e38, sim(ScalarType::bfloat16)).item() > 2.9e38);

  const Tensor u8 = zeros({2}, sim(ScalarType::uint8));
  u8.fill_(-1);
  CHECK(u8.tolist() == std::vector<double>{255, 255});  // PyTorch's fill_(-1) on uint8
  const Tensor f16 = zeros({3}, sim(ScalarType::float16));
  f16.masked_fill_(tensor({1.0, 0.0, 1.0}, sim(ScalarType::bool_)), -65504);
  CHECK(f16.tolist() == std::vector<double>{-65504, 0, -65504});
  CHECK(masked_fill(u8, tensor({0.0, 1.0}, sim(ScalarType::bool_)), 7).tolist() == std::vector<double>{255, 7});
  CHECK(constant_pad_nd(u8, {1, 0}, -2).tolist() == std::vector<double>{254, 255, 255});
}

TEST_CASE("tensor() into integer dtypes takes values that fit; floating dtypes round beyond their range to inf") {
  fresh(kSim);
  CHECK(tensor({0.0, 255.0, -1.0}, sim(ScalarType::uint8)).tolist() == std::vector<double>{0, 255, 255});
  CHECK(tensor({2147483647.0, -2147483648.0}, sim(ScalarType::int32)).tolist() ==
        std::vector<double>{2147483647.0, -2147483648.0});
  CHECK(tensor({1e39}, sim(ScalarType::float32)).tolist() == std::vector<double>{kInf});  // PyTorch: inf, no error
  CHECK(tensor({1.9, -1.9}, sim(ScalarType::int64)).tolist() == std::vector<double>{1, -1});
}

TEST_CASE("scalar arithmetic wraps and overflows as PyTorch's does (it checks no scalar operand)") {
  fresh(kSim);
  const Tensor u8 = ones({2}, sim(ScalarType::uint8));
  CHECK((u8 + 300).tolist() == std::vector<double>{45, 45});  // (1 + 300) mod 256; PyTorch's 0 + 300 gives 44
  CHECK((u8 - 2).tolist() == std::vector<double>{255, 255});
  const Tensor i32 = ones({2}, sim(ScalarType::int32));
  CHECK((i32 + 0x1p40).tolist() == std::vector<double>{1, 1});  // 2^40 mod 2^32 = 0, as PyTorch
  CHECK((ones({2}, sim(ScalarType::float32)) * 1e39).tolist() == std::vector<double>{kInf, kInf});
  CHECK((ones({2}, sim(ScalarType::float16)) + 1e6).tolist() == std::vector<double>{kInf, kInf});
  // Whole numbers keep an integer tensor's dtype, as a Python int does in PyTorch.
  CHECK((i32 * 3.0).tolist() == std::vector<double>{3, 3});
  CHECK(add(i32, i32, 2.0).tolist() == std::vector<double>{3, 3});
  CHECK((tensor({1.0, 0.0}, sim(ScalarType::bool_)) * 1.0).tolist() == std::vector<double>{1, 0});
  // A bool tensor takes an integer alpha (PyTorch: bool add alpha 2 is [True]).
  const Tensor flags = tensor({1.0}, sim(ScalarType::bool_));
  CHECK(add(flags, flags, 2.0).tolist() == std::vector<double>{1});
  CHECK((flags + flags).tolist() == std::vector<double>{1});
  // A float tensor takes a fractional alpha.
  CHECK(add(ones({1}, sim(ScalarType::float32)), ones({1}, sim(ScalarType::float32)), 0.5).item() == 1.5);
}

TEST_CASE("integer pow: negative tensor exponents compute as PyTorch's (1, +-1, else 0); scalar ones are refused") {
  fresh(kSim);
  const Tensor base = tensor({1.0, 2.0, 3.0, -1.0, -1.0}, sim(ScalarType::int64));
  const Tensor exponent = tensor({-1.0, -1.0, -2.0, -1.0, -2.0}, sim(ScalarType::int64));
  CHECK(pow(base, exponent).tolist() == std::vector<double>{1, 0, 0, -1, 1});
  CHECK(pow(base, 2.0).tolist() == std::vector<double>{1, 4, 9, 1, 1});
  CHECK(pow(2.0, tensor({-1.0, 1.0}, sim(ScalarType::int64))).tolist() ==
        std::vector<double>{0, 2});  // PyTorch: [0, 2]
  CHECK_THROWS_AS(pow(base, -1.0), std::invalid_argument);
}

TEST_CASE("randint takes bounds at the dtype's edges; rand and randn take every floating dtype") {
  fresh(kSim);
  for (double v : randint(0, 2, {64}, sim(ScalarType::bool_)).tolist()) CHECK((v == 0 || v == 1));
  for (double v : randint(0, 256, {64}, sim(ScalarType::uint8)).tolist()) CHECK((v >= 0 && v <= 255));
  for (double v : randint(-2147483648LL, 2147483648LL, {64}, sim(ScalarType::int32)).tolist())
    CHECK((v >= -2147483648.0 && v <= 2147483647.0));
  for (double v : randint(-5, -2, {64}, sim(ScalarType::int64)).tolist()) CHECK((v >= -5 && v <= -3));
  for (ScalarType t : {ScalarType::float32, ScalarType::float64, ScalarType::float16, ScalarType::bfloat16}) {
    CHECK(rand({3}, sim(t)).dtype() == t);
    CHECK(randn({3}, sim(t)).dtype() == t);
  }
}

TEST_CASE("an integer arange truncates its bounds first, as PyTorch's int64 accumulation does") {
  fresh(kSim);
  CHECK(arange(0.0, 2.5, 1.0, sim(ScalarType::int64)).tolist() == std::vector<double>{0, 1});  // PyTorch: [0, 1]
  CHECK(arange(0.0, 300.0, 100.0, sim(ScalarType::uint8)).tolist() == std::vector<double>{0, 100, 200});
  CHECK(arange(0.0, 256.0, 1.0, sim(ScalarType::uint8)).numel() == 256);
  CHECK(arange(0.0, 2.5, 1.0, sim(ScalarType::float32)).tolist() == std::vector<double>{0, 1, 2});
}

TEST_CASE("host buffers of exactly the tensor's size are read, from a vector, a span or a pointer and a count") {
  fresh(kSim);
  const Tensor t = zeros({3, 4}, sim(ScalarType::float32));
  MemoryProbe p(kSim);
  std::vector<double> values(12);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  fill_from_host(t, values);
  CHECK(t.tolist() == values);
  const double raw[12] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  fill_from_host(t.t(), std::span<const double>(raw, 12));  // a transposed target: written row-major through it
  CHECK(t.t().tolist() == std::vector<double>(raw, raw + 12));
  // The contiguous target allocates nothing; the transposed one stages through one 3*4*4 = 48-byte tensor
  // (one 512-byte block), freed on return.
  CHECK(p.allocated_delta_is(0));
  CHECK(p.peak_allocated_delta_is(512));
}
