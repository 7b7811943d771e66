// Attention masks: triu/tril, PyTorch's allocation events for the masked-softmax probes (events.jsonl "ops"
// rows "masked_fill causal", "add float mask", "masked_fill_ inplace": forward and backward of scores ->
// masked -> softmax on an H100) on sim, and MultiheadSelfAttention with bool / additive / causal masks:
// gradients against finite differences in float64, causality, memory, errors.
#include <cmath>
#include <cstdlib>
#include <regex>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/attention.h"
#include "nn_helpers.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/pytorch_probes.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

using Events = AllocationEvents;

Events parse_events(const Json& events, const std::string& key) {
  const Json* list = events.find(key);
  return list ? events_of(*list) : Events{};
}

template <typename Run>
Events record_events(Run&& run) {
  return allocation_events(kSim, std::forward<Run>(run));
}

struct NoWorkspace {
  NoWorkspace() { setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1); }
  ~NoWorkspace() { unsetenv("CUBLAS_WORKSPACE_CONFIG"); }
};

Tensor causal_bool(int64_t L, Device d) { return triu(ones({L, L}, TensorOptions{ScalarType::bool_, d}), 1); }

}  // namespace

TEST_CASE("triu / tril: values, batches, diagonals, gradient, one allocation") {
  Tensor x = arange(1, 13, 1, f64()).view({3, 4});
  CHECK(triu(x).tolist() == std::vector<double>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(triu(x, 1).tolist() == std::vector<double>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  CHECK(tril(x).tolist() == std::vector<double>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(tril(x, -1).tolist() == std::vector<double>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  // a transposed input, and a batch of matrices
  CHECK(triu(x.t()).tolist() == std::vector<double>{1, 5, 9, 0, 6, 10, 0, 0, 11, 0, 0, 0});
  Tensor b = arange(8, f64()).view({2, 2, 2});
  CHECK(triu(b).tolist() == std::vector<double>{0, 1, 0, 3, 4, 5, 0, 7});
  // bool, as masks are made
  Tensor m = causal_bool(3, kCpu);
  CHECK(m.dtype() == ScalarType::bool_);
  CHECK(m.tolist() == std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0});
  manual_seed(31);
  Tensor w = randn({3, 4}, f64());
  check_gradients([&](auto& v) { return sum(triu(v[0], 1) * w) + sum(tril(v[0], -1) * w * w); },
                  {randn({3, 4}, f64())});
  CHECK_THROWS_WITH_AS(triu(ones({3})), doctest::Contains("at least 2 dimensions"), std::invalid_argument);
  // memory: ones (L*L bytes) then triu's result, the ones freed at once, as torch.triu(torch.ones(...), 1)
  fresh_sim();
  Events e = record_events([] { Tensor mask = causal_bool(64, kSim); });
  CHECK(e == Events{{"alloc", 4096}, {"alloc", 4096}, {"free", 4096}, {"free", 4096}});
}

TEST_CASE("masked softmax: PyTorch's events for masked_fill / float mask / masked_fill_ probes, on sim") {
  static const std::regex case_re(
      R"re(((masked_fill causal|add float mask|masked_fill_ inplace) \[([0-9]+),([0-9]+),([0-9]+),([0-9]+)\]))re");
  int matched = 0, total = 0;
  for (const Json& row : probe_rows("ops")) {
    const std::string& case_name = row["case"].string();
    std::smatch m;
    if (!std::regex_match(case_name, m, case_re)) continue;
    ++total;
    const std::string name = m[1], kind = m[2];
    CAPTURE(name);
    const int64_t b = std::stoll(m[3]), h = std::stoll(m[4]), l = std::stoll(m[5]);
    const Events forward = parse_events(row["events"], "forward"), backward = parse_events(row["events"], "backward");
    fresh_sim();
    Events f, bw;
    {
      // make_inputs (outside the recording): scores requiring grad, and the mask
      Tensor s = zeros({b, h, l, l}, device(kSim)).requires_grad_(true);
      Tensor mask = causal_bool(l, kSim);
      if (kind == "add float mask") mask = masked_fill(zeros({l, l}, device(kSim)), mask, -INFINITY);
      Tensor y;
      f = record_events([&] {
        if (kind == "masked_fill causal") y = softmax(s.masked_fill(mask, -INFINITY), -1);
        else if (kind == "add float mask") y = softmax(s + mask, -1);
        else y = softmax((s * 1.0).masked_fill_(mask, -INFINITY), -1);
      });
      Tensor g = ones_like(y);
      bw = record_events([&] { y.backward(g); });
    }
    CHECK(f == forward);
    CHECK(bw == backward);
    matched += f == forward && bw == backward;
  }
  CHECK(total == 9);
  MESSAGE(matched << " of " << total << " masked-softmax probes match PyTorch event for event (forward and backward)");
}

TEST_CASE("MultiheadSelfAttention with masks: gradients match finite differences (float64)") {
  manual_seed(32);
  nn::MultiheadSelfAttention attn(4, 2, true, f64());
  const int64_t L = 3;
  Tensor x = randn({2, L, 4}, f64());
  Tensor w = randn({2, L, 4}, f64());
  Tensor bool_mask = from_vector({0, 1, 0, 0, 0, 1, 1, 0, 0}, {L, L}, TensorOptions{ScalarType::bool_, kCpu});
  Tensor float_mask = randn({L, L}, f64());
  float_mask = masked_fill(float_mask, causal_bool(L, kCpu), -INFINITY);
  Tensor head_mask = randn({2, 1, L, L}, f64());  // broadcast over heads
  SUBCASE("bool mask") {
    check_parameter_gradients(attn, [&] { return sum(attn(x, bool_mask) * w); });
    check_gradients([&](auto& v) { return sum(attn(v[0], bool_mask) * w); }, {x});
  }
  SUBCASE("additive float mask with -inf") {
    check_parameter_gradients(attn, [&] { return sum(attn(x, float_mask) * w); });
    check_gradients([&](auto& v) { return sum(attn(v[0], float_mask) * w); }, {x});
  }
  SUBCASE("additive (B, 1, L, L) mask, and its own gradient") {
    check_gradients([&](auto& v) { return sum(attn(v[0], v[1]) * w); }, {x, head_mask});
  }
  SUBCASE("is_causal") {
    check_parameter_gradients(attn, [&] { return sum(attn(x, std::nullopt, true) * w); });
    check_gradients([&](auto& v) { return sum(attn(v[0], std::nullopt, true) * w); }, {x});
  }
}

TEST_CASE("MultiheadSelfAttention masks: is_causal equals the explicit masks, and is causal") {
  manual_seed(33);
  nn::MultiheadSelfAttention attn(8, 2, true, f64());
  const int64_t L = 5;
  Tensor x = randn({2, L, 8}, f64());
  NoGradGuard no_grad;
  const std::vector<double> causal = attn(x, std::nullopt, true).tolist();
  const std::vector<double> with_bool = attn(x, causal_bool(L, kCpu)).tolist();
  Tensor additive = masked_fill(zeros({L, L}, f64()), causal_bool(L, kCpu), -INFINITY);
  const std::vector<double> with_float = attn(x, additive).tolist();
  CHECK(causal == with_bool);
  for (size_t i = 0; i < causal.size(); ++i) CHECK(causal[i] == doctest::Approx(with_float[i]).epsilon(1e-12));
  // an all-false mask (or a zero additive mask) is no mask
  const std::vector<double> plain = attn(x).tolist();
  const std::vector<double> none_masked = attn(x, zeros({L, L}, TensorOptions{ScalarType::bool_, kCpu})).tolist();
  CHECK(plain == none_masked);
  // causality: changing the last position changes no earlier output
  Tensor x2 = x.clone();
  x2.select(1, L - 1).copy_(randn({2, 8}, f64()));
  Tensor y1 = attn(x, std::nullopt, true), y2 = attn(x2, std::nullopt, true);
  CHECK(y1.slice(1, 0, L - 1).tolist() == y2.slice(1, 0, L - 1).tolist());
  CHECK(y1.select(1, L - 1).tolist() != y2.select(1, L - 1).tolist());
}

TEST_CASE("MultiheadSelfAttention masks: memory on sim (B=2, L=8, C=16, H=4)") {
  NoWorkspace no_workspace;
  fresh_sim();
  manual_seed(0);
  nn::MultiheadSelfAttention attn(16, 4, true, device(kSim));
  Tensor x = randn({2, 8, 16}, device(kSim)).requires_grad_(true);
  const int64_t base = allocated();
  int64_t plain_kept, plain_peak;
  {
    caching_allocator(kSim).reset_peak_stats();
    Tensor y = attn(x);
    plain_kept = allocated() - base;
    plain_peak = peak() - base;
  }
  {
    caching_allocator(kSim).reset_peak_stats();
    Tensor y = attn(x, std::nullopt, true);
    // MaskedFillBackward0 keeps the (8, 8) bool mask (64 bytes -> one 512-byte block); the masked scores
    // ((2,4,8,8) float32 = 2048) are transient.
    CHECK(allocated() - base == plain_kept + 512);
    // The forward peak (at the attention output's copy) is unchanged: the masked scores are gone by then.
    CHECK(peak() - base == plain_peak + 512);
    sum(y).backward();
  }
  {
    Tensor additive = zeros({8, 8}, device(kSim));
    const int64_t with_mask = allocated();
    Tensor y = attn(x, additive);
    CHECK(allocated() - with_mask == plain_kept);  // AddBackward0 keeps nothing
  }
}

TEST_CASE("MultiheadSelfAttention masks: bad masks are clear errors") {
  nn::MultiheadSelfAttention attn(4, 2, true, device(kCpu));
  Tensor x = randn({2, 3, 4}, device(kCpu));
  CHECK_THROWS_WITH_AS(attn(x, ones({3, 3}, TensorOptions{ScalarType::bool_, kCpu}), true),
                       doctest::Contains("not both"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(attn(x, ones({4, 3}, TensorOptions{ScalarType::bool_, kCpu})),
                       doctest::Contains("cannot be broadcast"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(attn(x, ones({3, 3}, TensorOptions{ScalarType::int64, kCpu})), doctest::Contains("must be bool"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(attn(x, ones({3, 3}, TensorOptions{ScalarType::bool_, kSim})), doctest::Contains("device"),
                       std::invalid_argument);
}
