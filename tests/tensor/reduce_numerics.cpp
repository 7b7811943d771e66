// Reductions and (log_)softmax against float64 references, on contiguous and transposed inputs.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr double kFloat32Tolerance = 1e-5;

// Reference reduction of a (rows, cols) matrix's values along dim (0 or 1).
std::vector<double> reduce_matrix(const std::vector<double>& v, int64_t rows, int64_t cols, int dim,
                                  const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  const int64_t outer = dim == 0 ? cols : rows, inner = dim == 0 ? rows : cols;
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<double> line;
    for (int64_t i = 0; i < inner; ++i) line.push_back(dim == 0 ? v[i * cols + o] : v[o * cols + i]);
    out.push_back(f(line));
  }
  return out;
}

double total(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("sum, mean, max, min and argmax match float64 references") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(10);
    // A transposed (37, 23) view of a (23, 37) tensor, and a long contiguous vector.
    const Tensor x = randn({23, 37}, bytegrad::device(device)).t();
    const auto v = x.tolist();
    CHECK(relative_error(sum(x), {total(v)}) < kFloat32Tolerance);
    CHECK(sum(x).dim() == 0);
    CHECK(relative_error(mean(x), {total(v) / static_cast<double>(v.size())}) < kFloat32Tolerance);
    CHECK(max(x).item() == *std::max_element(v.begin(), v.end()));
    CHECK(min(x).item() == *std::min_element(v.begin(), v.end()));
    CHECK(argmax(x).item() == static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin()));
    CHECK(argmin(x).item() == static_cast<double>(std::min_element(v.begin(), v.end()) - v.begin()));

    for (int dim : {0, 1}) {
      CAPTURE(dim);
      const auto sums = reduce_matrix(v, 37, 23, dim, total);
      const Tensor s = sum(x, {dim});
      CHECK(s.sizes() == Shape{dim == 0 ? 23 : 37});
      CHECK(relative_error(s, sums) < kFloat32Tolerance);
      const Tensor kept = sum(x, {dim}, /*keepdim=*/true);
      CHECK(kept.sizes() == (dim == 0 ? Shape{1, 23} : Shape{37, 1}));
      CHECK(relative_error(mean(x, {dim}), reduce_matrix(v, 37, 23, dim, [](const std::vector<double>& l) {
                             return total(l) / static_cast<double>(l.size());
                           })) < kFloat32Tolerance);
      const ValuesIndices best = max(x, dim);
      CHECK(best.values.tolist() == reduce_matrix(v, 37, 23, dim, [](const std::vector<double>& l) {
              return *std::max_element(l.begin(), l.end());
            }));
      const auto where_best = reduce_matrix(v, 37, 23, dim, [](const std::vector<double>& l) {
        return static_cast<double>(std::max_element(l.begin(), l.end()) - l.begin());
      });
      CHECK(best.indices.dtype() == ScalarType::int64);
      CHECK(best.indices.tolist() == where_best);
      CHECK(argmax(x, dim).tolist() == where_best);
      CHECK(min(x, dim, true).values.sizes() == (dim == 0 ? Shape{1, 23} : Shape{37, 1}));
    }
    CHECK(relative_error(sum(x, {0, 1}), {total(v)}) < kFloat32Tolerance);

    const Tensor long_vector = randn({100000}, bytegrad::device(device));
    CHECK(relative_error(sum(long_vector), {total(long_vector.tolist())}) < kFloat32Tolerance);
  }
}

TEST_CASE("integer and bool sums are int64") {
  const Tensor ints = tensor({1, 2, 3}, TensorOptions{ScalarType::int32, kSim});
  CHECK(sum(ints).dtype() == ScalarType::int64);
  CHECK(sum(ints).item() == 6);
  const Tensor flags = tensor({1, 0, 1, 1}, TensorOptions{ScalarType::bool_, kSim});
  CHECK(sum(flags).item() == 3);
  CHECK(prod(tensor({2, 3, 4}, bytegrad::device(kSim))).item() == 24);
  CHECK(max(tensor({1, 7, 3}, TensorOptions{ScalarType::float16, kSim})).item() == 7);
}

TEST_CASE("softmax and log_softmax match float64 references") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(11);
    const Tensor x = randn({4, 6, 5}, bytegrad::device(device)) * 3;
    const auto v = x.tolist();
    for (int64_t dim : {0, 1, 2, -1}) {
      CAPTURE(dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      const Shape shape{4, 6, 5};
      std::vector<double> want(v.size()), want_log(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        auto index = unravel(static_cast<int64_t>(i), shape);
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < shape[d]; ++j) {
          index[d] = j;
          m = std::max(m, v[(index[0] * 6 + index[1]) * 5 + index[2]]);
        }
        for (int64_t j = 0; j < shape[d]; ++j) {
          index[d] = j;
          s += std::exp(v[(index[0] * 6 + index[1]) * 5 + index[2]] - m);
        }
        want[i] = std::exp(v[i] - m) / s;
        want_log[i] = v[i] - m - std::log(s);
      }
      CHECK(relative_error(softmax(x, dim), want) < kFloat32Tolerance);
      CHECK(relative_error(log_softmax(x, dim), want_log) < kFloat32Tolerance);
    }
    // A transposed input.
    const Tensor t = x.transpose(0, 2);
    CHECK(relative_error(softmax(t, -1), softmax(t.contiguous(), -1).tolist()) < 1e-7);
  }
}

TEST_CASE("softmax_backward matches the analytic gradient") {
  manual_seed(12);
  const Tensor x = randn({3, 7}, bytegrad::device(kSim));
  const Tensor g = randn({3, 7}, bytegrad::device(kSim));
  const Tensor y = softmax(x, 1);
  const auto vy = y.tolist(), vg = g.tolist();
  std::vector<double> want(vy.size()), want_log(vy.size());
  const Tensor ly = log_softmax(x, 1);
  const auto vly = ly.tolist();
  for (int r = 0; r < 3; ++r) {
    double dot = 0, gsum = 0;
    for (int c = 0; c < 7; ++c) dot += vg[r * 7 + c] * vy[r * 7 + c], gsum += vg[r * 7 + c];
    for (int c = 0; c < 7; ++c) {
      want[r * 7 + c] = vy[r * 7 + c] * (vg[r * 7 + c] - dot);
      want_log[r * 7 + c] = vg[r * 7 + c] - std::exp(vly[r * 7 + c]) * gsum;
    }
  }
  CHECK(relative_error(softmax_backward(g, y, 1), want) < kFloat32Tolerance);
  CHECK(relative_error(softmax_backward(g, ly, 1, /*log=*/true), want_log) < kFloat32Tolerance);
}
