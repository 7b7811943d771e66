// The float64 reference for attention tests on cpu and sim (tests/nn/sdpa.cpp, tests/nn/sdpa_flash.cpp): the
// math composition on the same values, and a closeness check relative to the reference's largest value.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "bytegrad/tensor/ops.h"

namespace bytegrad::testing {

// out, and the gradients of sum(out * w) with respect to q, k and v, flattened.
struct AttentionReference {
  std::vector<double> out, dq, dk, dv;
};

inline AttentionReference attention_math_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w,
                                                   bool causal, std::optional<double> scale) {
  Tensor q64 = q.to(kCpu).to(ScalarType::float64).detach(), k64 = k.to(kCpu).to(ScalarType::float64).detach(),
         v64 = v.to(kCpu).to(ScalarType::float64).detach();
  for (Tensor* t : {&q64, &k64, &v64}) t->requires_grad_(true);
  const Tensor out = scaled_dot_product_attention_math(q64, k64, v64, causal, scale);
  sum(out * w.to(kCpu).to(ScalarType::float64)).backward();
  return {out.tolist(), q64.grad().tolist(), k64.grad().tolist(), v64.grad().tolist()};
}

// Every |got - want| within tolerance * max(1, the largest |want|).
inline void check_close_to_reference(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                                     const char* what) {
  REQUIRE(got.size() == want.size());
  double scale = 0, worst = 0;
  for (double x : want) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  INFO(what << ": largest difference " << worst << " against values up to " << scale);
  CHECK(worst <= tolerance * std::max(1.0, scale));
}

}  // namespace bytegrad::testing
