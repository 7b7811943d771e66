// cumsum, sort, topk, flip and one_hot: values and gradients by hand, PyTorch's node names and dtypes, the
// errors, and the allocation events bytegrad models (sizes worked out beside each; PyTorch's recorded events
// are held by tests/programs/op_events.cpp once the probe's cases are recorded). The table-driven gradcheck
// (tests/autograd/op_table.cpp) checks the gradients in float64.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using bytegrad::testing::allocation_events;
using bytegrad::testing::AllocationEvents;

namespace {

Tensor leaf(std::vector<double> values, Shape shape) {
  return from_vector(values, shape, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
}
Tensor ints(std::vector<int64_t> values, ScalarType dtype = ScalarType::int64, Device d = kSim) {
  const auto n = static_cast<int64_t>(values.size());
  return from_vector(values, {n}, TensorOptions{dtype, d});
}

}  // namespace

TEST_CASE("cumsum: running sums, int64 for integers, gradient the reversed running sum") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor rows = cumsum(x, 1);
  CHECK(rows.grad_fn_name() == "CumsumBackward0");
  CHECK(rows.tolist() == std::vector<double>{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x, 0).tolist() == std::vector<double>{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(x, -1).tolist() == rows.tolist());
  // d/dx_j of sum_i w_i * y_i with y_i = x_1 + ... + x_i is w_j + ... + w_n: weights 1, 10, 100 per row.
  (rows * from_vector(std::vector<double>{1, 10, 100, 1, 10, 100}, {2, 3}, TensorOptions{ScalarType::float32, kSim}))
      .sum()
      .backward();
  CHECK(x.grad().tolist() == std::vector<double>{111, 110, 100, 111, 110, 100});

  const Tensor counts = cumsum(ints({1, 2, 3}, ScalarType::int32), 0);
  CHECK(counts.dtype() == ScalarType::int64);  // PyTorch's rule for integer inputs
  CHECK(counts.tolist() == std::vector<double>{1, 3, 6});
  const Tensor flags =
      cumsum(from_vector(std::vector<double>{1, 0, 1}, {3}, TensorOptions{ScalarType::bool_, kSim}), 0);
  CHECK(flags.dtype() == ScalarType::int64);
  CHECK(flags.tolist() == std::vector<double>{1, 1, 2});
  CHECK_THROWS_WITH(cumsum(x, 2), doctest::Contains("out of range"));
}

TEST_CASE("cumsum events: output, int64 copy of an integer input, CUB scratch for a 1-d scan") {
  const Device d = kSim;
  const Tensor x = randn({1024, 1024}, TensorOptions{ScalarType::float32, d});
  // 1024 * 1024 * 4 = 4194304: the output alone.
  CHECK(allocation_events(d, [&] { (void)cumsum(x, 1); }) == AllocationEvents{{"alloc", 4194304}, {"free", 4194304}});
  const Tensor i32 = randint(0, 5, {64, 1000}, TensorOptions{ScalarType::int32, d});
  // The int64 output 64 * 1000 * 8 = 512000, then the int64 copy of the input (512000), freed first.
  CHECK(allocation_events(d, [&] { (void)cumsum(i32, 1); }) ==
        AllocationEvents{{"alloc", 512000}, {"alloc", 512000}, {"free", 512000}, {"free", 512000}});
  const Tensor line = randn({1 << 20}, TensorOptions{ScalarType::float32, d});
  // 2^20 * 4 = 4194304 out; CUB's storage: ceil(2^20 / 1920) = 547 tiles, (547 + 32) * 8 = 4632 bytes,
  // rounded up to 4864, one more 256-byte part, plus 255 = 5375 (PyTorch's recording has 5375).
  CHECK(allocation_events(d, [&] { (void)cumsum(line, 0); }) ==
        AllocationEvents{{"alloc", 4194304}, {"alloc", 5375}, {"free", 5375}, {"free", 4194304}});
}

TEST_CASE("cumsum backward events: flip, cumsum, flip; the first two freed at the end of the expression") {
  const Device d = kSim;
  Tensor x = randn({1024, 1024}, TensorOptions{ScalarType::float32, d}).requires_grad_();
  const Tensor y = cumsum(x, 1);
  const Tensor g = ones_like(y);
  // Each 4194304: flip(grad), its cumsum, the second flip (the gradient, kept by x.grad); then the
  // expression's temporaries go, the cumsum before the first flip.
  CHECK(allocation_events(d, [&] { y.backward(g); }) ==
        AllocationEvents{
            {"alloc", 4194304}, {"alloc", 4194304}, {"alloc", 4194304}, {"free", 4194304}, {"free", 4194304}});
}

TEST_CASE("sort and topk: values, int64 indices, stable ties, NaN above numbers, gradients scattered back") {
  Tensor x = leaf({3, 1, 2, 1}, {4});
  auto [values, indices] = sort(x);
  CHECK(values.grad_fn_name() == "SortBackward0");
  CHECK(indices.dtype() == ScalarType::int64);
  CHECK(values.tolist() == std::vector<double>{1, 1, 2, 3});
  CHECK(indices.tolist() == std::vector<double>{1, 3, 2, 0});  // equal ones keep their order
  (values * from_vector(std::vector<double>{1, 2, 3, 4}, {4}, TensorOptions{ScalarType::float32, kSim}))
      .sum()
      .backward();
  CHECK(x.grad().tolist() == std::vector<double>{4, 1, 3, 2});

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor with_nan = from_vector(std::vector<double>{2, nan, -1}, {3}, TensorOptions{ScalarType::float32, kSim});
  CHECK(sort(with_nan).second.tolist() == std::vector<double>{2, 0, 1});
  CHECK(sort(with_nan, 0, true).second.tolist() == std::vector<double>{1, 0, 2});

  Tensor m = leaf({5, 9, 1, 7, 0, 3}, {2, 3});
  auto [top, at] = topk(m, 2, 1);
  CHECK(top.grad_fn_name() == "TopkBackward0");
  CHECK(top.tolist() == std::vector<double>{9, 5, 7, 3});
  CHECK(at.tolist() == std::vector<double>{1, 0, 0, 2});
  CHECK(topk(m, 1, 0, false).first.tolist() == std::vector<double>{5, 0, 1});
  top.sum().backward();
  CHECK(m.grad().tolist() == std::vector<double>{1, 1, 0, 1, 0, 1});

  CHECK_THROWS_AS(topk(m, 4, 1), std::invalid_argument);  // k larger than the dimension
  CHECK_THROWS_AS(topk(m, -1, 1), std::invalid_argument);
  CHECK_THROWS_WITH(sort(m, 2), doctest::Contains("out of range"));
  CHECK_THROWS_AS(sort(from_vector(std::vector<double>{1}, {1}, TensorOptions{ScalarType::bool_, kSim})),
                  std::invalid_argument);  // PyTorch's CUDA sort refuses bool
}

TEST_CASE("sort and topk events: values then indices; backward zeros then the scatter in place") {
  const Device d = kSim;
  Tensor x = randn({1024, 1000}, TensorOptions{ScalarType::float32, d}).requires_grad_();
  Tensor values;
  // values 1024 * 1000 * 4 = 4096000, indices 1024 * 1000 * 8 = 8192000 (kept: the node saves them), and
  // the int64 arange the indices are filled from, 1000 * 8 = 8000, freed.
  CHECK(allocation_events(d, [&] { values = sort(x, 1).first; }) ==
        AllocationEvents{{"alloc", 4096000}, {"alloc", 8192000}, {"alloc", 8000}, {"free", 8000}});
  const Tensor g = ones_like(values);
  // zeros of x's shape (4096000, the gradient); the indices are freed with the node after backward.
  CHECK(allocation_events(d, [&] { values.backward(g); }) == AllocationEvents{{"alloc", 4096000}, {"free", 8192000}});

  Tensor y = randn({64, 1000}, TensorOptions{ScalarType::float32, d}).requires_grad_();
  // values 64 * 5 * 4 = 1280, indices 64 * 5 * 8 = 2560; the discarded pair lets go of the indices (its
  // second member, destroyed first) as the node releases them, then of the values.
  CHECK(allocation_events(d, [&] { (void)topk(y, 5, 1); }) ==
        AllocationEvents{{"alloc", 1280}, {"alloc", 2560}, {"free", 2560}, {"free", 1280}});
}

TEST_CASE("flip: one reversed copy; no autograd node") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, TensorOptions{ScalarType::float32, kSim});
  CHECK(flip(x, 1).tolist() == std::vector<double>{3, 2, 1, 6, 5, 4});
  CHECK(flip(x, 0).tolist() == std::vector<double>{4, 5, 6, 1, 2, 3});
  CHECK(flip(x.t(), 0).tolist() == std::vector<double>{3, 6, 2, 5, 1, 4});
  const Tensor w = leaf({1, 2}, {2});
  CHECK_THROWS(flip(w, 0));  // no_grad row: refused where a graph would be needed
  NoGradGuard no_grad;
  CHECK(flip(w, 0).tolist() == std::vector<double>{2, 1});
}

TEST_CASE("one_hot: int64 out, -1 infers the count, values out of range refused by name") {
  const Tensor labels = ints({0, 2, 1});
  const Tensor hot = one_hot(labels, 4);
  CHECK(hot.dtype() == ScalarType::int64);
  CHECK(hot.sizes() == Shape{3, 4});
  CHECK(hot.tolist() == std::vector<double>{1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0});
  CHECK(one_hot(labels).sizes() == Shape{3, 3});
  CHECK(one_hot(ints({1, 0, 1, 1}).view({2, 2}), 2).sizes() == Shape{2, 2, 2});
  CHECK_THROWS_WITH_AS(one_hot(labels, 2), doctest::Contains("class value 2 is not smaller than num_classes (2)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(one_hot(ints({1, -1}), 3), doctest::Contains("non-negative, got -1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(one_hot(ints({1}, ScalarType::int32), 3), doctest::Contains("must be int64"),
                       std::invalid_argument);
  CHECK_THROWS_AS(one_hot(ints({}), -1), std::invalid_argument);
  CHECK(one_hot(ints({}), 5).sizes() == Shape{0, 5});
  CHECK_THROWS_WITH_AS(one_hot(ints({0, 1}, ScalarType::int64, kMeta)), doctest::Contains("meta"),
                       std::invalid_argument);
  CHECK(one_hot(ints({0, 1}, ScalarType::int64, kMeta), 7).sizes() == Shape{2, 7});
}

TEST_CASE("one_hot events: zeros only; with -1, the 0-d max first, freed after .item()") {
  const Device d = kSim;
  const Tensor labels = ints({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}, ScalarType::int64, d);
  // 12 * 10 * 8 = 960 bytes of zeros, scattered in place.
  CHECK(allocation_events(d, [&] { (void)one_hot(labels, 10); }) == AllocationEvents{{"alloc", 960}, {"free", 960}});
  // max(): a 0-d int64 (8 bytes), read by .item() and freed, then the zeros.
  CHECK(allocation_events(d, [&] { (void)one_hot(labels); }) ==
        AllocationEvents{{"alloc", 8}, {"free", 8}, {"alloc", 960}, {"free", 960}});
}
