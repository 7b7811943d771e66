// Pending scores (tensor/pending_scores.h): nanoGPT's scaled and masked attention scores left unwritten
// until softmax reads them, written out first wherever anything else touches their bytes. Held here to the
// path that writes every step at once (set_defers_scores(false)): the same bits, allocations and figures.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/pending_scores.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const TensorOptions f32(Device d) { return TensorOptions{ScalarType::float32, d}; }

// Restores the switch however a test ends.
struct DefersScores {
  explicit DefersScores(bool on) : previous(defers_scores()) { set_defers_scores(on); }
  ~DefersScores() { set_defers_scores(previous); }
  DefersScores(const DefersScores&) = delete;
  DefersScores& operator=(const DefersScores&) = delete;
  bool previous;
};

struct Run {
  AllocationEvents events;
  std::vector<double> y, q_grad, k_grad, v_grad;
  int64_t peak = 0, reserved = 0;
  uint64_t started = 0, fused = 0;
};

// nanoGPT's slow attention, as nn/gpt.cpp writes it (the mask's eq() between the scale and masked_fill),
// forward and backward, with the scores deferred or not.
Run slow_attention(bool defer, bool bf16, bool divide) {
  const DefersScores scores(defer);
  const Device d = kSim;
  const int64_t B = 2, H = 3, T = 48, hs = 16;
  manual_seed(5);
  const Tensor q = randn({B, H, T, hs}, f32(d)).requires_grad_();
  const Tensor k = randn({B, H, T, hs}, f32(d)).requires_grad_();
  const Tensor v = randn({B, H, T, hs}, f32(d)).requires_grad_();
  const Tensor bias = tril(ones({T, T}, f32(d))).view({1, 1, T, T});
  Run run;
  const uint64_t started = pending_scores_started();
  reset_peak_memory_stats(d);
  run.events = allocation_events(d, [&] {
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(d.type, ScalarType::bfloat16);
    const double root = std::sqrt(static_cast<double>(hs));
    Tensor att = divide ? matmul(q, k.transpose(-2, -1)) / root : matmul(q, k.transpose(-2, -1)) * (1.0 / root);
    att = masked_fill(att, eq(bias, 0.0), -std::numeric_limits<double>::infinity());
    att = softmax(att, -1);
    Tensor y = matmul(att, v);
    autocast.reset();
    run.y = y.to(ScalarType::float32).flatten().tolist();
    y.sum().backward();
  });
  run.started = pending_scores_started() - started;
  run.peak = max_memory_allocated(d);
  run.reserved = memory_reserved(d);
  run.q_grad = q.grad().flatten().tolist();
  run.k_grad = k.grad().flatten().tolist();
  run.v_grad = v.grad().flatten().tolist();
  return run;
}

}  // namespace

TEST_CASE("scaled and masked scores left pending give every step's bits, memory and graph") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (bool bf16 : {false, true}) {
    for (bool divide : {false, true}) {
      CAPTURE(bf16);
      CAPTURE(divide);
      const Run written = slow_attention(false, bf16, divide);
      const Run pending = slow_attention(true, bf16, divide);
      CHECK(written.started == 0);
      CHECK(pending.started == 1);    // the scale, then masked_fill took the step and softmax read both
      CHECK(pending.y == written.y);  // bit for bit
      CHECK(pending.q_grad == written.q_grad);
      CHECK(pending.k_grad == written.k_grad);
      CHECK(pending.v_grad == written.v_grad);
      CHECK(pending.events == written.events);
      CHECK(pending.peak == written.peak);
      CHECK(pending.reserved == written.reserved);
    }
  }
}

TEST_CASE("pending scores are written before anything else reads or writes their bytes") {
  const Device d = kSim;
  manual_seed(9);
  const Tensor q = randn({2, 40, 8}, f32(d)).requires_grad_();
  const Tensor k = randn({2, 40, 8}, f32(d));
  const auto scaled_values = [&](bool defer, int what) {
    const DefersScores scores(defer);
    const Tensor s = matmul(q, k.transpose(-2, -1));
    const Tensor att = s * 0.25;
    switch (what) {
      case 0: return att.sum().item();  // a reduction reads the scaled scores
      case 1: {                         // an in-place write to their source: the scale reads the source as it was
        NoGradGuard no_grad;
        s.add_(1.0);
        return att.sum().item();
      }
      case 2: {  // a plain copy of them
        const Tensor copied = att.clone();
        return copied.sum().item();
      }
      default: {  // their memory read through data_ptr (sim's is the host's)
        const auto* data = static_cast<const float*>(att.data_ptr());
        double total = 0;
        for (int64_t i = 0; i < att.numel(); ++i) total += data[i];
        return total;
      }
    }
  };
  for (int what : {0, 1, 2, 3}) {
    CAPTURE(what);
    const uint64_t started = pending_scores_started();
    const double pending = scaled_values(true, what);
    CHECK(pending_scores_started() - started == 1);
    CHECK(pending == scaled_values(false, what));
  }
}

TEST_CASE("pending scores are written before their memory goes back to the driver") {
  const Device d = kSim;
  manual_seed(13);
  const Tensor q = randn({2, 3, 40, 8}, f32(d)).requires_grad_();
  const Tensor k = randn({2, 3, 40, 8}, f32(d));
  const auto probabilities = [&](bool defer) {
    const DefersScores scores(defer);
    Tensor att = matmul(q, k.transpose(-2, -1)) * 0.5;  // the product's block is free from here on
    empty_cache(d);                                     // and handed back: the scale is written first
    return softmax(att, -1).flatten().tolist();
  };
  CHECK(probabilities(true) == probabilities(false));
}
