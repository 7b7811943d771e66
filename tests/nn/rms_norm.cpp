// rms_norm and nn::RMSNorm: values against a hand computation, gradients against finite differences in
// float64, PyTorch's fused CUDA allocations on sim (sizes worked out beside each check; the recorded events
// are the probe's "fused_rms_norm" cases, tests/programs/op_events.cpp), and errors.
#include <limits>

#include "bytegrad/nn/rms_norm.h"
#include "nn_helpers.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("rms_norm: values and rstd by hand") {
  // x = [1, 2, 2, 4]: mean(x^2) = (1 + 4 + 4 + 16) / 4 = 6.25, rms 2.5, rstd 0.4 (eps 0).
  const Tensor x = from_vector(std::vector<double>{1, 2, 2, 4, -3, 0, 4, 0}, {2, 4}, f64());
  const RmsNormResult r = fused_rms_norm(x, {4}, std::nullopt, 0.0);
  // second row [-3, 0, 4, 0]: mean(x^2) = 25 / 4, rstd 0.4 too
  const std::vector<double> expected = {0.4, 0.8, 0.8, 1.6, -1.2, 0.0, 1.6, 0.0};
  const std::vector<double> got = r.output.tolist();
  for (size_t i = 0; i < expected.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-12));
  CHECK(r.rstd.sizes() == Shape{2, 1});  // input.shape[:axis] + [1]
  CHECK(r.rstd.dtype() == ScalarType::float64);
  CHECK(r.rstd.tolist()[0] == doctest::Approx(0.4));
  // with a weight [1, 2, 3, 4]: [0.4, 1.6, 2.4, 6.4]
  const Tensor w = from_vector(std::vector<double>{1, 2, 3, 4}, {4}, f64());
  const std::vector<double> weighted = rms_norm(x, {4}, w, 0.0).tolist();
  CHECK(weighted[1] == doctest::Approx(1.6));
  CHECK(weighted[3] == doctest::Approx(6.4));
  // eps unset: the accumulation dtype's epsilon (float32's for float32 input). A zero row gives
  // 0 * 1 / sqrt(0 + eps) = 0, not NaN.
  const Tensor zeros_row = zeros({1, 3}, TensorOptions{ScalarType::float32, kCpu});
  CHECK(rms_norm(zeros_row, {3}).tolist() == std::vector<double>{0, 0, 0});
  // normalized over the last two dims: one rstd per leading index
  const Tensor y = fused_rms_norm(x.view({1, 2, 4}), {2, 4}, std::nullopt, 0.0).rstd;
  CHECK(y.sizes() == Shape{1, 1, 1});
  CHECK(y.item() == doctest::Approx(0.4));  // (25 + 25) / 8 = 6.25
}

TEST_CASE("rms_norm: input and weight gradients match finite differences (float64)") {
  manual_seed(31);
  for (const auto& shapes :
       std::vector<std::pair<Shape, Shape>>{{{3, 5}, {5}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {3, 4}}, {{6}, {6}}}) {
    const Shape shape = shapes.first, norm = shapes.second;
    CAPTURE(shape_str(shape));
    CAPTURE(shape_str(norm));
    const Tensor out_weights = randn(shape, f64());
    check_gradients([&](auto& v) { return sum(rms_norm(v[0], norm, v[1], 1e-5) * out_weights); },
                    {randn(shape, f64()), randn(norm, f64())});
    check_gradients([&](auto& v) { return sum(rms_norm(v[0], norm) * out_weights); }, {randn(shape, f64())});
  }
  // The node is PyTorch's and keeps input, weight and rstd.
  Tensor x = randn({2, 4}, f64()).requires_grad_();
  const Tensor out = rms_norm(x, {4});
  CHECK(out.grad_fn_name() == "FusedRmsNormBackward0");
}

TEST_CASE("rms_norm on sim allocates as PyTorch's fused CUDA kernel: output, rstd; backward dX, dW") {
  fresh(kSim);
  const TensorOptions f32{ScalarType::float32, kSim};
  const Tensor x = randn({64, 256}, f32).requires_grad_();
  const Tensor w = randn({256}, f32).requires_grad_();
  const Tensor g = ones({64, 256}, f32);
  Tensor y;
  // forward: Y (64 * 256 * 4 = 65536), rstd (64 rows * 4 = 256); the node keeps rstd
  CHECK(allocation_events(kSim, [&] { y = rms_norm(x, {256}, w); }) ==
        AllocationEvents{{"alloc", 65536}, {"alloc", 256}});
  // backward: dX (65536), dW (256 * 4 = 1024); then the graph's rstd is released
  CHECK(allocation_events(kSim, [&] { y.backward(g); }) ==
        AllocationEvents{{"alloc", 65536}, {"alloc", 1024}, {"free", 256}});
  {
    // no graph: a transposed input is first copied (X, freed when the kernel's function returns), then Y and
    // rstd; rstd is freed as soon as rms_norm returns (only the output is kept), the output last
    NoGradGuard no_grad;
    const Tensor xt = randn({256, 64}, f32).t();
    CHECK(allocation_events(kSim, [&] { const Tensor out = rms_norm(xt, {256}); }) ==
          AllocationEvents{
              {"alloc", 65536}, {"alloc", 65536}, {"alloc", 256}, {"free", 65536}, {"free", 256}, {"free", 65536}});
  }
}

TEST_CASE("rms_norm refuses bad input with clear errors") {
  const Tensor x = randn({2, 4}, TensorOptions{ScalarType::float32, kCpu});
  CHECK_THROWS_WITH_AS(rms_norm(x, {3}), doctest::Contains("expected input with shape [*, 3]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(rms_norm(x, {}), doctest::Contains("at least 1-dimensional"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(rms_norm(x, {4}, ones({3}, TensorOptions{ScalarType::float32, kCpu})),
                       doctest::Contains("weight"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(rms_norm(x, {4}, ones({4}, TensorOptions{ScalarType::float64, kCpu})),
                       doctest::Contains("differ in dtype"), std::invalid_argument);
  CHECK_THROWS_AS(rms_norm(randint(0, 3, {2, 4}, TensorOptions{ScalarType::int64, kCpu}), {4}), std::invalid_argument);
  CHECK_THROWS_AS(rms_norm(Tensor(), {4}), std::invalid_argument);
}

TEST_CASE("RMSNorm module: a ones weight named like torch's, optional eps, gradients match finite differences") {
  manual_seed(32);
  nn::RMSNorm norm(Shape{3, 4}, std::nullopt, true, f64());
  const auto names = norm.named_parameters();
  REQUIRE(names.size() == 1);
  CHECK(names[0].first == "weight");
  CHECK(norm.weight().tolist() == std::vector<double>(12, 1.0));
  CHECK(!norm.eps().has_value());
  CHECK(nn::RMSNorm(8, 1e-6, false).named_parameters().empty());
  CHECK_THROWS_AS(nn::RMSNorm(Shape{}), std::invalid_argument);
  {
    NoGradGuard no_grad;
    norm.weight().copy_(randn({3, 4}, f64()));
  }
  const Tensor x = randn({2, 3, 4}, f64());
  const Tensor w = randn({2, 3, 4}, f64());
  check_parameter_gradients(norm, [&] { return sum(norm(x) * w); });
  check_gradients([&](auto& v) { return sum(norm(v[0]) * w); }, {x});
  // forward is rms_norm with the module's weight and eps
  const Tensor expected = rms_norm(x, {3, 4}, norm.weight());
  CHECK(norm(x).tolist() == expected.tolist());
}
