// F.linear with a 1-d weight, which PyTorch accepts: the weight is its own transpose, so the result is
// matmul(input, weight), reducing input's last dimension (plus a bias where no addmm path is taken; with a
// 2-d input and a bias PyTorch's addmm refuses the vector, and so does bytegrad's). Values, the one output
// allocation on sim (cuBLAS workspace configured to 0), and the gradients.
#include <cstdlib>

#include "nn_helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct NoWorkspace {
  NoWorkspace() { setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1); }
  ~NoWorkspace() { unsetenv("CUBLAS_WORKSPACE_CONFIG"); }
};

// sim's live figures, to take differences of.
struct Figures {
  int64_t allocated, requested, blocks;
};
Figures figures() {
  return {testing::allocated(), stat(kSim, "requested_bytes.all.current"), stat(kSim, "allocation.all.current")};
}

}  // namespace

TEST_CASE("linear with a 1-d weight: matmul(input, weight), one output allocation") {
  NoWorkspace no_workspace;
  fresh_sim();
  {
    const TensorOptions sim{ScalarType::float32, kSim};
    const Tensor x = arange(6.0, sim).view({2, 3});
    const Tensor w = from_vector({1, 2, 3}, {3}, sim);
    const Figures before = figures();
    const Tensor y = linear(x, w);
    // PyTorch 2.11's recorded result: [0+2+6, 3+8+15] = [8, 26], shape [2].
    CHECK(y.sizes() == Shape{2});
    CHECK(y.tolist() == std::vector<double>{8, 26});
    // mv's output: 2 * 4 = 8 bytes, one 512-byte block.
    CHECK(figures().blocks - before.blocks == 1);
    CHECK(figures().requested - before.requested == 2 * 4);
    CHECK(figures().allocated - before.allocated == 512);

    // A 3-d input (2, 2, 3) folds into one mv over 4 rows: 4 * 4 = 16 bytes, viewed back to (2, 2).
    const Tensor x3 = arange(12.0, sim).view({2, 2, 3});
    const Figures before3 = figures();
    const Tensor y3 = linear(x3, w);
    CHECK(y3.sizes() == Shape{2, 2});
    CHECK(y3.tolist() == std::vector<double>{8, 26, 44, 62});
    CHECK(figures().blocks - before3.blocks == 1);
    CHECK(figures().requested - before3.requested == 4 * 4);
    CHECK(figures().allocated - before3.allocated == 512);

    // A 1-d input and a 1-d weight: a dot product, 0-d; a 0-d bias is added in place (no addmm path).
    const Tensor d = linear(w, w, full({}, 0.5, sim));
    CHECK(d.dim() == 0);
    CHECK(d.item() == 1 + 4 + 9 + 0.5);

    // With a 2-d input and a bias, PyTorch takes addmm, which wants a matrix ("mat2 must be a matrix").
    CHECK_THROWS_AS(linear(x, w, full({}, 0.5, sim)), std::invalid_argument);
    // A 1-d input with a 2-d weight (PyTorch's recorded [6, 6] for ones(2, 3) and [1, 2, 3]).
    CHECK(linear(w, ones({2, 3}, sim)).tolist() == std::vector<double>{6, 6});
  }
  CHECK(allocated() == 0);
}

TEST_CASE("linear with a 1-d weight: gradients of input and weight") {
  manual_seed(3);
  const Tensor g = randn({4, 2}, f64());
  // Against finite differences (float64, cpu), for a 3-d input.
  check_gradients([&](const std::vector<Tensor>& v) { return sum(linear(v[0], v[1]) * g); },
                  {randn({4, 2, 5}, f64()), randn({5}, f64())});
  // And in closed form: d(x @ w)/dx = g outer w, d/dw = sum over rows of g * x.
  const Tensor x = randn({3, 4}, f64()).requires_grad_();
  const Tensor w = randn({4}, f64()).requires_grad_();
  const Tensor upstream = randn({3}, f64());
  (linear(x, w) * upstream).sum().backward();
  const std::vector<double> xs = x.tolist(), ws = w.tolist(), us = upstream.tolist();
  const std::vector<double> gx = x.grad().tolist(), gw = w.grad().tolist();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(gx[i * 4 + j] == doctest::Approx(us[i] * ws[j]));
  for (int j = 0; j < 4; ++j) {
    double want = 0;
    for (int i = 0; i < 3; ++i) want += us[i] * xs[i * 4 + j];
    CHECK(gw[j] == doctest::Approx(want));
  }
}
