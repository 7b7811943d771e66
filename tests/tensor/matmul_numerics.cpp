// Matrix products against a float64 reference: every torch.matmul rank combination, transposed and
// broadcast operands, mm/bmm/addmm/linear/outer, and the float64/float16/int64 kernels.
#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr double kFloat32Tolerance = 1e-5;

void check_matmul(const Tensor& a, const Tensor& b) {
  CAPTURE(describe(a));
  CAPTURE(describe(b));
  Shape want_shape;
  const auto want = reference_matmul(a, b, &want_shape);
  const Tensor got = matmul(a, b);
  CHECK(got.sizes() == want_shape);
  CHECK(relative_error(got, want) < (a.dtype() == ScalarType::float64 ? 1e-12 : kFloat32Tolerance));
}

}  // namespace

TEST_CASE("matmul follows torch.matmul for every rank combination") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(20);
    const auto r = [&](const Shape& s) { return randn(s, bytegrad::device(device)); };
    check_matmul(r({7}), r({7}));                    // dot
    check_matmul(r({5, 7}), r({7}));                 // mv
    check_matmul(r({7}), r({7, 4}));                 // unsqueeze, mm, squeeze
    check_matmul(r({5, 7}), r({7, 4}));              // mm
    check_matmul(r({3, 5, 7}), r({7, 4}));           // folded into one mm
    check_matmul(r({3, 5, 7}), r({7}));              // folded into one mv
    check_matmul(r({5, 7}), r({3, 7, 4}));           // batched
    check_matmul(r({7}), r({3, 7, 4}));              // batched, vector lhs
    check_matmul(r({2, 3, 5, 7}), r({2, 3, 7, 4}));  // 4-d batched
    check_matmul(r({2, 1, 5, 7}), r({3, 7, 4}));     // broadcast batch
    check_matmul(r({2, 3, 5, 7}), r({7}));
    // Transposed and sliced operands.
    check_matmul(r({7, 5}).t(), r({4, 7}).t());
    check_matmul(r({3, 7, 5}).transpose(1, 2), r({3, 4, 7}).transpose(1, 2));
    check_matmul(r({5, 14}).slice(1, 0, 14, 2), r({7, 4}));    // column stride 2: neither stride is 1
    check_matmul(r({3, 5, 7}).permute({1, 0, 2}), r({7, 4}));  // not foldable: batched
    check_matmul(r({5, 1}).expand({5, 7}), r({7, 4}));         // a broadcast column
  }
}

TEST_CASE("mm, bmm, addmm, linear and outer match float64 references") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(21);
    const auto r = [&](const Shape& s) { return randn(s, bytegrad::device(device)); };
    const Tensor a = r({6, 8}), b = r({8, 5});
    CHECK(relative_error(mm(a, b), reference_matmul(a, b)) < kFloat32Tolerance);
    const Tensor ba = r({3, 6, 8}), bb = r({3, 8, 5});
    CHECK(relative_error(bmm(ba, bb), reference_matmul(ba, bb)) < kFloat32Tolerance);

    const Tensor bias = r({5});
    const auto product = reference_matmul(a, b);
    const auto bias_values = bias.tolist();
    std::vector<double> want(product.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * bias_values[i % 5] + 2.0 * product[i];
    CHECK(relative_error(addmm(bias, a, b, 0.5, 2.0), want) < kFloat32Tolerance);
    for (size_t i = 0; i < want.size(); ++i) want[i] = bias_values[i % 5] + product[i];
    CHECK(relative_error(addmm(bias, a, b), want) < kFloat32Tolerance);
    const Tensor full_bias = r({6, 5});
    const auto full_values = full_bias.tolist();
    for (size_t i = 0; i < want.size(); ++i) want[i] = full_values[i] + product[i];
    CHECK(relative_error(addmm(full_bias, a, b), want) < kFloat32Tolerance);

    // linear(x, w, b) = x @ w.T + b, for 1-d, 2-d, 3-d and transposed inputs.
    const Tensor w = r({5, 8});
    for (const Tensor& x : {r({8}), r({6, 8}), r({2, 3, 8}), r({2, 8, 3}).transpose(1, 2), r({2, 2, 3, 8})}) {
      CAPTURE(describe(x));
      const auto xw = reference_matmul(x, w.t());
      std::vector<double> with_bias(xw.size());
      for (size_t i = 0; i < xw.size(); ++i) with_bias[i] = xw[i] + bias_values[i % 5];
      CHECK(relative_error(linear(x, w, bias), with_bias) < kFloat32Tolerance);
      CHECK(relative_error(linear(x, w), xw) < kFloat32Tolerance);
      CHECK(linear(x, w, bias).sizes().back() == 5);
    }

    const Tensor u = r({4}), v = r({3});
    CHECK(relative_error(outer(u, v), reference_matmul(u.unsqueeze(1), v.unsqueeze(0))) < kFloat32Tolerance);
  }
}

TEST_CASE("matmul kernels for float64, float16, bfloat16 and int64") {
  manual_seed(22);
  check_matmul(randn({4, 6}, TensorOptions{ScalarType::float64, kSim}),
               randn({2, 6, 3}, TensorOptions{ScalarType::float64, kSim}));
  for (ScalarType type : {ScalarType::float16, ScalarType::bfloat16}) {
    CAPTURE(scalar_type_name(type));
    const Tensor a = randn({4, 6}, TensorOptions{type, kSim}), b = randn({6, 3}, TensorOptions{type, kSim});
    CHECK(relative_error(matmul(a, b), reference_matmul(a, b)) < 1e-2);  // 16-bit output rounding
  }
  const Tensor ia = tensor({{1, 2}, {3, 4}}, TensorOptions{ScalarType::int64, kSim});
  CHECK(matmul(ia, ia).tolist() == std::vector<double>{7, 10, 15, 22});
}
