// Elementwise ops against float64 references on random inputs, on cpu and sim, including broadcast and
// transposed (non-contiguous) operands.
#include <cmath>
#include <numbers>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr double kFloat32Tolerance = 1e-5;

double gelu_reference(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }

}  // namespace

TEST_CASE("binary ops with broadcasting match a float64 reference") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(1);
    const Tensor a = randn({4, 1, 5}, bytegrad::device(device));
    const Tensor b = randn({3, 5}, bytegrad::device(device));
    const Shape out{4, 3, 5};
    CHECK(relative_error(add(a, b), reference_binary(a, b, out, [](double x, double y) { return x + y; })) <
          kFloat32Tolerance);
    CHECK(relative_error(add(a, b, 2.5), reference_binary(a, b, out, [](double x, double y) { return x + 2.5 * y; })) <
          kFloat32Tolerance);
    CHECK(relative_error(sub(a, b, 0.5), reference_binary(a, b, out, [](double x, double y) { return x - 0.5 * y; })) <
          kFloat32Tolerance);
    CHECK(relative_error(a * b, reference_binary(a, b, out, [](double x, double y) { return x * y; })) <
          kFloat32Tolerance);
    const Tensor positive = abs(b) + 0.5;
    CHECK(relative_error(a / positive, reference_binary(a, positive, out, [](double x, double y) { return x / y; })) <
          kFloat32Tolerance);
    CHECK(relative_error(pow(positive, a), reference_binary(positive, a, out, [](double x, double y) {
                           return std::pow(x, y);
                         })) < kFloat32Tolerance);
    CHECK(relative_error(maximum(a, b),
                         reference_binary(a, b, out, [](double x, double y) { return std::max(x, y); })) == 0);
    CHECK(relative_error(minimum(a, b),
                         reference_binary(a, b, out, [](double x, double y) { return std::min(x, y); })) == 0);

    // Transposed operands: (5, 4).t() is a (4, 5) view with strides (1, 4).
    const Tensor t = randn({5, 4}, bytegrad::device(device)).t();
    const Tensor c = randn({4, 5}, bytegrad::device(device));
    CHECK_FALSE(t.is_contiguous());
    CHECK(relative_error(t + c, reference_binary(t, c, {4, 5}, [](double x, double y) { return x + y; })) <
          kFloat32Tolerance);
    CHECK(relative_error(t * t, reference_binary(t, t, {4, 5}, [](double x, double y) { return x * y; })) <
          kFloat32Tolerance);
  }
}

TEST_CASE("scalar ops match a float64 reference") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(2);
    const Tensor x = randn({6, 7}, bytegrad::device(device));
    const Tensor positive = abs(x) + 0.25;
    CHECK(relative_error(x + 1, reference_unary(x, [](double v) { return v + 1; })) < kFloat32Tolerance);
    CHECK(relative_error(2 - x, reference_unary(x, [](double v) { return 2 - v; })) < kFloat32Tolerance);
    CHECK(relative_error(x - 2, reference_unary(x, [](double v) { return v - 2; })) < kFloat32Tolerance);
    CHECK(relative_error(x * 0.125, reference_unary(x, [](double v) { return v * 0.125; })) < kFloat32Tolerance);
    CHECK(relative_error(3 / positive, reference_unary(positive, [](double v) { return 3 / v; })) < kFloat32Tolerance);
    CHECK(relative_error(x / 4, reference_unary(x, [](double v) { return v / 4; })) < kFloat32Tolerance);
    CHECK(relative_error(pow(x, 2), reference_unary(x, [](double v) { return v * v; })) < kFloat32Tolerance);
    CHECK(relative_error(pow(2, x), reference_unary(x, [](double v) { return std::pow(2, v); })) < kFloat32Tolerance);
    CHECK(relative_error(add(x, 3, 2), reference_unary(x, [](double v) { return v + 6; })) < kFloat32Tolerance);
  }
}

TEST_CASE("unary ops on a transposed input match a float64 reference") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(3);
    const Tensor x = randn({9, 6}, bytegrad::device(device)).t();
    const Tensor positive = abs(x) + 0.1;
    CHECK(relative_error(-x, reference_unary(x, [](double v) { return -v; })) == 0);
    CHECK(relative_error(abs(x), reference_unary(x, [](double v) { return std::fabs(v); })) == 0);
    CHECK(relative_error(relu(x), reference_unary(x, [](double v) { return v > 0 ? v : 0; })) == 0);
    CHECK(relative_error(exp(x), reference_unary(x, [](double v) { return std::exp(v); })) < kFloat32Tolerance);
    CHECK(relative_error(log(positive), reference_unary(positive, [](double v) { return std::log(v); })) <
          kFloat32Tolerance);
    CHECK(relative_error(sqrt(positive), reference_unary(positive, [](double v) { return std::sqrt(v); })) <
          kFloat32Tolerance);
    CHECK(relative_error(sigmoid(x), reference_unary(x, [](double v) { return 1 / (1 + std::exp(-v)); })) <
          kFloat32Tolerance);
    CHECK(relative_error(tanh(x), reference_unary(x, [](double v) { return std::tanh(v); })) < kFloat32Tolerance);
    CHECK(relative_error(gelu(x), reference_unary(x, gelu_reference)) < kFloat32Tolerance);
    CHECK(relative_error(silu(x), reference_unary(x, [](double v) { return v / (1 + std::exp(-v)); })) <
          kFloat32Tolerance);
  }
}

TEST_CASE("comparisons give exact bool results") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    const Tensor a = tensor({1, 2, 3, 4}, bytegrad::device(device));
    const Tensor b = tensor({4, 2, 1, 4}, bytegrad::device(device));
    CHECK((a == b).dtype() == ScalarType::bool_);
    CHECK((a == b).tolist() == std::vector<double>{0, 1, 0, 1});
    CHECK((a != b).tolist() == std::vector<double>{1, 0, 1, 0});
    CHECK((a < b).tolist() == std::vector<double>{1, 0, 0, 0});
    CHECK((a <= b).tolist() == std::vector<double>{1, 1, 0, 1});
    CHECK((a > b).tolist() == std::vector<double>{0, 0, 1, 0});
    CHECK((a >= b).tolist() == std::vector<double>{0, 1, 1, 1});
    CHECK((a > 2.5).tolist() == std::vector<double>{0, 0, 1, 1});
    CHECK(eq(a, 2).tolist() == std::vector<double>{0, 1, 0, 0});
    // An int tensor compared with a fractional scalar compares exactly.
    const Tensor ints = tensor({0, 1, 2}, TensorOptions{ScalarType::int64, device});
    CHECK((ints > 0.5).tolist() == std::vector<double>{0, 1, 1});
    CHECK(logical_not(a > 2).tolist() == std::vector<double>{1, 1, 0, 0});
  }
}

TEST_CASE("where and masked_fill broadcast their operands") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    const Tensor x = tensor({{1, -2, 3}, {-4, 5, -6}}, bytegrad::device(device));
    const Tensor zero = zeros({1}, bytegrad::device(device));
    CHECK(where(x > 0, x, zero).tolist() == std::vector<double>{1, 0, 3, 0, 5, 0});
    const Tensor column_mask = tensor({1, 0}, TensorOptions{ScalarType::bool_, device}).unsqueeze(1);
    CHECK(masked_fill(x, column_mask, 9).tolist() == std::vector<double>{9, 9, 9, -4, 5, -6});
    Tensor y = x.clone();
    y.masked_fill_(y < 0, 0);
    CHECK(y.tolist() == std::vector<double>{1, 0, 3, 0, 5, 0});
  }
}

TEST_CASE("in-place ops compute what their out-of-place forms compute") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(4);
    const Tensor x = randn({3, 4}, bytegrad::device(device));
    const Tensor row = randn({4}, bytegrad::device(device));
    Tensor y = x.clone();
    y.add_(row, 2).mul_(3).sub_(1).div_(2);
    const auto want = reference_binary(x, row, {3, 4}, [](double a, double b) { return ((a + 2 * b) * 3 - 1) / 2; });
    CHECK(relative_error(y, want) < kFloat32Tolerance);
    Tensor z = x.clone();
    z.relu_();
    CHECK(z.tolist() == relu(x).tolist());
    z += x;
    z -= 1;
    z *= x;
    z /= 2;
    CHECK(relative_error(z, reference_binary(relu(x), x, {3, 4}, [](double r, double v) {
                           return (r + v - 1) * v / 2;
                         })) < kFloat32Tolerance);
    z.fill_(7);
    CHECK(z.tolist() == std::vector<double>(12, 7.0));
    z.zero_();
    CHECK(z.tolist() == std::vector<double>(12, 0.0));
  }
}

TEST_CASE("elementwise ops cover every dtype") {
  for (ScalarType type : {ScalarType::float64, ScalarType::float16, ScalarType::bfloat16, ScalarType::int64,
                          ScalarType::int32, ScalarType::uint8}) {
    CAPTURE(scalar_type_name(type));
    const Tensor a = tensor({1, 2, 3, 4}, TensorOptions{type, kSim});
    const Tensor b = tensor({4, 3, 2, 1}, TensorOptions{type, kSim});
    CHECK((a + b).dtype() == type);
    CHECK((a + b).tolist() == std::vector<double>{5, 5, 5, 5});
    CHECK((a * b).tolist() == std::vector<double>{4, 6, 6, 4});
    CHECK((a * 2 + 1).tolist() == std::vector<double>{3, 5, 7, 9});
    CHECK(maximum(a, b).tolist() == std::vector<double>{4, 3, 3, 4});
    CHECK((a < b).tolist() == std::vector<double>{1, 1, 0, 0});
    CHECK(relu(a).tolist() == a.tolist());
  }
  const Tensor flags = tensor({1, 0, 1}, TensorOptions{ScalarType::bool_, kSim});
  CHECK((flags == flags).tolist() == std::vector<double>{1, 1, 1});
  CHECK(logical_not(flags).tolist() == std::vector<double>{0, 1, 0});
  // Float64 keeps double precision.
  const Tensor third = full({2}, 1.0, TensorOptions{ScalarType::float64, kSim}) / 3;
  CHECK(third.tolist()[0] == doctest::Approx(1.0 / 3).epsilon(1e-15));
  // An int tensor + 0.5 computes in float32, as PyTorch's wrapped number promotes it (ops.h). A whole
  // number stays int64.
  const Tensor promoted = tensor({1, 2}, TensorOptions{ScalarType::int64, kSim}) + 0.5;
  CHECK(promoted.dtype() == ScalarType::float32);
  CHECK(promoted.tolist() == std::vector<double>{1.5, 2.5});
  CHECK((tensor({1, 2}, TensorOptions{ScalarType::int64, kSim}) + 2.0).tolist() == std::vector<double>{3, 4});
}

TEST_CASE("activation gradients match float64 references") {
  manual_seed(5);
  const Tensor grad = randn({5, 3}, bytegrad::device(kSim));
  const Tensor x = randn({5, 3}, bytegrad::device(kSim));
  const Tensor s = sigmoid(x), t = tanh(x), r = relu(x);
  CHECK(relative_error(sigmoid_backward(grad, s), reference_binary(grad, s, {5, 3}, [](double g, double y) {
                         return g * (1 - y) * y;
                       })) < kFloat32Tolerance);
  CHECK(relative_error(tanh_backward(grad, t), reference_binary(grad, t, {5, 3}, [](double g, double y) {
                         return g * (1 - y * y);
                       })) < kFloat32Tolerance);
  CHECK(relative_error(relu_backward(grad, r),
                       reference_binary(grad, r, {5, 3}, [](double g, double y) { return y > 0 ? g : 0; })) == 0);
  const auto gelu_grad = [](double g, double v) {
    return g * (0.5 * (1 + std::erf(v / std::numbers::sqrt2)) +
                v * std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi));
  };
  CHECK(relative_error(gelu_backward(grad, x), reference_binary(grad, x, {5, 3}, gelu_grad)) < kFloat32Tolerance);
  const auto silu_grad = [](double g, double v) {  // PyTorch's silu_backward: g * s * (1 + v * (1 - s))
    const double sig = 1 / (1 + std::exp(-v));
    return g * sig * (1 + v * (1 - sig));
  };
  CHECK(relative_error(silu_backward(grad, x), reference_binary(grad, x, {5, 3}, silu_grad)) < kFloat32Tolerance);
}
