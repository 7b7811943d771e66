// norm (linalg_vector_norm, ord 2), var and std: values against float64 references computed here, gradients
// against central finite differences in float64 on cpu and sim, what their nodes save, the temporaries
// their backward makes (PyTorch's norm_backward / var_backward / std_backward expressions), and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/autograd/engine.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

TensorOptions f64(Device d) { return TensorOptions{ScalarType::float64, d}; }

Tensor r(const Shape& s, Device d = kCpu) { return randn(s, f64(d)); }

struct Moments {
  double mean = 0, sum_sq = 0, m2 = 0;
  int64_t n = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  m.n = static_cast<int64_t>(v.size());
  for (double x : v) m.mean += x, m.sum_sq += x * x;
  m.mean /= static_cast<double>(m.n);
  for (double x : v) m.m2 += (x - m.mean) * (x - m.mean);
  return m;
}

using Events = AllocationEvents;

Events backward_events(const Tensor& loss) {
  return allocation_events(kSim, [&] { loss.backward(); });
}

}  // namespace

TEST_CASE("norm, var and std values match float64 references") {
  manual_seed(11);
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    Tensor x = r({5, 7}, d);
    const std::vector<double> all = x.tolist();
    const Moments m = moments(all);
    CHECK(norm(x).item() == doctest::Approx(std::sqrt(m.sum_sq)).epsilon(1e-14));
    CHECK(x.var().item() == doctest::Approx(m.m2 / 34.0).epsilon(1e-13));
    CHECK(var(x, {}, false, 0.0).item() == doctest::Approx(m.m2 / 35.0).epsilon(1e-13));
    CHECK(x.std().item() == doctest::Approx(std::sqrt(m.m2 / 34.0)).epsilon(1e-13));
    // Over dim 0 of the transposed view (each row of x), keepdim.
    Tensor by_row_norm = norm(x.t(), {0}, true);
    Tensor by_row_var = var(x.t(), {0}, true);
    CHECK(by_row_norm.sizes() == Shape{1, 5});
    CHECK(by_row_var.sizes() == Shape{1, 5});
    const std::vector<double> nr = by_row_norm.tolist(), vr = by_row_var.tolist();
    for (int64_t i = 0; i < 5; ++i) {
      std::vector<double> row(all.begin() + i * 7, all.begin() + (i + 1) * 7);
      const Moments mr = moments(row);
      CHECK(nr[i] == doctest::Approx(std::sqrt(mr.sum_sq)).epsilon(1e-14));
      CHECK(vr[i] == doctest::Approx(mr.m2 / 6.0).epsilon(1e-13));
    }
    // Several dims, negative dims: norm over (0, 2) of a (2, 3, 4) tensor.
    Tensor y = r({2, 3, 4}, d);
    const std::vector<double> yv = y.tolist();
    const std::vector<double> n02 = norm(y, {0, -1}).tolist();
    const std::vector<double> s02 = y.std({-1, 0}).tolist();
    REQUIRE(n02.size() == 3);
    for (int64_t j = 0; j < 3; ++j) {
      std::vector<double> part;
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t k = 0; k < 4; ++k) part.push_back(yv[(i * 3 + j) * 4 + k]);
      const Moments mp = moments(part);
      CHECK(n02[j] == doctest::Approx(std::sqrt(mp.sum_sq)).epsilon(1e-14));
      CHECK(s02[j] == doctest::Approx(std::sqrt(mp.m2 / 7.0)).epsilon(1e-13));
    }
    // float32: accumulated without loss for a long reduction with a large mean (Welford; a naive
    // E[x^2] - E[x]^2 in float would lose every digit here).
    Tensor big = add(rand({100000}, TensorOptions{ScalarType::float32, d}), 1000.0);
    const std::vector<double> bv = big.tolist();
    const Moments mb = moments(bv);
    CHECK(big.var().item() == doctest::Approx(mb.m2 / 99999.0).epsilon(1e-6));
    CHECK(big.norm().item() == doctest::Approx(std::sqrt(mb.sum_sq)).epsilon(1e-6));
  }
}

TEST_CASE("norm, var and std edge cases follow PyTorch") {
  // The 2-norm does not overflow or underflow in its squares.
  Tensor huge = from_vector({3e200, 4e200}, {2}, f64(kCpu));
  CHECK(norm(huge).item() == doctest::Approx(5e200));
  Tensor tiny = from_vector({3e-200, 4e-200}, {2}, f64(kCpu));
  CHECK(norm(tiny).item() == doctest::Approx(5e-200));
  Tensor with_inf = from_vector({1.0, -std::numeric_limits<double>::infinity()}, {2}, f64(kCpu));
  CHECK(std::isinf(norm(with_inf).item()));
  Tensor with_nan = from_vector({1.0, std::nan("")}, {2}, f64(kCpu));
  CHECK(std::isnan(norm(with_nan).item()));
  // Over size-1 dimensions and of a 0-d tensor the norm is abs(x), as PyTorch's 1-D shortcut.
  Tensor col = from_vector({-2.0, 3.0}, {2, 1}, f64(kCpu));
  CHECK(norm(col, {1}).tolist() == std::vector<double>{2.0, 3.0});
  CHECK(norm(from_vector({-4.0}, {}, f64(kCpu))).item() == 4.0);
  // Empty: norm 0; var NaN. One element with correction 1: NaN (0 / 0).
  CHECK(norm(zeros({0}, f64(kCpu))).item() == 0.0);
  CHECK(std::isnan(var(zeros({0}, f64(kCpu))).item()));
  CHECK(std::isnan(var(from_vector({1.5}, {1}, f64(kCpu))).item()));
  CHECK(var(from_vector({1.5}, {1}, f64(kCpu)), {}, false, 0.0).item() == 0.0);
  // keepdim and dims shapes.
  Tensor x = zeros({2, 3, 4}, f64(kCpu));
  CHECK(norm(x, {1}).sizes() == Shape{2, 4});
  CHECK(norm(x, {1}, true).sizes() == Shape{2, 1, 4});
  CHECK(var(x, {0, 2}, true).sizes() == Shape{1, 3, 1});
  CHECK(x.std({2}).sizes() == Shape{2, 3});
  CHECK(norm(x).sizes() == Shape{});
}

TEST_CASE("norm, var and std name their errors") {
  Tensor ints = zeros({3}, TensorOptions{ScalarType::int64, kCpu});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { norm(ints); }).find("norm: linalg.vector_norm expects a floating-point tensor") == 0);
  CHECK(message([&] { var(ints); }).find("var: var only supports floating-point tensors") == 0);
  CHECK(message([&] { ints.std({0}); }).find("std: std only supports floating-point tensors") == 0);
  Tensor x = zeros({2, 3}, f64(kSim));
  CHECK(message([&] { norm(x, {2}); }).find("norm: dimension 2 out of range for a 2-d tensor") == 0);
  CHECK(message([&] { var(x, {-3}); }).find("var: dimension -3 out of range for a 2-d tensor") == 0);
  CHECK(message([&] { x.std({1, -1}); }).find("std: dimension 1 appears more than once") == 0);
}

TEST_CASE("norm, var and std gradients match finite differences") {
  manual_seed(12);
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    Tensor w3 = r({3}, d), w4 = r({4}, d), w34 = r({3, 4}, d);
    check_gradients([](auto& v) { return norm(v[0]); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(norm(v[0], {1}) * w3); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(norm(v[0], {0}, true) * w4); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(norm(v[0].t(), {-1}) * w3); }, {r({4, 3}, d).t().contiguous().t()});
    check_gradients([&](auto& v) { return sum(norm(v[0], {0, 2}) * w3); }, {r({2, 3, 4}, d)});
    check_gradients([&](auto& v) { return sum(norm(v[0], {1}) * w34); }, {r({3, 1, 4}, d)});  // abs path
    check_gradients([&](auto& v) { return norm(v[0], {0}); }, {r({5}, d)});

    check_gradients([](auto& v) { return var(v[0]); }, {r({3, 4}, d)});
    check_gradients([](auto& v) { return var(v[0], {}, false, 0.0); }, {r({6}, d)});
    check_gradients([&](auto& v) { return sum(var(v[0], {1}) * w3); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(var(v[0], {0}, true) * w4); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(var(v[0].t(), {1}, false, 0.0) * w4); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(var(v[0], {0, 2}) * w3); }, {r({2, 3, 4}, d)});
    check_gradients([&](auto& v) { return var(v[0], {0}); }, {r({5}, d)});  // 1-d: grad stays 0-d

    check_gradients([](auto& v) { return v[0].std(); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(v[0].std({1}) * w3); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(v[0].std({0}, true, 0.0) * w4); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum(v[0].std({-1, 0}) * w3); }, {r({2, 3, 4}, d)});
    // Composite: a normalized vector and a standardized one.
    check_gradients([&](auto& v) { return sum(v[0] / norm(v[0], {1}, true) * w34); }, {r({3, 4}, d)});
    check_gradients([&](auto& v) { return sum((v[0] - mean(v[0], {1}, true)) / v[0].std({1}, true) * w34); },
                    {r({3, 4}, d)});
  }
}

TEST_CASE("norm, var and std save what derivatives.yaml saves") {
  fresh_sim();
  Tensor x = randn({4, 8}, TensorOptions{ScalarType::float32, kSim}).requires_grad_(true);
  {
    Tensor n = norm(x, {1});
    auto report = saved_tensors(n);
    REQUIRE(report.size() == 2);
    CHECK(report[0].node == "LinalgVectorNormBackward0");
    CHECK(report[0].name == "self");
    CHECK(report[1].name == "result");
    CHECK(report[1].sizes == Shape{4});
  }
  {
    Tensor v = x.var();
    auto report = saved_tensors(v);
    REQUIRE(report.size() == 1);
    CHECK(report[0].node == "VarBackward0");
    CHECK(report[0].name == "self");
  }
  {
    Tensor s = x.std({0}, true);
    auto report = saved_tensors(s);
    REQUIRE(report.size() == 2);
    CHECK(report[0].node == "StdBackward0");
    CHECK(report[0].name == "self");
    CHECK(report[1].name == "result");
    CHECK(report[1].sizes == Shape{1, 8});
  }
}

TEST_CASE("norm and var backward make PyTorch's temporaries in its order") {
  fresh_sim();
  Tensor x = randn({1024, 512}, TensorOptions{ScalarType::float32, kSim}).requires_grad_(true);
  {
    // norm_backward: grad * (self / norm).masked_fill_(norm == 0, 0): self / norm, then the bool mask,
    // then the product (x's gradient); the mask and the quotient die at the end of the expression.
    Tensor loss = sum(norm(x, {1}));
    const Events events = backward_events(loss);
    const Events expected = {
        {"alloc", 4},  // the root gradient
        {"alloc", 2097152}, {"alloc", 1024}, {"alloc", 2097152}, {"free", 1024},
        {"free", 2097152},  {"free", 4096},  // the saved result (1024 floats), released after the node
        {"free", 4}};
    CHECK(events == expected);
  }
  x.set_grad(Tensor());
  {
    // var_backward over a dim: (2 / (n - 1)) * grad * (self - self.mean(dims, true)). GCC (which builds
    // PyTorch's wheels too) evaluates the right operand first: the mean (1024 floats), self - mean, then the
    // scaled grad (1024 floats), then the product (x's gradient); the temporaries die in reverse order.
    Tensor loss = sum(var(x, {1}));
    const Events events = backward_events(loss);
    const Events expected = {
        {"alloc", 4},   {"alloc", 4096},   {"alloc", 2097152}, {"alloc", 4096}, {"alloc", 2097152},
        {"free", 4096}, {"free", 2097152}, {"free", 4096},     {"free", 4}};  // var saves only self (x): nothing else
                                                                              // to release
    CHECK(events == expected);
  }
  x.set_grad(Tensor());
  CHECK(allocated() == 1024 * 512 * 4);
}
