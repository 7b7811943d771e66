// tensor/gradient_reader.h: a loss gradient handed to its one reader, a cast, as packed rows. On sim (the
// cpu kernels) against the same graph with a hook on the cast's output (someone else may read the gradient,
// so it is written whole): the same gradient bit for bit, the same allocations and frees in the same order,
// the same peak; and the offer is made only where the cast alone reads the gradient, right after.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/fresh_device.h"

using namespace bytegrad;
using bytegrad::testing::FreshDevice;

namespace {

struct Outcome {
  std::vector<double> grad;                             // the logits' gradient
  std::vector<std::pair<std::string, size_t>> history;  // (action, requested bytes), in order
  int64_t peak = 0;
  uint64_t packed = 0;  // gradients handed on as packed rows
};

enum class Reader { cast_alone, cast_hooked, cast_and_sum };

// log_softmax of bfloat16 logits, cast to float32, nll_loss (autocast's order for a 16-bit loss), backward.
Outcome run(Reduction reduction, bool weighted, Reader reader) {
  FreshDevice fresh(kSim);
  caching_allocator(kSim).record_history(true);
  manual_seed(7);
  const TensorOptions bf16{ScalarType::bfloat16, kSim};
  const Tensor logits = randn({6, 10}, bf16).requires_grad_();
  // Row 3's target is ignore_index (4 is a class otherwise): its gradient row stays zero.
  const Tensor target = from_vector({1, 9, 0, 4, 7, 2}, {6}, TensorOptions{ScalarType::int64, kSim});
  const Tensor weight = from_vector({1, 2, 3, 1, 0.5, 1, 1, 2, 1, 4}, {10}, TensorOptions{ScalarType::float32, kSim});
  Outcome outcome;
  {
    const Tensor cast = log_softmax(logits, 1).to(ScalarType::float32);
    if (reader == Reader::cast_hooked) cast.register_hook([](const Tensor& g) { return g; });
    Tensor loss =
        nll_loss(cast, target, reduction, /*ignore_index=*/4, weighted ? std::optional(weight) : std::nullopt);
    if (reduction == Reduction::none) loss = loss.sum();
    if (reader == Reader::cast_and_sum) loss = loss + cast.sum();
    const uint64_t before = packed_gradients_handed(PackedGradient::nll_rows);
    loss.backward();
    outcome.packed = packed_gradients_handed(PackedGradient::nll_rows) - before;
  }
  outcome.grad = logits.grad().tolist();
  outcome.peak = max_memory_allocated(kSim);
  for (const TraceEntry& e : caching_allocator(kSim).snapshot().trace)
    outcome.history.emplace_back(std::string(trace_action_name(e.action)), e.size);
  caching_allocator(kSim).record_history(false);
  return outcome;
}

}  // namespace

TEST_CASE("a loss gradient handed to its cast as packed rows: the whole gradient's bits, allocations and peak") {
  for (const Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none})
    for (const bool weighted : {false, true}) {
      CAPTURE(static_cast<int>(reduction));
      CAPTURE(weighted);
      const Outcome packed = run(reduction, weighted, Reader::cast_alone);
      const Outcome whole = run(reduction, weighted, Reader::cast_hooked);
      CHECK(packed.packed == 1);
      CHECK(whole.packed == 0);  // a hook on the cast's output may read the gradient: no offer
      CHECK(packed.grad == whole.grad);
      CHECK(packed.history == whole.history);
      CHECK(packed.peak == whole.peak);
      // The ignored row's gradient is zero, the others are not.
      for (int64_t j = 0; j < 10; ++j) CHECK(whole.grad[3 * 10 + j] == 0.0);
      CHECK(whole.grad[0] != 0.0);
    }
}

TEST_CASE("no packed rows where the cast's output has another reader") {
  const Outcome shared = run(Reduction::mean, false, Reader::cast_and_sum);
  CHECK(shared.packed == 0);
  CHECK(shared.grad.size() == 60);
}
