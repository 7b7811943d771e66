// masked_select, cross_entropy with class weights + label_smoothing + mean, scaled_dot_product_attention's
// enable_gqa on the math backend, and randperm on sim / meta: values and gradients by hand or against a
// float64 composition, the errors, and the allocation events bytegrad models (sizes worked out beside each;
// PyTorch's recorded events are held by tests/programs/op_events.cpp once the probe's cases are recorded).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using bytegrad::testing::allocation_events;
using bytegrad::testing::AllocationEvents;

namespace {

Tensor floats(std::vector<double> values, Shape shape, Device d = kSim, ScalarType t = ScalarType::float32) {
  return from_vector(values, shape, TensorOptions{t, d});
}
Tensor flags(std::vector<double> values, Shape shape, Device d = kSim) {
  return from_vector(values, shape, TensorOptions{ScalarType::bool_, d});
}

}  // namespace

TEST_CASE("masked_select: row-major selection, broadcasting, gradient scattered back") {
  for (const Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    Tensor x = floats({1, 2, 3, 4, 5, 6}, {2, 3}, d).requires_grad_();
    const Tensor mask = flags({1, 0, 1, 0, 1, 1}, {2, 3}, d);
    Tensor y = masked_select(x, mask);
    CHECK(y.grad_fn_name() == "MaskedSelectBackward0");
    CHECK(y.sizes() == Shape{4});
    CHECK(y.tolist() == std::vector<double>{1, 3, 5, 6});
    (y * floats({10, 20, 30, 40}, {4}, d)).sum().backward();
    CHECK(x.grad().tolist() == std::vector<double>{10, 0, 20, 0, 30, 40});

    // A (3) mask broadcast over (2, 3) rows; a transposed input read in its logical order.
    const Tensor row_mask = flags({0, 1, 1}, {3}, d);
    CHECK(masked_select(x.detach(), row_mask).tolist() == std::vector<double>{2, 3, 5, 6});
    CHECK(masked_select(x.detach().t(), flags({1, 1, 0, 0, 0, 1}, {3, 2}, d)).tolist() == std::vector<double>{1, 4, 6});
    // An input broadcast over a larger mask: its gradient is summed back to its shape (1, 3).
    Tensor row = floats({7, 8, 9}, {1, 3}, d).requires_grad_();
    Tensor picked = masked_select(row, mask);
    CHECK(picked.tolist() == std::vector<double>{7, 9, 8, 9});
    picked.sum().backward();
    CHECK(row.grad().tolist() == std::vector<double>{1, 1, 2});
    // 0-d operands select as 1-d; nothing selected gives an empty result.
    CHECK(masked_select(floats({5}, {}, d), flags({1}, {}, d)).tolist() == std::vector<double>{5});
    CHECK(masked_select(x.detach(), flags({0, 0, 0, 0, 0, 0}, {2, 3}, d)).numel() == 0);
    // Integer inputs keep their dtype.
    const Tensor ints = from_vector(std::vector<int64_t>{4, 5, 6}, {3}, TensorOptions{ScalarType::int64, d});
    const Tensor picked_ints = masked_select(ints, row_mask);
    CHECK(picked_ints.dtype() == ScalarType::int64);
    CHECK(picked_ints.tolist() == std::vector<double>{5, 6});
  }
}

TEST_CASE("masked_select: errors name the problem") {
  const Tensor x = floats({1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_WITH(masked_select(x, floats({1, 0, 1, 0}, {2, 2})), doctest::Contains("must be bool"));
  CHECK_THROWS_WITH(masked_select(x, flags({1, 0, 1}, {3})), doctest::Contains("masked_select"));
  CHECK_THROWS_AS(masked_select(x, flags({1, 0, 1}, {3})), std::invalid_argument);
  const Tensor on_cpu = flags({1, 0, 1, 0}, {2, 2}, kCpu);
  CHECK_THROWS_AS(masked_select(x, on_cpu), std::invalid_argument);
  const Tensor m = empty({2, 2}, TensorOptions{ScalarType::float32, kMeta});
  CHECK_THROWS_WITH(masked_select(m, empty({2, 2}, TensorOptions{ScalarType::bool_, kMeta})),
                    doctest::Contains("meta tensor does not have"));
}

TEST_CASE("masked_select: gradient by finite differences (float64)") {
  const Tensor base = floats({0.3, -1.2, 2.5, 0.7, -0.4, 1.1}, {2, 3}, kSim, ScalarType::float64);
  const Tensor mask = flags({1, 1, 0, 0, 1, 1}, {2, 3});
  const Tensor w = floats({1.5, -2, 0.5, 3}, {4}, kSim, ScalarType::float64);
  const auto f = [&](const Tensor& x) { return (masked_select(x, mask) * masked_select(x, mask) * w).sum(); };
  Tensor x = base.clone().requires_grad_();
  f(x).backward();
  const std::vector<double> analytic = x.grad().tolist();
  const double h = 1e-6;
  for (int64_t i = 0; i < 6; ++i) {
    std::vector<double> plus = base.tolist(), minus = base.tolist();
    plus[static_cast<size_t>(i)] += h;
    minus[static_cast<size_t>(i)] -= h;
    const double numeric = (f(floats(plus, {2, 3}, kSim, ScalarType::float64)).item<double>() -
                            f(floats(minus, {2, 3}, kSim, ScalarType::float64)).item<double>()) /
                           (2 * h);
    CHECK(analytic[static_cast<size_t>(i)] == doctest::Approx(numeric).epsilon(1e-6));
  }
}

TEST_CASE("masked_select events on sim: nonzero's scratch, the positions, the output; backward's scan") {
  const Device d = kSim;
  // 1024 floats, every other one selected: count 512.
  std::vector<double> alternate(1024);
  for (size_t i = 0; i < alternate.size(); ++i) alternate[i] = static_cast<double>(i % 2);
  const Tensor mask = flags(alternate, {1024}, d);
  Tensor x = randn({1024}, TensorOptions{ScalarType::float32, d}).requires_grad_();
  Tensor y;
  // 4: nonzero's int count; 1: CUB's single-tile reduce (1024 <= 4096 items); 512 * 1 * 8 = 4096: the int64
  // positions (1 dim x 512); CUB's select scratch: 1 tile of 384 x 11 -> (1 + 32) * 8 = 264 -> 512, + 256 + 255 =
  // 1023; then the output 512 * 4 = 2048, and the positions freed.
  CHECK(allocation_events(d, [&] { y = masked_select(x, mask); }) == AllocationEvents{{"alloc", 4},
                                                                                      {"alloc", 1},
                                                                                      {"free", 1},
                                                                                      {"alloc", 4096},
                                                                                      {"alloc", 1023},
                                                                                      {"free", 1023},
                                                                                      {"free", 4},
                                                                                      {"alloc", 2048},
                                                                                      {"free", 4096}});
  const Tensor g = ones_like(y);
  // Backward: zeros 1024 * 4 = 4096, int64 prefix sums 1024 * 8 = 8192, CUB's int64 scan scratch (7 items a
  // thread: 2 tiles of 896 -> (2 + 32) * 16 = 544 -> 768, + 256 + 255 = 1279), prefix sums freed; the node then
  // releases x's gradient into AccumulateGrad (kept) and the incoming gradient g stays with the caller.
  CHECK(allocation_events(d, [&] { y.backward(g); }) ==
        AllocationEvents{{"alloc", 4096}, {"alloc", 8192}, {"alloc", 1279}, {"free", 1279}, {"free", 8192}});
  // A (4, 256) mask broadcast from (256): its contiguous copy (1024 bytes) is made first and freed last.
  const Tensor row_mask = flags(std::vector<double>(alternate.begin(), alternate.begin() + 256), {256}, d);
  const Tensor x2 = randn({4, 256}, TensorOptions{ScalarType::float32, d});
  // 512 selected: positions 2 dims x 512 x 8 = 8192.
  CHECK(allocation_events(d, [&] { (void)masked_select(x2, row_mask); }) == AllocationEvents{{"alloc", 1024},
                                                                                             {"alloc", 4},
                                                                                             {"alloc", 1},
                                                                                             {"free", 1},
                                                                                             {"alloc", 8192},
                                                                                             {"alloc", 1023},
                                                                                             {"free", 1023},
                                                                                             {"free", 4},
                                                                                             {"free", 1024},
                                                                                             {"alloc", 2048},
                                                                                             {"free", 8192},
                                                                                             {"free", 2048}});
}

TEST_CASE("cross_entropy: class weights, label_smoothing and mean as PyTorch's formula") {
  const Device d = kSim;
  NoGradGuard no_grad;
  const Tensor logits = floats({0.2, -1.0, 0.5, 1.5, 0.3, -0.2, 0.0, 0.8, -0.6}, {3, 3}, d, ScalarType::float64);
  const Tensor target = from_vector(std::vector<int64_t>{2, -100, 0}, {3}, TensorOptions{ScalarType::int64, d});
  const Tensor weight = floats({0.5, 2.0, 1.5}, {3}, d, ScalarType::float64);
  const double s = 0.2;
  const Tensor loss = cross_entropy(logits, target, {.weight = weight, .label_smoothing = s});
  // By hand: log_softmax rows; nll = sum over kept rows of -w[t] * logp[t] / sum w[t]; smooth = sum over kept
  // rows of -sum_c w[c] * logp[c], divided by the same weight sum; loss = (1 - s) nll + s / C * smooth.
  const std::vector<double> lp = log_softmax(logits, 1).tolist();
  const std::vector<double> w{0.5, 2.0, 1.5};
  const std::vector<int> kept_rows{0, 2}, kept_targets{2, 0};
  double nll = 0, smooth = 0, weight_sum = 0;
  for (size_t k = 0; k < kept_rows.size(); ++k) {
    const auto r = static_cast<size_t>(kept_rows[k]);
    const auto t = static_cast<size_t>(kept_targets[k]);
    nll -= w[t] * lp[r * 3 + t];
    weight_sum += w[t];
    for (size_t c = 0; c < 3; ++c) smooth -= w[c] * lp[r * 3 + c];
  }
  const double expected = (1 - s) * nll / weight_sum + s / 3 * smooth / weight_sum;
  CHECK(loss.item<double>() == doctest::Approx(expected).epsilon(1e-12));
}

TEST_CASE("cross_entropy weight + label_smoothing + mean: gradient by finite differences") {
  const Device d = kSim;
  const std::vector<double> base{0.2, -1.0, 0.5, 1.5, 0.3, -0.2};
  const Tensor target = from_vector(std::vector<int64_t>{1, 2}, {2}, TensorOptions{ScalarType::int64, d});
  const Tensor weight = floats({0.5, 2.0, 1.5}, {3}, d, ScalarType::float64);
  const auto f = [&](const Tensor& x) { return cross_entropy(x, target, {.weight = weight, .label_smoothing = 0.1}); };
  Tensor x = floats(base, {2, 3}, d, ScalarType::float64).requires_grad_();
  f(x).backward();
  const std::vector<double> analytic = x.grad().tolist();
  for (size_t i = 0; i < base.size(); ++i) {
    std::vector<double> plus = base, minus = base;
    plus[i] += 1e-6;
    minus[i] -= 1e-6;
    const double numeric = (f(floats(plus, {2, 3}, d, ScalarType::float64)).item<double>() -
                            f(floats(minus, {2, 3}, d, ScalarType::float64)).item<double>()) /
                           2e-6;
    CHECK(analytic[i] == doctest::Approx(numeric).epsilon(1e-6));
  }
}

TEST_CASE("scaled_dot_product_attention enable_gqa: the math backend with key and value repeated") {
  const Device d = kSim;
  const TensorOptions f64{ScalarType::float64, d};
  manual_seed(3);
  Tensor q = randn({2, 4, 5, 8}, f64).requires_grad_();
  Tensor k = randn({2, 2, 6, 8}, f64).requires_grad_();
  Tensor v = randn({2, 2, 6, 3}, f64).requires_grad_();
  Tensor y = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true, std::nullopt, true);
  CHECK(y.sizes() == Shape{2, 4, 5, 3});
  // Against the explicit repeat: heads 0, 1 of query use key head 0; 2, 3 key head 1.
  const Tensor k_rep = repeat_interleave(k.detach(), 2, 1), v_rep = repeat_interleave(v.detach(), 2, 1);
  const Tensor want = scaled_dot_product_attention_math(q.detach(), k_rep, v_rep, true);
  const std::vector<double> got = y.detach().tolist(), expect = want.tolist();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expect[i]).epsilon(1e-12));
  // Gradients: key's and value's sum over the query heads sharing them (finite differences on one entry each).
  y.sum().backward();
  const auto loss_with = [&](const Tensor& kk, const Tensor& vv) {
    NoGradGuard no_grad;
    return scaled_dot_product_attention(q.detach(), kk, vv, std::nullopt, 0.0, true, std::nullopt, true)
        .sum()
        .item<double>();
  };
  for (const int which : {0, 1}) {
    const Tensor& t = which == 0 ? k : v;
    std::vector<double> plus = t.detach().tolist(), minus = plus;
    const size_t at = 7;
    plus[at] += 1e-6;
    minus[at] -= 1e-6;
    const Tensor tp = from_vector(plus, t.sizes(), f64), tm = from_vector(minus, t.sizes(), f64);
    const double numeric = which == 0 ? (loss_with(tp, v.detach()) - loss_with(tm, v.detach())) / 2e-6
                                      : (loss_with(k.detach(), tp) - loss_with(k.detach(), tm)) / 2e-6;
    CHECK(t.grad().tolist()[at] == doctest::Approx(numeric).epsilon(1e-6));
  }
  // Equal head counts: enable_gqa changes nothing.
  const Tensor same =
      scaled_dot_product_attention(q.detach(), k_rep, v_rep, std::nullopt, 0.0, true, std::nullopt, true);
  CHECK(same.tolist() == want.tolist());
}

TEST_CASE("scaled_dot_product_attention enable_gqa in bf16 and fp16: cuDNN with grouped heads, as the math path") {
  for (const ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16})
    for (const bool causal : {false, true}) {
      CAPTURE(scalar_type_name(dtype));
      CAPTURE(causal);
      manual_seed(11);
      const TensorOptions o{dtype, kSim};
      Tensor q = randn({2, 6, 9, 16}, o).requires_grad_();
      Tensor k = randn({2, 2, 9, 16}, o).requires_grad_(), v = randn({2, 2, 9, 16}, o).requires_grad_();
      const Tensor y = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, causal, std::nullopt, true);
      CHECK(y.grad_fn_name() == "ScaledDotProductCudnnAttentionBackward0");
      CHECK(y.sizes() == Shape{2, 6, 9, 16});
      // The reference: float32 leaves of the same values, key and value repeated (query heads 0-2 read
      // key/value head 0, 3-5 head 1), the math path; repeat_interleave's gradient sums each group.
      Tensor qf = q.detach().to(ScalarType::float32).requires_grad_();
      Tensor kf = k.detach().to(ScalarType::float32).requires_grad_();
      Tensor vf = v.detach().to(ScalarType::float32).requires_grad_();
      const Tensor want =
          scaled_dot_product_attention_math(qf, repeat_interleave(kf, 3, 1), repeat_interleave(vf, 3, 1), causal);
      const double tol = dtype == ScalarType::bfloat16 ? 2e-2 : 2e-3;
      const auto close = [&](const Tensor& got, const Tensor& expect, const char* what) {
        CAPTURE(what);
        const std::vector<double> a = got.to(ScalarType::float32).tolist(), b = expect.tolist();
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1.0));
      };
      close(y.detach(), want.detach(), "output");
      const Tensor w = randn({2, 6, 9, 16}, TensorOptions{ScalarType::float32, kSim});
      (y * w.to(dtype)).sum().backward();
      (want * w.to(dtype).to(ScalarType::float32)).sum().backward();
      close(q.grad(), qf.grad(), "dq");
      close(k.grad(), kf.grad(), "dk");
      close(v.grad(), vf.grad(), "dv");
      CHECK(k.grad().sizes() == Shape{2, 2, 9, 16});
    }
}

TEST_CASE("scaled_dot_product_attention enable_gqa: errors") {
  const TensorOptions f32{ScalarType::float32, kSim};
  const Tensor q = randn({1, 6, 4, 8}, f32);
  const Tensor k = randn({1, 4, 4, 8}, f32), v = randn({1, 4, 4, 8}, f32);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, std::nullopt, true),
                    doctest::Contains("must divide the number of heads in query (6)"));
  // Without enable_gqa, 6 and 4 heads do not broadcast.
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, std::nullopt, false),
                  std::invalid_argument);
  // 16-bit 4-d inputs whose backend would not be cuDNN (head dim 12: flash) are not recorded: refused.
  const TensorOptions bf16{ScalarType::bfloat16, kSim};
  CHECK_THROWS_WITH(
      scaled_dot_product_attention(randn({1, 4, 4, 12}, bf16), randn({1, 2, 4, 12}, bf16), randn({1, 2, 4, 12}, bf16),
                                   std::nullopt, 0.0, false, std::nullopt, true),
      doctest::Contains("memory is not recorded"));
  CHECK_THROWS_WITH(
      scaled_dot_product_attention(randn({1, 4, 4, 8}, bf16), randn({1, 2, 4, 8}, bf16), randn({1, 2, 4, 8}, bf16),
                                   std::nullopt, 0.5, false, std::nullopt, true),
      doctest::Contains("with dropout"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(randn({4, 8}, f32), randn({4, 8}, f32), randn({4, 8}, f32),
                                                 std::nullopt, 0.0, false, std::nullopt, true),
                    doctest::Contains("at least 3-d"));
}

TEST_CASE("scaled_dot_product_attention enable_gqa events: the two repeats live until the call returns") {
  const Device d = kSim;
  const TensorOptions f32{ScalarType::float32, d};
  const Tensor q = randn({1, 4, 8, 16}, f32), k = randn({1, 2, 8, 16}, f32), v = randn({1, 2, 8, 16}, f32);
  NoGradGuard no_grad;
  const auto gqa = [&] { (void)scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, std::nullopt, true); };
  gqa();  // the thread's cuBLAS workspace, made once, out of the way
  const AllocationEvents events = allocation_events(d, gqa);
  // Math backend, no graph: q * sqrt(scale) (1*4*8*16*4 = 2048 bytes), then key repeated and value repeated
  // (2048 each, PyTorch's pre_process_group_query_attention_input), ...; as the math op returns, its locals
  // go: the key repeat, the value repeat, the scaled query (2048 each); then the caller drops the second
  // output, attn (1*4*8*8*4 = 1024), and the lambda the result (2048).
  REQUIRE(events.size() >= 8);
  CHECK(events[0] == std::pair<std::string, int64_t>{"alloc", 2048});
  CHECK(events[1] == std::pair<std::string, int64_t>{"alloc", 2048});
  CHECK(events[2] == std::pair<std::string, int64_t>{"alloc", 2048});
  const size_t n = events.size();
  CHECK(events[n - 5] == std::pair<std::string, int64_t>{"free", 2048});
  CHECK(events[n - 4] == std::pair<std::string, int64_t>{"free", 2048});
  CHECK(events[n - 3] == std::pair<std::string, int64_t>{"free", 2048});
  CHECK(events[n - 2] == std::pair<std::string, int64_t>{"free", 1024});
  CHECK(events[n - 1] == std::pair<std::string, int64_t>{"free", 2048});
  // With key and value already repeated, the same call has exactly those two blocks fewer.
  const Tensor k_rep = repeat_interleave(k, 2, 1), v_rep = repeat_interleave(v, 2, 1);
  const AllocationEvents plain = allocation_events(
      d, [&] { (void)scaled_dot_product_attention_math(q, k_rep, v_rep, std::nullopt, 0.0, false, std::nullopt); });
  CHECK(plain.size() + 4 == events.size());
}

TEST_CASE("randperm on sim, meta: a permutation, with PyTorch's CUDA temporaries") {
  manual_seed(5);
  const Tensor p = randperm(1000, TensorOptions{ScalarType::int64, kSim});
  CHECK(p.device() == kSim);
  CHECK(p.dtype() == ScalarType::int64);
  std::vector<double> values = p.tolist();
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i < values.size(); ++i) CHECK(values[i] == static_cast<double>(i));
  CHECK(randperm(0, TensorOptions{ScalarType::int64, kSim}).numel() == 0);
  CHECK(randperm(5, TensorOptions{ScalarType::int32, kMeta}).sizes() == Shape{5});
  CHECK_THROWS_WITH(randperm(-1, TensorOptions{ScalarType::int64, kSim}), doctest::Contains("non-negative"));
  CHECK_THROWS_WITH(randperm(300, TensorOptions{ScalarType::uint8, kSim}), doctest::Contains("too large"));

  // n = 1000: ceil(log2(1000 + 6e6 / 1.264)) = 23 bits, int32 keys. result 8000, the range check's 0-d int64
  // (8, freed), arange 8000, keys 4000, sorted keys 4000, CUB scratch (one tile: 1000 <= 4864 items, 1 byte),
  // then sorted keys, keys, arange freed.
  for (const Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    CHECK(allocation_events(d,
                            [&] {
                              (void)randperm(1000, TensorOptions{ScalarType::int64, d});
                            }) == AllocationEvents{{"alloc", 8000},
                                                   {"alloc", 8},
                                                   {"free", 8},
                                                   {"alloc", 8000},
                                                   {"alloc", 4000},
                                                   {"alloc", 4000},
                                                   {"alloc", 1},
                                                   {"free", 1},
                                                   {"free", 4000},
                                                   {"free", 4000},
                                                   {"free", 8000},
                                                   {"free", 8000}});
  }
  // n = 2^16: 2^32 * 6 / 1.264 needs 35 bits: int64 keys (8 bytes each), 5 passes of 8 bits. CUB's onesweep
  // scratch: bins 5 * 256 * 8 = 10240; lookback over tiles of 384 threads x 12 items (CUB's sm90 24 for 8-byte
  // keys and values, x 4 / 8): ceil(65536 / 4608) = 15 tiles * 256 * 4 = 15360; second key and value buffers
  // 65536 * 8 = 524288 each; counters 5 * 4 = 20 -> 256; + 255: 1074687 (PyTorch's, op_table_events.jsonl).
  const int64_t n = 65536;
  CHECK(allocation_events(kMeta,
                          [&] {
                            (void)randperm(n, TensorOptions{ScalarType::int64, kMeta});
                          }) == AllocationEvents{{"alloc", 524288},
                                                 {"alloc", 8},
                                                 {"free", 8},
                                                 {"alloc", 524288},
                                                 {"alloc", 524288},
                                                 {"alloc", 524288},
                                                 {"alloc", 1074687},
                                                 {"free", 1074687},
                                                 {"free", 524288},
                                                 {"free", 524288},
                                                 {"free", 524288},
                                                 {"free", 524288}});
}
