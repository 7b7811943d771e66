// Autocast (tensor/autocast.h): PyTorch 2.11's CUDA op policy and cast cache, on sim and meta. Event
// sequences are PyTorch's as recorded on the H100 (tests/data/pytorch_probes/gpt2_ops/ws0/
// g_gpt2_tiny_bf16.events: the first block's c_attn under autocast casts its bias, then its weight, then its
// input, then allocates its output); sizes are worked out beside each check.
#include <doctest/doctest.h>

#include <algorithm>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const TensorOptions f32(Device d) { return TensorOptions{ScalarType::float32, d}; }

AllocationEvents sorted(AllocationEvents events) {
  std::sort(events.begin(), events.end());
  return events;
}

}  // namespace

TEST_CASE("linear under bfloat16 autocast: bias, weight, input cast in that order; cached weight casts freed at exit") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    manual_seed(0);
    nn::Linear c_attn(64, 192, true, f32(d));
    const Tensor x = randn({4, 64, 64}, f32(d));  // no grad: the node saves only mat1 (the input's cast)
    Tensor y;
    AllocationEvents inside, second, at_exit;
    {
      AutocastGuard autocast(d.type, ScalarType::bfloat16);
      inside = allocation_events(d, [&] { y = c_attn.forward(x); });
      CHECK(autocast_cache_size() == 2);  // weight and bias: leaves that require grad
      // The second use finds both casts cached: only the input's cast and the output.
      Tensor y2;
      second = allocation_events(d, [&] { y2 = c_attn.forward(x); });
      at_exit = allocation_events(d, [&] { y2 = Tensor(); });
    }
    CHECK(autocast_cache_size() == 0);
    CHECK(y.dtype() == ScalarType::bfloat16);
    // bias 192 * 2 = 384; weight 192 * 64 * 2 = 24576; input 4 * 64 * 64 * 2 = 32768; output 4 * 64 * 192 * 2
    // = 98304 bytes (PyTorch's trace: alloc 384, 24576, 32768, 98304).
    CHECK(inside == AllocationEvents{{"alloc", 384}, {"alloc", 24576}, {"alloc", 32768}, {"alloc", 98304}});
    CHECK(second == AllocationEvents{{"alloc", 32768}, {"alloc", 98304}});
    // Dropping y2 frees its output and the input cast its node saved.
    CHECK(sorted(at_exit) == AllocationEvents{{"free", 32768}, {"free", 98304}});
  }
}

TEST_CASE("leaving the outermost region frees the cached casts no graph saved; a nested region keeps them") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  manual_seed(0);
  nn::Linear fc(64, 32, true, f32(d));
  const Tensor x = randn({8, 64}, f32(d));
  Tensor y;
  Probe probe(d);
  {
    AutocastGuard outer(d.type, ScalarType::bfloat16);
    {
      AutocastGuard inner(d.type, ScalarType::bfloat16, /*enabled=*/false);
      CHECK_FALSE(is_autocast_enabled());
      CHECK(fc.forward(x).dtype() == ScalarType::float32);  // autocast off inside: no casts
    }
    CHECK(is_autocast_enabled());
    y = fc.forward(x);
    {
      AutocastGuard inner(d.type, ScalarType::bfloat16);
    }
    CHECK(autocast_cache_size() == 2);  // the inner region's exit does not clear the cache
    // Live: bias cast block(32 * 2) = 512, weight cast 32 * 64 * 2 = 4096, input cast 8 * 64 * 2 = 1024,
    // output 8 * 32 * 2 = 512.
    CHECK(probe.bytes() == 512 + 4096 + 1024 + 512);
  }
  // x needs no grad, so addmm's node saved only mat1 (the input's cast); the weight and bias casts go.
  CHECK(probe.bytes() == 1024 + 512);
  CHECK(y.dtype() == ScalarType::bfloat16);
}

TEST_CASE("gradients reach float32 parameters through the casts; saved bf16 casts live until backward") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    manual_seed(0);
    nn::Linear fc(16, 8, true, f32(d));
    const Tensor x = randn({4, 16}, f32(d)).requires_grad_();
    Tensor loss;
    Probe probe(d);
    {
      AutocastGuard autocast(d.type, ScalarType::bfloat16);
      loss = fc.forward(x).sum();
    }
    // Live after the region: the input's cast (saved as mat1, 4 * 16 * 2 = 128 -> a 512-byte block), the
    // weight's cast (mat2, 8 * 16 * 2 = 256 -> 512) and the 0-d loss (512). The bias cast went with the
    // cache, and the product's output with its last reference (SumBackward0 keeps only the shape). sum is not
    // wrapped, so the loss is bfloat16.
    CHECK(probe.bytes() == 512 + 512 + 512);
    CHECK(loss.dtype() == ScalarType::bfloat16);
    loss.backward();
    CHECK(fc.weight().grad().dtype() == ScalarType::float32);
    CHECK(fc.bias().grad().dtype() == ScalarType::float32);
    CHECK(x.grad().dtype() == ScalarType::float32);
  }
}

TEST_CASE("the policy: float32 ops cast up, lower-precision ops cast down, others keep their operands' dtype") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor a = randn({4, 8}, f32(d));
  const Tensor h = randn({4, 8}, f32(d)).to(ScalarType::bfloat16);
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  CHECK(matmul(a, h.t()).dtype() == ScalarType::bfloat16);     // lower precision
  CHECK(mm(a, a.t()).dtype() == ScalarType::bfloat16);
  CHECK(softmax(h, -1).dtype() == ScalarType::float32);        // float32 unless a dtype is given
  CHECK(log_softmax(h, -1).dtype() == ScalarType::float32);
  CHECK(exp(h).dtype() == ScalarType::float32);                // float32
  CHECK(layer_norm(h, {8}).dtype() == ScalarType::float32);
  CHECK(gelu(h).dtype() == ScalarType::bfloat16);              // not listed: its operand's dtype
  CHECK(gelu(a).dtype() == ScalarType::float32);
  CHECK(dot(a.flatten(), a.flatten()).dtype() == ScalarType::float32);  // promote: the widest operand
  CHECK(dot(h.flatten(), h.flatten()).dtype() == ScalarType::bfloat16);
  const Tensor target = zeros({4}, TensorOptions{ScalarType::int64, d});
  CHECK(cross_entropy(h, target).dtype() == ScalarType::float32);  // log_softmax and nll_loss run in float32
}

TEST_CASE("softmax of a bfloat16 input: a float32 cast, the float32 output, the cast freed on return") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor att = randn({4, 2, 64, 64}, f32(d)).to(ScalarType::bfloat16);
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  Tensor p;
  const AllocationEvents events = allocation_events(d, [&] { p = softmax(att, -1); });
  // 4 * 2 * 64 * 64 * 4 = 131072 for the cast and for the output (PyTorch's trace: _to_copy alloc 131072,
  // _softmax alloc 131072; without a graph the cast goes at once).
  CHECK(events == AllocationEvents{{"alloc", 131072}, {"alloc", 131072}, {"free", 131072}});
}

TEST_CASE("only float32 leaves that require grad and are not views are cached") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor w = randn({8, 8}, f32(d)).requires_grad_();
  const Tensor plain = randn({8, 8}, f32(d));
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  Tensor nonleaf = w * 2.0;
  (void)mm(plain, plain);  // no grad: not cached
  CHECK(autocast_cache_size() == 0);
  (void)mm(nonleaf, nonleaf);  // not a leaf
  CHECK(autocast_cache_size() == 0);
  (void)mm(w.t(), w.t());  // a view of the leaf
  CHECK(autocast_cache_size() == 0);
  (void)mm(w, w);  // the leaf itself: one entry, used for both operands
  CHECK(autocast_cache_size() == 1);
}

TEST_CASE("AutocastGuard refuses cpu and dtypes other than float16 and bfloat16") {
  CHECK_THROWS_WITH_AS(AutocastGuard(DeviceType::cpu, ScalarType::bfloat16),
                       doctest::Contains("autocast on cpu is not supported"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(AutocastGuard(DeviceType::sim, ScalarType::float32),
                       doctest::Contains("float16 or bfloat16, not float32"), std::invalid_argument);
  CHECK_FALSE(is_autocast_enabled());
}
