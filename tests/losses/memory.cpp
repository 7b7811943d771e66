// Device memory of the losses on sim (the goldens' simulated H100): every figure is PyTorch's arithmetic,
// written beside it. Blocks are numel * element_size rounded up to 512 bytes.
#include <doctest/doctest.h>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

Tensor random_targets(int64_t n, int64_t classes, Device d) {
  return randint(0, classes, {n}, TensorOptions{ScalarType::int64, d});
}

}  // namespace

TEST_CASE("nll_loss allocates output then total_weight; the graph keeps total_weight until backward") {
  fresh(kSim);
  {
    const Tensor log_probs = randn({256, 10}, TensorOptions{ScalarType::float32, kSim});
    const Tensor target = random_targets(256, 10, kSim);
    {
      MemoryProbe p(kSim);
      const Tensor loss = nll_loss(log_probs, target);
      // Without a graph total_weight is freed on return: one 0-d float32 block remains (4 bytes asked).
      CHECK(p.allocated_delta_is(512));
      CHECK(p.requested_delta() == 4);
      CHECK(p.peak_allocated_delta_is(512 + 512));  // output + total_weight
    }
    {
      MemoryProbe p(kSim);
      const Tensor loss = nll_loss(log_probs, target, Reduction::none);
      CHECK(loss.sizes() == Shape{256});
      CHECK(p.allocated_delta_is(256 * 4));             // 1024: the (N) output; total_weight (512) was freed
      CHECK(p.peak_allocated_delta_is(256 * 4 + 512));  // 1536
    }
    {
      // A non-contiguous input is copied after both outputs (expect_contiguous), and freed on return.
      const Tensor wide = randn({10, 256}, TensorOptions{ScalarType::float32, kSim});
      MemoryProbe p(kSim);
      const Tensor loss = nll_loss(wide.t(), target);
      CHECK(p.allocated_delta_is(512));
      CHECK(p.peak_allocated_delta_is(512 + 512 + 256 * 10 * 4));  // output, total_weight, the 10240-byte copy
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("cross_entropy (256, 10) float32: log_softmax output + loss + total_weight, then backward") {
  fresh(kSim);
  {
    const Tensor logits = randn({256, 10}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    const Tensor target = random_targets(256, 10, kSim);
    const int64_t probs = 256 * 10 * 4;  // 10240, a multiple of 512
    MemoryProbe p(kSim);
    Tensor loss = cross_entropy(logits, target);
    // log_softmax's output (saved by LogSoftmaxBackward0 and NllLossBackward0), the 0-d loss, the 0-d
    // total_weight (saved by NllLossBackward0).
    CHECK(p.allocated_delta_is(probs + 512 + 512));
    CHECK(p.blocks_delta() == 3);
    CHECK(p.requested_delta() == probs + 4 + 4);
    caching_allocator(kSim).reset_peak_stats();
    loss.backward();
    // Backward: the root gradient (512, held until backward returns); NllLossBackward0's zeroed gradient
    // (10240); then its saved total_weight is released (-512); LogSoftmaxBackward0's gradient (10240),
    // while the incoming one is still alive: the peak.
    CHECK(p.peak_allocated_delta_is((probs + 512 + 512) + 512 + probs - 512 + probs));
    // Afterwards: the loss and logits.grad (LogSoftmaxBackward0's output, stolen by AccumulateGrad); the
    // log_softmax output went with the graph.
    CHECK(p.allocated_delta_is(512 + probs));
    CHECK(logits.grad().sizes() == Shape{256, 10});
  }
  CHECK(allocated() == 0);
}

TEST_CASE("cross_entropy without a graph frees log_softmax's output and total_weight on return") {
  fresh(kSim);
  {
    const Tensor logits = randn({256, 10}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    const Tensor target = random_targets(256, 10, kSim);
    NoGradGuard no_grad;
    MemoryProbe p(kSim);
    const Tensor loss = cross_entropy(logits, target);
    CHECK(p.allocated_delta_is(512));
    CHECK(p.peak_allocated_delta_is(256 * 10 * 4 + 512 + 512));
  }
  CHECK(allocated() == 0);
}

TEST_CASE("nll_loss_backward allocates one zeroed input-sized gradient") {
  fresh(kSim);
  {
    const Tensor log_probs = randn({100, 7}, TensorOptions{ScalarType::float32, kSim});
    const Tensor target = random_targets(100, 7, kSim);
    const Tensor grad = ones({}, TensorOptions{ScalarType::float32, kSim});
    const Tensor total_weight = full({}, 100.0, TensorOptions{ScalarType::float32, kSim});
    MemoryProbe p(kSim);
    const Tensor g = nll_loss_backward(grad, log_probs, target, total_weight, Reduction::mean, -100);
    CHECK(p.allocated_delta_is(block(100 * 7 * 4)));  // 2800 bytes -> a 3072-byte block
    CHECK(p.blocks_delta() == 1);
    CHECK(p.peak_allocated_delta_is(block(100 * 7 * 4)));
    // Every row holds -1 / 100 at its target and 0 elsewhere.
    const auto values = g.tolist();
    double total = 0;
    for (double v : values) total += v;
    CHECK(total == doctest::Approx(-1.0).epsilon(1e-5));
  }
  CHECK(allocated() == 0);
}

TEST_CASE(
    "mse_loss: a 0-d output holding an input-sized block, an input-sized temporary; backward one gradient per "
    "operand") {
  fresh(kSim);
  {
    const int64_t in_bytes = 64 * 33 * 4;  // 8448 -> block 8704
    const Tensor input = randn({64, 33}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    const Tensor target = randn({64, 33}, TensorOptions{ScalarType::float32, kSim});
    {
      MemoryProbe p(kSim);
      Tensor loss = mse_loss(input, target);
      // The structured result, allocated input-sized and resized to 0-d (keeping its block), then the
      // (input - target)^2 temporary, freed on return (PyTorch on the H100: alloc 8448, alloc 8448, free
      // 8448). The node saves input and target, which the caller already holds: nothing more.
      CHECK(loss.dim() == 0);
      CHECK(p.allocated_delta_is(block(in_bytes)));
      CHECK(p.peak_allocated_delta_is(2 * block(in_bytes)));
      caching_allocator(kSim).reset_peak_stats();
      loss.backward();
      // root gradient (512) + input's gradient (zeros_like(input): 8704, stolen into input.grad).
      CHECK(p.peak_allocated_delta_is(block(in_bytes) + 512 + block(in_bytes)));
      CHECK(p.allocated_delta_is(2 * block(in_bytes)));
    }
    input.set_grad(Tensor());
    {
      target.requires_grad_();
      MemoryProbe p(kSim);
      Tensor loss = mse_loss(input, target, Reduction::sum);
      loss.backward();
      // Both operands get a gradient: two input-sized blocks beside the loss (itself input-sized).
      CHECK(p.allocated_delta_is(3 * block(in_bytes)));
      target.set_grad(Tensor());
      input.set_grad(Tensor());
    }
    {
      MemoryProbe p(kSim);
      const Tensor rows = mse_loss(input.detach(), target.detach(), Reduction::none);
      CHECK(p.allocated_delta_is(block(in_bytes)));  // the output only
      CHECK(p.peak_allocated_delta_is(block(in_bytes)));
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("losses on meta allocate as on sim and compute nothing") {
  fresh(kMeta);
  {
    const Tensor logits = empty({256, 10}, TensorOptions{ScalarType::float32, kMeta}).requires_grad_();
    const Tensor target = empty({256}, TensorOptions{ScalarType::int64, kMeta});
    MemoryProbe p(kMeta);
    Tensor loss = cross_entropy(logits, target);
    CHECK(loss.dim() == 0);
    CHECK(loss.is_meta());
    CHECK(p.allocated_delta_is(256 * 10 * 4 + 512 + 512));
    loss.backward();
    CHECK(p.allocated_delta_is(512 + 256 * 10 * 4));
    CHECK(logits.grad().sizes() == Shape{256, 10});
    const Tensor m = mse_loss(logits.detach(), logits.detach());
    CHECK(m.dim() == 0);
  }
  CHECK(allocated(kMeta) == 0);
}
