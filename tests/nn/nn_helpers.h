// Helpers of the nn module tests (on top of the autograd tests' helpers).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bytegrad/nn/module.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

namespace bytegrad::testing {

inline TensorOptions f64(Device d = kCpu) { return TensorOptions{ScalarType::float64, d}; }

// Autograd's gradient of the scalar loss() with respect to every parameter of the module against central
// finite differences in float64: each element is perturbed in place (fill_from_host, under no_grad) and
// restored. (check_gradients covers tensors passed as inputs; parameters live in the module.)
inline void check_parameter_gradients(nn::Module& module, const std::function<Tensor()>& loss,
                                      double tolerance = 1e-6) {
  module.zero_grad();
  Tensor out = loss();
  REQUIRE(out.numel() == 1);
  out.backward();
  for (const auto& [name, p] : module.named_parameters()) {
    CAPTURE(name);
    REQUIRE(p.grad().defined());
    const std::vector<double> analytic = p.grad().tolist();
    const std::vector<double> values = p.tolist();
    for (size_t i = 0; i < values.size(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::fabs(values[i]));
      auto evaluate = [&](double v) {
        NoGradGuard no_grad;
        std::vector<double> shifted = values;
        shifted[i] = v;
        fill_from_host(p, shifted);
        return loss().item();
      };
      const double numeric = (evaluate(values[i] + h) - evaluate(values[i] - h)) / (2 * h);
      fill_from_host(p, values);
      CAPTURE(i);
      CHECK(analytic[i] == doctest::Approx(numeric).epsilon(tolerance).scale(1.0));
    }
  }
}

}  // namespace bytegrad::testing
