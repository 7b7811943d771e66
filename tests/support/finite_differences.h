// Gradients against central finite differences in float64, and the error measure they are held to.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::testing {

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// Central differences of a scalar function of the values `x`, in float64.
inline std::vector<double> finite_difference(const std::function<double(const std::vector<double>&)>& f,
                                             std::vector<double> x, double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f(x);
    x[i] = saved - h;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// Compares autograd's gradient of scalar f at each input with central finite differences in float64.
inline void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                            double tolerance = 1e-6) {
  for (Tensor& x : inputs) x.requires_grad_(true);
  Tensor out = f(inputs);
  REQUIRE(out.numel() == 1);
  out.backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    CAPTURE(k);
    const Tensor& x = inputs[k];
    REQUIRE(x.grad().defined());
    std::vector<double> analytic = x.grad().tolist();
    std::vector<double> values = x.tolist();
    for (size_t i = 0; i < values.size(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::fabs(values[i]));
      auto evaluate = [&](double v) {
        NoGradGuard no_grad;
        std::vector<double> shifted = values;
        shifted[i] = v;
        std::vector<Tensor> args = inputs;
        args[k] = from_vector(shifted, x.sizes(), TensorOptions{x.dtype(), x.device()});
        return f(args).item();
      };
      const double numeric = (evaluate(values[i] + h) - evaluate(values[i] - h)) / (2 * h);
      CAPTURE(i);
      CHECK(analytic[i] == doctest::Approx(numeric).epsilon(tolerance).scale(1.0));
    }
  }
}

}  // namespace bytegrad::testing
