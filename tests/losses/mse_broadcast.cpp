// mse_loss of an input and a target of different shapes, as torch.nn.functional.mse_loss: its UserWarning,
// then torch.broadcast_tensors (an expand of each operand whose shape differs: views, no memory) and the
// same loss on the broadcast shape. Memory is arithmetic (numel * 4 rounded up to 512); gradients are
// checked against finite differences in float64.
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>
#include <string>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// What a piece of a test writes to std::cerr.
template <typename Run>
std::string stderr_of(Run&& run) {
  std::ostringstream captured;
  std::streambuf* previous = std::cerr.rdbuf(captured.rdbuf());
  try {
    run();
  } catch (...) {
    std::cerr.rdbuf(previous);
    throw;
  }
  std::cerr.rdbuf(previous);
  return captured.str();
}

}  // namespace

TEST_CASE("mse_loss warns with PyTorch's text, once per pair of shapes, and broadcasts") {
  fresh(kSim);
  const Tensor input = ones({7, 1}, device(kSim));
  const Tensor target = zeros({7}, device(kSim));
  Tensor loss;
  const std::string first = stderr_of([&] { loss = mse_loss(input, target, Reduction::none); });
  CHECK(first ==
        "UserWarning: Using a target size (torch.Size([7])) that is different to the input size (torch.Size([7, "
        "1])). This will likely lead to incorrect results due to broadcasting. Please ensure they have the same "
        "size.\n");
  CHECK(loss.sizes() == Shape{7, 7});  // (7, 1) against (7,): every input row against every target
  CHECK(stderr_of([&] { mse_loss(input, target); }) == "");  // the same shapes again: already warned
  // Other shapes warn again; equal shapes never do.
  CHECK(contains(stderr_of([&] {
                   mse_loss(ones({7, 1}, device(kSim)), zeros({1, 7}, device(kSim)));
                 }),
                 "Using a target size (torch.Size([1, 7])) that is different to the input size (torch.Size([7, 1]))"));
  CHECK(stderr_of([&] { mse_loss(input, ones({7, 1}, device(kSim))); }) == "");
}

TEST_CASE("broadcast mse_loss values: the mean over the broadcast shape") {
  // input (2, 1) = [[1], [3]], target (3,) = [0, 1, 2]: squared differences
  // [[1, 0, 1], [9, 4, 1]]: sum 16, mean 16 / 6.
  const Tensor input = from_vector({1.0, 3.0}, {2, 1}, device(kCpu));
  const Tensor target = tensor({0.0, 1.0, 2.0}, device(kCpu));
  CHECK(mse_loss(input, target, Reduction::sum).item() == doctest::Approx(16.0));
  CHECK(mse_loss(input, target).item() == doctest::Approx(16.0 / 6.0));
  CHECK(mse_loss(input, target, Reduction::none).tolist() == std::vector<double>{1, 0, 1, 9, 4, 1});
}

TEST_CASE("broadcast mse_loss gradients against finite differences (float64)") {
  const TensorOptions f64{ScalarType::float64, kCpu};
  manual_seed(3);
  for (Reduction r : {Reduction::mean, Reduction::sum}) {
    CAPTURE(static_cast<int>(r));
    // Both operands expanded: (3, 1) and (4,) -> (3, 4).
    check_gradients([r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); },
                    {randn({3, 1}, f64), randn({4}, f64)});
    // Only the target expanded: (2, 5) and (5,).
    check_gradients([r](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], r); },
                    {randn({2, 5}, f64), randn({5}, f64)});
  }
  check_gradients([](const std::vector<Tensor>& in) { return sum(mse_loss(in[0], in[1], Reduction::none)); },
                  {randn({3, 1}, f64), randn({1, 2}, f64)});
}

TEST_CASE("broadcast mse_loss memory: the broadcast shape's loss, and ExpandBackward0's sum back to the input") {
  fresh(kSim);
  {
    // The regression mistake: predictions (64, 1), targets (64,). Broadcast (64, 64): 64*64*4 = 16384 bytes
    // (a multiple of 512: block 16384). Input 64*4 = 256 -> 512; target 256 -> 512.
    const Tensor input = randn({64, 1}, {.device = kSim, .requires_grad = true});
    const Tensor target = randn({64}, device(kSim));
    const int64_t broadcast = 64 * 64 * 4;
    MemoryProbe p(kSim);
    Tensor loss;
    stderr_of([&] { loss = mse_loss(input, target); });
    // The expands are views; then mse_loss as for equal shapes: the 0-d result holding a broadcast-sized
    // block, and a broadcast-sized squared-difference temporary freed on return.
    CHECK(p.allocated_delta_is(broadcast));
    CHECK(p.peak_allocated_delta_is(2 * broadcast));
    CHECK(loss.grad_fn_name() == "MseLossBackward0");
    caching_allocator(kSim).reset_peak_stats();
    loss.backward();
    // root gradient (4 bytes -> 512); MseLossBackward0's gradient for the expanded input, broadcast-sized
    // (16384); ExpandBackward0 sums it over dim 1 to (64, 1): 256 bytes -> 512, which input.grad keeps; the
    // broadcast-sized gradient is freed once ExpandBackward0 ran.
    CHECK(p.peak_allocated_delta() - broadcast == 512 + broadcast + 512);
    CHECK(p.allocated_delta_is(broadcast + 512));
    CHECK(input.grad().sizes() == Shape{64, 1});

    // Event for event the same as expanding by hand (which is what PyTorch's broadcast_tensors does).
    input.set_grad(Tensor());
    loss = Tensor();
    AllocationEvents implicit = allocation_events(kSim, [&] {
      Tensor l;
      stderr_of([&] { l = mse_loss(input, target); });
      l.backward();
    });
    input.set_grad(Tensor());
    AllocationEvents by_hand = allocation_events(kSim, [&] {
      Tensor l = mse_loss(input.expand({64, 64}), target.expand({64, 64}));
      l.backward();
    });
    CHECK(implicit == by_hand);
    input.set_grad(Tensor());
  }
  CHECK(allocated() == 0);
}
