// Code A on seed003's own 6 GiB card (programs/seed_programs/small_card_oom.cpp): five tensors fit, the sixth fails
// with PyTorch 2.11's message, and clearing gives everything back. Run on meta: on sim the five 916 MiB
// randn draws take over a minute of host writes; the allocator and the message are the same code.
#include "bytegrad/memory/format_size.h"
#include "programs/seed_programs.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

// Restores the default card whatever the test does.
struct SmallCard {
  ~SmallCard() { configure_simulated_device(kMeta, SimulatedCapacity{}); }
};

}  // namespace

TEST_CASE("seed003 code A on a 6 GiB card fails at the sixth tensor with PyTorch 2.11's message") {
  SmallCard restore;
  ScenarioRecorder r("seed003_code_a_small_card", kMeta);
  run_seed003_code_a_small_card(r);

  // The seed's own figures, from its message: each tensor 960,000,000 B -> 458 * 2 MiB = 960495616.
  const uint64_t tensor_block = 458 * 2097152ull, total = 6ull << 30, held = 5 * tensor_block;
  const uint64_t context = seed003_card().context_bytes, free = total - context - held;
  CHECK(format_size(tensor_block) == "916.00 MiB");
  CHECK(format_size(total) == "6.00 GiB");
  CHECK(format_size(held) == "4.47 GiB");
  CHECK(format_size(free) == "186.44 MiB");

  const auto& steps = r.steps();
  REQUIRE(steps.size() == 7);  // A_alloc1..5, A_oom, A_cleared
  // Up to the fifth tensor the card behaves as the 80 GiB one under its cap (golden A_alloc1..5);
  // peaks differ because the golden's run had code B before.
  const auto want = golden("seed003_randn");
  for (int i = 0; i < 5; ++i) {
    CAPTURE(i);
    CHECK(steps[i].label == "A_alloc" + std::to_string(i + 1));
    const GoldenStep& g =
        *std::find_if(want.begin(), want.end(), [&](const GoldenStep& s) { return s.label == steps[i].label; });
    check_marks({steps[i]}, {g}, {"max_allocated", "max_reserved"});
  }

  const GoldenStep& oom = steps[5];
  CHECK(oom.label == "A_oom");
  CHECK(oom.allocated == static_cast<int64_t>(held));  // the failed request left no trace
  CHECK(oom.blocks == 5);
  const std::string expected =
      "CUDA out of memory. Tried to allocate " + format_size(tensor_block) + ". GPU 0 has a total capacity of " +
      format_size(total) + " of which " + format_size(free) +
      " is free. Including non-PyTorch memory, this process has " + format_size(context + held) +
      " memory in use. Of the allocated memory " + format_size(held) + " is allocated by PyTorch, and " +
      format_size(0) +
      " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
      "Management  "
      "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  CHECK(oom.message == expected);

  const GoldenStep& cleared = steps[6];
  CHECK(cleared.label == "A_cleared");
  CHECK(cleared.reserved == 0);
  CHECK(cleared.segments == 0);
  CHECK(stat(kMeta, "num_ooms") == 1);
  CHECK(stat(kMeta, "num_alloc_retries") == 1);  // the flush-and-retry ran once (nothing was free)
  CHECK(caching_allocator(kMeta).mem_get_info().free == total - context);
}
