// nll_loss and cross_entropy with class weights (PyTorch's nll_loss_forward with weight): values and
// gradients by hand, gradients against finite differences in float64, label smoothing with weights against a
// hand-written formula, the allocations of a non-contiguous weight on sim (arithmetic beside each check; the
// recorded events are the probe's "nll_loss weight" and "cross_entropy weight" cases), and errors.
#include <doctest/doctest.h>

#include <cmath>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

TensorOptions f64() { return TensorOptions{ScalarType::float64, kCpu}; }
Tensor targets(std::vector<int64_t> values) {
  const auto n = static_cast<int64_t>(values.size());
  return from_vector(values, {n}, TensorOptions{ScalarType::int64, kCpu});
}

}  // namespace

TEST_CASE("nll_loss with class weights: values, total weight and gradients by hand") {
  // log_probs rows, targets [0, 2, 1], weights [1, 2, 3]: -w[t] * x[i][t] = 1 * 1, 3 * 2.5, 2 * 5
  Tensor x = from_vector(std::vector<double>{-1, -2, -3, -0.5, -1.5, -2.5, -4, -5, -6}, {3, 3}, f64());
  const Tensor t = targets({0, 2, 1});
  const Tensor w = from_vector(std::vector<double>{1, 2, 3}, {3}, f64());
  CHECK(nll_loss(x, t, Reduction::none, -100, w).tolist() == std::vector<double>{1, 7.5, 10});
  CHECK(nll_loss(x, t, Reduction::sum, -100, w).item() == doctest::Approx(18.5));
  // mean divides by the targets' weights, 1 + 3 + 2 = 6
  CHECK(nll_loss(x, t, {.weight = w}).item() == doctest::Approx(18.5 / 6));
  // ignoring class 2 drops row 1: (1 + 10) / (1 + 2)
  CHECK(nll_loss(x, t, {.weight = w, .ignore_index = 2}).item() == doctest::Approx(11.0 / 3));
  // 1-d input, 0-d target
  CHECK(nll_loss(x.select(0, 1), targets({2}).view({}), Reduction::sum, -100, w).item() == doctest::Approx(7.5));
  // gradients: -w[t] at each target (sum), divided by 6 (mean)
  x.requires_grad_(true);
  nll_loss(x, t, Reduction::sum, -100, w).backward();
  CHECK(x.grad().tolist() == std::vector<double>{-1, 0, 0, 0, 0, -3, 0, -2, 0});
  x.grad().zero_();
  nll_loss(x, t, {.weight = w}).backward();
  const std::vector<double> mean_grad = x.grad().tolist();
  CHECK(mean_grad[5] == doctest::Approx(-3.0 / 6));
  CHECK(mean_grad[7] == doctest::Approx(-2.0 / 6));
}

TEST_CASE("cross_entropy with class weights is nll_loss of log_softmax with them; gradients match finite differences") {
  manual_seed(41);
  const Tensor t = targets({1, 0, 3, 3, 2});
  const Tensor w = rand({4}, f64()) + 0.5;
  for (const Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    CAPTURE(static_cast<int>(red));
    const Tensor logits = randn({5, 4}, f64());
    const std::vector<double> ce = cross_entropy(logits, t, {.weight = w, .reduction = red}).tolist();
    const std::vector<double> nll = nll_loss(log_softmax(logits, 1), t, red, -100, w).tolist();
    REQUIRE(ce.size() == nll.size());
    for (size_t i = 0; i < ce.size(); ++i) CHECK(ce[i] == doctest::Approx(nll[i]).epsilon(1e-12));
    const Tensor out_weights = red == Reduction::none ? randn({5}, f64()) : ones({}, f64());
    check_gradients(
        [&](auto& v) {
          return sum(cross_entropy(v[0], t, {.weight = w, .ignore_index = 3, .reduction = red}) * out_weights);
        },
        {randn({5, 4}, f64())});
  }
}

TEST_CASE("cross_entropy with class weights and label smoothing (sum, none) against the formula by hand") {
  manual_seed(42);
  const Tensor logits = randn({4, 3}, f64());
  const Tensor t = targets({2, 0, 1, 2});
  const Tensor w = from_vector(std::vector<double>{0.5, 1.0, 2.0}, {3}, f64());
  const double s = 0.2;
  // per row i not ignored: (1 - s) * (-w[t] * lp[i][t]) + (s / C) * -(sum over c of w[c] * lp[i][c])
  const std::vector<double> lp = log_softmax(logits, 1).tolist();
  const std::vector<int64_t> tv = {2, 0, 1, 2};
  const std::vector<double> wv = {0.5, 1.0, 2.0};
  std::vector<double> rows;
  for (size_t i = 0; i < 4; ++i) {
    double smooth = 0;
    for (size_t c = 0; c < 3; ++c) smooth -= wv[c] * lp[i * 3 + c];
    const auto target = static_cast<size_t>(tv[i]);
    rows.push_back(tv[i] == 1 ? 0.0 : (1 - s) * -wv[target] * lp[i * 3 + target] + s / 3 * smooth);  // class 1 ignored
  }
  const std::vector<double> none =
      cross_entropy(logits, t, {.weight = w, .ignore_index = 1, .reduction = Reduction::none, .label_smoothing = s})
          .tolist();
  for (size_t i = 0; i < 4; ++i) CHECK(none[i] == doctest::Approx(rows[i]).epsilon(1e-12));
  const double total = rows[0] + rows[1] + rows[2] + rows[3];
  CHECK(cross_entropy(logits, t, {.weight = w, .ignore_index = 1, .reduction = Reduction::sum, .label_smoothing = s})
            .item() == doctest::Approx(total).epsilon(1e-12));
  check_gradients(
      [&](auto& v) { return cross_entropy(v[0], t, {.weight = w, .reduction = Reduction::sum, .label_smoothing = s}); },
      {randn({4, 3}, f64())});
}

TEST_CASE("nll_loss: a non-contiguous weight is copied after the outputs and freed on return (sim)") {
  fresh(kSim);
  const TensorOptions f32{ScalarType::float32, kSim};
  const Tensor log_probs = randn({64, 10}, f32);
  const Tensor t = randint(0, 10, {64}, TensorOptions{ScalarType::int64, kSim});
  const Tensor every_other = rand({20}, f32).slice(0, 0, 20, 2);  // 10 weights, stride 2
  NoGradGuard no_grad;
  // output (0-d, 4 bytes), total_weight (4), the weight's contiguous copy (10 * 4 = 40), freed on return, then
  // total_weight (no graph keeps it)
  CHECK(allocation_events(kSim, [&] {
          const Tensor loss = nll_loss(log_probs, t, Reduction::mean, -100, every_other);
        }) == AllocationEvents{{"alloc", 4}, {"alloc", 4}, {"alloc", 40}, {"free", 40}, {"free", 4}, {"free", 4}});
}

TEST_CASE("class weights: clear errors") {
  const Tensor x = randn({3, 4}, f64());
  const Tensor t = targets({0, 1, 2});
  CHECK_THROWS_WITH_AS(nll_loss(x, t, Reduction::mean, -100, ones({3}, f64())),
                       doctest::Contains("weight tensor should be defined either for all 4 classes"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(nll_loss(x, t, Reduction::mean, -100, ones({4}, TensorOptions{ScalarType::float32, kCpu})),
                       doctest::Contains("nll_loss"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(nll_loss(x, t, Reduction::mean, -100, ones({4}, f64()).requires_grad_()),
                       doctest::Contains("not differentiable with respect to argument 'weight'"),
                       std::invalid_argument);
  // weights, label smoothing and mean: computed (divided by the kept targets' weights); weights of 1 divide by
  // the count of kept targets, as the unweighted loss does
  CHECK(cross_entropy(x, t, {.weight = ones({4}, f64()), .label_smoothing = 0.1}).item<double>() ==
        doctest::Approx(cross_entropy(x, t, {.label_smoothing = 0.1}).item<double>()).epsilon(1e-12));
}
