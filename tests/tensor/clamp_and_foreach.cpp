// reciprocal, clamp (and its min/max/in-place forms), vector_norm with ord 1 and inf, and the _foreach_*
// ops clip_grad uses: values against plain references, the refusals, and device memory on sim as arithmetic
// from PyTorch's rules (each size worked out beside its check).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/fresh_device.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorOptions f32(Device d) { return TensorOptions{ScalarType::float32, d}; }

bool same(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) return false;
  return true;
}

}  // namespace

TEST_CASE("reciprocal: 1 / x, with 1 / 0 = inf, on cpu and sim") {
  for (Device d : {kCpu, kSim}) {
    const Tensor x = from_vector({2.0, -0.5, 0.0, -0.0, kInf}, {5}, f32(d));
    CHECK(same(reciprocal(x).tolist(), {0.5, -2.0, kInf, -kInf, 0.0}));
    CHECK(same(x.reciprocal().tolist(), {0.5, -2.0, kInf, -kInf, 0.0}));
  }
  CHECK_THROWS_WITH_AS(reciprocal(zeros({2}, TensorOptions{ScalarType::int64, kCpu})), doctest::Contains("reciprocal"),
                       std::invalid_argument);
}

TEST_CASE("clamp, clamp_min, clamp_max: values, NaN kept, min > max gives max, in place") {
  for (Device d : {kCpu, kSim}) {
    const Tensor x = from_vector({-2.0, -0.5, 0.0, 0.75, 3.0, kNaN}, {6}, f32(d));
    CHECK(same(clamp(x, -1.0, 1.0).tolist(), {-1.0, -0.5, 0.0, 0.75, 1.0, kNaN}));
    CHECK(same(clamp(x, std::nullopt, 0.5).tolist(), {-2.0, -0.5, 0.0, 0.5, 0.5, kNaN}));
    CHECK(same(x.clamp(-0.25).tolist(), {-0.25, -0.25, 0.0, 0.75, 3.0, kNaN}));
    CHECK(same(clamp_min(x, 0.0).tolist(), {0.0, 0.0, 0.0, 0.75, 3.0, kNaN}));
    CHECK(same(clamp_max(x, 0.0).tolist(), {-2.0, -0.5, 0.0, 0.0, 0.0, kNaN}));
    CHECK(same(clamp(x, 2.0, 1.0).tolist(), {1.0, 1.0, 1.0, 1.0, 1.0, kNaN}));  // min > max: max everywhere
    const Tensor y = x.clone();
    CHECK(&y.clamp_(-1.0, 1.0) == &y);
    CHECK(same(y.tolist(), {-1.0, -0.5, 0.0, 0.75, 1.0, kNaN}));
    y.clamp_min_(0.5);
    y.clamp_max_(0.625);
    CHECK(same(y.tolist(), {0.5, 0.5, 0.5, 0.625, 0.625, kNaN}));
  }
  // Integer tensors: whole-number bounds; uint8 takes a negative whole number wrapped (-4 is 252), as
  // PyTorch's Scalar::to does.
  const Tensor i = from_vector({1, 5, 9}, {3}, TensorOptions{ScalarType::int64, kCpu});
  CHECK(clamp(i, 2.0, 8.0).tolist() == std::vector<double>{2, 5, 8});
  CHECK(clamp(i, 2.0, 8.0).dtype() == ScalarType::int64);
  const Tensor u = from_vector({1, 5, 253}, {3}, TensorOptions{ScalarType::uint8, kCpu});
  CHECK(clamp_min(u, -4.0).tolist() == std::vector<double>{252, 252, 253});
}

TEST_CASE("clamp: refusals name the problem") {
  const Tensor x = zeros({3}, f32(kSim));
  CHECK_THROWS_WITH_AS(clamp(x, std::nullopt, std::nullopt), doctest::Contains("at least one of 'min' or 'max'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(x.clamp_(std::nullopt), doctest::Contains("clamp_: at least one"), std::invalid_argument);
  const Tensor i = zeros({3}, TensorOptions{ScalarType::int32, kSim});
  CHECK_THROWS_WITH_AS(clamp_min(i, 0.5), doctest::Contains("does not promote integers"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(clamp(i, 0.0, 1e10), doctest::Contains("cannot be converted to type int32"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(clamp(zeros({2}, TensorOptions{ScalarType::bool_, kSim}), 0.0, 1.0), doctest::Contains("bool"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(clamp(zeros({2}, TensorOptions{ScalarType::float16, kSim}), 0.0, 1e6),
                       doctest::Contains("cannot be converted to type float16"), std::invalid_argument);
}

TEST_CASE("clamp and reciprocal allocate one output, their in-place forms nothing (sim)") {
  FreshDevice fresh(kSim);
  const Tensor x = randn({1000}, f32(kSim));
  Tensor y;
  CHECK(allocation_events(kSim, [&] { y = clamp(x, -1.0, 1.0); }) == AllocationEvents{{"alloc", 4000}});  // 1000 * 4
  CHECK(allocation_events(kSim, [&] { y = clamp_min(x, 0.0); }) == AllocationEvents{{"alloc", 4000}, {"free", 4000}});
  CHECK(allocation_events(kSim, [&] { y = reciprocal(x); }) == AllocationEvents{{"alloc", 4000}, {"free", 4000}});
  CHECK(allocation_events(kSim, [&] {
          x.clamp_(-1.0, 1.0);
          x.clamp_min_(0.0);
          clamp_max_(x, 0.5);
        }).empty());
}

TEST_CASE("vector_norm: ord 1 and inf, values and refusals") {
  for (Device d : {kCpu, kSim}) {
    const Tensor x = from_vector({3.0, -4.0, 1.0, -7.0}, {2, 2}, f32(d));
    CHECK(vector_norm(x, 1.0).item() == 15.0);
    CHECK(vector_norm(x, kInf).item() == 7.0);
    CHECK(vector_norm(x, 2.0).item() == doctest::Approx(std::sqrt(75.0)));
    CHECK(vector_norm(x, kInf, {1}).tolist() == std::vector<double>{4.0, 7.0});
    CHECK(vector_norm(x, 1.0, {0}, true).sizes() == Shape{1, 2});
    CHECK(std::isnan(vector_norm(from_vector({1.0, kNaN}, {2}, f32(d)), kInf).item()));
  }
  CHECK_THROWS_WITH_AS(vector_norm(zeros({3}, f32(kSim)), 3.0), doctest::Contains("ord=3 is not supported"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(vector_norm(zeros({0}, f32(kSim)), kInf), doctest::Contains("inf norm"), std::invalid_argument);
}

TEST_CASE("foreach_norm: values on cpu and sim; PyTorch's multi-tensor allocations on sim and meta") {
  for (Device d : {kCpu, kSim}) {
    const std::vector<Tensor> xs = {from_vector({3.0, 4.0}, {2}, f32(d)), from_vector({-1.0, 2.0, -2.0}, {3}, f32(d))};
    const std::vector<Tensor> two = foreach_norm(xs);
    CHECK(two[0].item() == doctest::Approx(5.0));
    CHECK(two[1].item() == doctest::Approx(3.0));
    CHECK(foreach_norm(xs, 1.0)[1].item() == 5.0);
    CHECK(foreach_norm(xs, kInf)[0].item() == 4.0);
    CHECK(two[0].dim() == 0);
  }
  for (Device d : {kSim, kMeta}) {
    FreshDevice fresh(d);
    // 200000 elements: ceil(200000 / 65536) = 4 chunks; two tensors: 2 * 4 * 4 bytes = 32 of float32 partials,
    // then two 0-d results (4 bytes each); the partials freed.
    const std::vector<Tensor> xs = {zeros({200000}, f32(d)), zeros({10}, f32(d))};
    std::vector<Tensor> norms;
    CHECK(allocation_events(d, [&] { norms = foreach_norm(xs, kInf); }) ==
          AllocationEvents{{"alloc", 32}, {"alloc", 4}, {"alloc", 4}, {"free", 32}});
    norms.clear();
    // bfloat16 tensors: the partials in float32 (2 * 4 * 4 = 32), the results in bfloat16 (2 bytes each).
    const std::vector<Tensor> bf = {zeros({200000}, TensorOptions{ScalarType::bfloat16, d}),
                                    zeros({10}, TensorOptions{ScalarType::bfloat16, d})};
    CHECK(allocation_events(d, [&] { norms = foreach_norm(bf); }) ==
          AllocationEvents{{"alloc", 32}, {"alloc", 2}, {"alloc", 2}, {"free", 32}});
  }
  CHECK_THROWS_WITH_AS(foreach_norm({}), doctest::Contains("at least one tensor"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(foreach_norm({zeros({2}, f32(kSim))}, 0.5), doctest::Contains("ord=0.5 is not supported"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(foreach_norm({zeros({2}, TensorOptions{ScalarType::int64, kSim})}),
                       doctest::Contains("not floating point"), std::invalid_argument);
}

TEST_CASE("foreach_mul_ and foreach_clamp_min_/max_: in place, nothing allocated") {
  FreshDevice fresh(kSim);
  const std::vector<Tensor> xs = {from_vector({1.0, -2.0}, {2}, f32(kSim)), from_vector({4.0}, {1}, f32(kSim))};
  const Tensor half = scalar_tensor(0.5, f32(kSim));
  CHECK(allocation_events(kSim, [&] {
          foreach_mul_(xs, half);
          foreach_clamp_min_(xs, -0.5);
          foreach_clamp_max_(xs, 1.5);
        }).empty());
  CHECK(xs[0].tolist() == std::vector<double>{0.5, -0.5});
  CHECK(xs[1].tolist() == std::vector<double>{1.5});
  CHECK_THROWS_WITH_AS(foreach_mul_(xs, zeros({2}, f32(kSim))), doctest::Contains("must be 0-d"),
                       std::invalid_argument);
}
