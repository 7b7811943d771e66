// Every new module's parameter and input gradients against central finite differences, float64 on cpu.
#include <type_traits>

#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/attention.h"
#include "bytegrad/nn/dropout.h"
#include "bytegrad/nn/embedding.h"
#include "nn_helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("activation modules: input gradients match finite differences") {
  manual_seed(11);
  Tensor w = randn({3, 5}, f64());
  nn::Sigmoid sigmoid_module;
  nn::Tanh tanh_module;
  nn::GELU gelu_module;
  for (nn::Module* m : std::vector<nn::Module*>{&sigmoid_module, &tanh_module, &gelu_module}) {
    check_gradients([&](auto& v) { return sum((*m)(v[0]) * w); }, {randn({3, 5}, f64())});
    CHECK(m->parameters().empty());
  }
  // forward is the op itself
  Tensor x = randn({4}, f64());
  CHECK(sigmoid_module(x).tolist() == sigmoid(x).tolist());
  CHECK(tanh_module(x).tolist() == tanh(x).tolist());
  CHECK(gelu_module(x).tolist() == gelu(x).tolist());
}

TEST_CASE("activation modules from the op table: SiLU is x * sigmoid(x); only ReLU takes inplace") {
  manual_seed(14);
  Tensor w = randn({3, 5}, f64());
  nn::SiLU silu_module;
  check_gradients([&](auto& v) { return sum(silu_module(v[0]) * w); }, {randn({3, 5}, f64())});
  CHECK(silu_module.parameters().empty());
  Tensor x = randn({6}, f64()).requires_grad_();
  const Tensor y = silu_module(x);
  CHECK(y.grad_fn_name() == "SiluBackward0");
  const std::vector<double> got = y.tolist(), want = (x * sigmoid(x)).tolist();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-14));

  // torch.nn.ReLU(inplace=True) rectifies its input; the modules without an in-place op take no argument.
  static_assert(std::is_constructible_v<nn::ReLU, bool>);
  static_assert(!std::is_constructible_v<nn::Sigmoid, bool>);
  static_assert(!std::is_constructible_v<nn::SiLU, bool>);
  Tensor z = from_vector({-1.0, 2.0}, {2}, f64());
  nn::ReLU in_place(true);
  const Tensor r = in_place(z);
  CHECK(r.data_ptr() == z.data_ptr());
  CHECK(z.tolist() == std::vector<double>{0.0, 2.0});
}

TEST_CASE("Dropout: training gradient is mask / (1 - p); eval is the identity") {
  manual_seed(12);
  Tensor w = randn({4, 6}, f64());
  nn::Dropout drop(0.3);
  CHECK(drop.parameters().empty());
  // The same seed before every evaluation draws the same mask, so finite differences see one function.
  check_gradients(
      [&](auto& v) {
        manual_seed(99);
        return sum(drop(v[0]) * w);
      },
      {randn({4, 6}, f64())});
  drop.eval();
  Tensor x = randn({4, 6}, f64());
  Tensor y = drop(x);
  CHECK(y.data_ptr() == x.data_ptr());
  check_gradients([&](auto& v) { return sum(drop(v[0]) * w); }, {randn({4, 6}, f64())});
  CHECK_THROWS_AS(nn::Dropout(1.5), std::invalid_argument);
}

TEST_CASE("Embedding: weight gradient matches finite differences (repeated indices accumulate)") {
  manual_seed(13);
  nn::Embedding emb(5, 3, f64());
  REQUIRE(emb.named_parameters().size() == 1);
  CHECK(emb.named_parameters()[0].first == "weight");
  CHECK(emb.weight().sizes() == Shape{5, 3});
  CHECK(emb.weight().requires_grad());
  Tensor idx = from_vector({4, 0, 4, 2, 1, 4}, {2, 3}, TensorOptions{ScalarType::int64, kCpu});
  Tensor w = randn({2, 3, 3}, f64());
  check_parameter_gradients(emb, [&] { return sum(emb(idx) * w); });
  // row 3 is never looked up: its gradient is zero
  std::vector<double> g = emb.weight().grad().tolist();
  CHECK(g[9] == 0.0);
  CHECK(g[10] == 0.0);
  CHECK(g[11] == 0.0);
}

TEST_CASE("Embedding: weight is N(0, 1)") {
  manual_seed(14);
  nn::Embedding emb(200, 50, f64());
  std::vector<double> v = emb.weight().tolist();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  const double stddev = std::sqrt(sq / static_cast<double>(v.size()));
  CHECK(std::fabs(mean) < 0.05);
  CHECK(std::fabs(stddev - 1.0) < 0.05);
}

TEST_CASE("MultiheadSelfAttention: parameter and input gradients match finite differences") {
  manual_seed(15);
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    nn::MultiheadSelfAttention attn(4, 2, bias, f64());
    const auto names = attn.named_parameters();
    REQUIRE(names.size() == (bias ? 4u : 2u));
    CHECK(names[0].first == "in_proj.weight");
    CHECK(attn.in_proj().weight().sizes() == Shape{12, 4});
    CHECK(attn.out_proj().weight().sizes() == Shape{4, 4});
    Tensor x = randn({2, 3, 4}, f64());
    Tensor w = randn({2, 3, 4}, f64());
    CHECK(attn(x).sizes() == Shape{2, 3, 4});
    check_parameter_gradients(attn, [&] { return sum(attn(x) * w); });
    check_gradients([&](auto& v) { return sum(attn(v[0]) * w); }, {x});
  }
  CHECK_THROWS_AS(nn::MultiheadSelfAttention(6, 4), std::invalid_argument);
}

TEST_CASE("MultiheadSelfAttention matches the formula written out with plain ops") {
  manual_seed(16);
  nn::MultiheadSelfAttention attn(8, 2, true, f64());
  Tensor x = randn({2, 5, 8}, f64());
  NoGradGuard no_grad;
  Tensor y = attn(x);
  // Per head, by explicit slicing instead of view/permute: softmax(q_h k_h^T / sqrt(D)) v_h.
  Tensor qkv = linear(x, attn.in_proj().weight(), attn.in_proj().bias());
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < 2; ++h) {
    Tensor q = qkv.slice(2, h * 4, h * 4 + 4), k = qkv.slice(2, 8 + h * 4, 8 + h * 4 + 4),
           v = qkv.slice(2, 16 + h * 4, 16 + h * 4 + 4);
    heads.push_back(matmul(softmax(matmul(q, k.transpose(1, 2)) / 2.0, -1), v));
  }
  Tensor expected = linear(cat(heads, 2), attn.out_proj().weight(), attn.out_proj().bias());
  std::vector<double> a = y.tolist(), b = expected.tolist();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-12));
}
