// Forward values against float64 references computed here, and gradients against float64 central
// differences of those references.
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr int64_t kIgnore = -100;

// -log_softmax(x)[i][t_i] combined by `reduction`, in double (the reference of cross_entropy).
double reference_cross_entropy(const std::vector<double>& x, int64_t n, int64_t c, const std::vector<int64_t>& t,
                               Reduction reduction, std::vector<double>* per_row = nullptr) {
  double total = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] == kIgnore) {
      if (per_row) per_row->push_back(0.0);
      continue;
    }
    double m = -INFINITY;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, x[i * c + j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - m);
    const double term = -(x[i * c + t[i]] - m - std::log(s));
    if (per_row) per_row->push_back(term);
    total += term;
    count += 1;
  }
  return reduction == Reduction::mean ? total / count : total;
}

Tensor targets(const std::vector<int64_t>& t, Device d) {
  std::vector<double> v(t.begin(), t.end());
  return from_vector(v, {static_cast<int64_t>(t.size())}, TensorOptions{ScalarType::int64, d});
}

}  // namespace

TEST_CASE("nll_loss forward: none, mean and sum match the float64 reference, ignore_index skipped") {
  fresh(kSim);
  manual_seed(1);
  const int64_t n = 8, c = 5;
  const std::vector<int64_t> t = {0, 4, kIgnore, 2, 3, 1, kIgnore, 4};
  const Tensor log_probs = log_softmax(randn({n, c}, TensorOptions{ScalarType::float32, kSim}), 1);
  const std::vector<double> lp = log_probs.tolist();
  double total = 0, count = 0;
  std::vector<double> rows;
  for (int64_t i = 0; i < n; ++i) {
    const double v = t[i] == kIgnore ? 0.0 : -lp[i * c + t[i]];
    rows.push_back(v);
    if (t[i] != kIgnore) total += v, count += 1;
  }
  const Tensor target = targets(t, kSim);
  CHECK(max_abs_diff(nll_loss(log_probs, target, Reduction::none).tolist(), rows) < 1e-6);
  CHECK(nll_loss(log_probs, target, Reduction::sum).item() == doctest::Approx(total).epsilon(1e-6));
  CHECK(nll_loss(log_probs, target, Reduction::mean).item() == doctest::Approx(total / count).epsilon(1e-6));
  // A (C) input with a 0-d target: one row.
  const Tensor one = nll_loss(log_probs[1], scalar_tensor(4, TensorOptions{ScalarType::int64, kSim}));
  CHECK(one.dim() == 0);
  CHECK(one.item() == doctest::Approx(-lp[1 * c + 4]).epsilon(1e-6));
  // Every target ignored: mean is 0 / 0 = NaN, sum is 0 (PyTorch's results).
  const Tensor ignored = targets({kIgnore, kIgnore}, kSim);
  CHECK(std::isnan(nll_loss(log_probs.slice(0, 0, 2), ignored).item()));
  CHECK(nll_loss(log_probs.slice(0, 0, 2), ignored, Reduction::sum).item() == 0.0);
}

TEST_CASE("cross_entropy forward and gradient match float64 finite differences") {
  fresh(kSim);
  manual_seed(2);
  const int64_t n = 6, c = 4;
  const std::vector<int64_t> t = {3, 0, kIgnore, 1, 2, 2};
  for (Reduction reduction : {Reduction::mean, Reduction::sum}) {
    const Tensor logits = randn({n, c}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
    const std::vector<double> x = logits.tolist();
    const Tensor loss = cross_entropy(logits, targets(t, kSim), reduction);
    CHECK(loss.grad_fn_name() == "NllLossBackward0");
    CHECK(loss.item() == doctest::Approx(reference_cross_entropy(x, n, c, t, reduction)).epsilon(1e-12));
    loss.backward();
    const auto numeric = finite_difference(
        [&](const std::vector<double>& v) { return reference_cross_entropy(v, n, c, t, reduction); }, x);
    CHECK(max_abs_diff(logits.grad().tolist(), numeric) < 1e-8);
    // The ignored row gets no gradient at all.
    for (int64_t j = 0; j < c; ++j) CHECK(logits.grad().tolist()[2 * c + j] == 0.0);
  }
  // reduction none, weighted by an arbitrary upstream gradient (sum(loss * w)).
  const Tensor logits = randn({n, c}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
  const std::vector<double> x = logits.tolist();
  const std::vector<double> w = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75};
  const Tensor weights = from_vector(w, {n}, TensorOptions{ScalarType::float64, kSim});
  const Tensor rows = cross_entropy(logits, targets(t, kSim), Reduction::none);
  std::vector<double> reference_rows;
  reference_cross_entropy(x, n, c, t, Reduction::none, &reference_rows);
  CHECK(max_abs_diff(rows.tolist(), reference_rows) < 1e-12);
  sum(rows * weights).backward();
  const auto numeric = finite_difference(
      [&](const std::vector<double>& v) {
        std::vector<double> r;
        reference_cross_entropy(v, n, c, t, Reduction::none, &r);
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += r[i] * w[i];
        return s;
      },
      x);
  CHECK(max_abs_diff(logits.grad().tolist(), numeric) < 1e-8);
}

TEST_CASE("cross_entropy of a 1-d logits vector uses dim 0") {
  fresh(kSim);
  const Tensor logits = tensor({1.0, 2.0, 0.5}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
  const Tensor loss = cross_entropy(logits, scalar_tensor(1, TensorOptions{ScalarType::int64, kSim}));
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5));
  CHECK(loss.item() == doctest::Approx(lse - 2.0).epsilon(1e-12));
  loss.backward();
  const auto g = logits.grad().tolist();
  CHECK(g[0] == doctest::Approx(std::exp(1.0 - lse)).epsilon(1e-12));
  CHECK(g[1] == doctest::Approx(std::exp(2.0 - lse) - 1.0).epsilon(1e-12));
}

TEST_CASE("mse_loss forward and both gradients match float64 finite differences") {
  fresh(kSim);
  manual_seed(3);
  for (Reduction reduction : {Reduction::mean, Reduction::sum}) {
    const Tensor input = randn({3, 5}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
    const Tensor target = randn({3, 5}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
    const std::vector<double> x = input.tolist(), y = target.tolist();
    auto reference = [&](const std::vector<double>& a, const std::vector<double>& b) {
      double s = 0;
      for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
      return reduction == Reduction::mean ? s / static_cast<double>(a.size()) : s;
    };
    const Tensor loss = mse_loss(input, target, reduction);
    CHECK(loss.grad_fn_name() == "MseLossBackward0");
    CHECK(loss.item() == doctest::Approx(reference(x, y)).epsilon(1e-12));
    loss.backward();
    CHECK(max_abs_diff(input.grad().tolist(),
                       finite_difference([&](const std::vector<double>& v) { return reference(v, y); }, x)) < 1e-7);
    CHECK(max_abs_diff(target.grad().tolist(),
                       finite_difference([&](const std::vector<double>& v) { return reference(x, v); }, y)) < 1e-7);
  }
  // none: elementwise squares.
  const Tensor a = tensor({1.0, -2.0, 3.0}, TensorOptions{ScalarType::float32, kSim});
  const Tensor b = tensor({0.5, 1.0, 3.0}, TensorOptions{ScalarType::float32, kSim});
  CHECK(mse_loss(a, b, Reduction::none).tolist() == std::vector<double>{0.25, 9.0, 0.0});
}
