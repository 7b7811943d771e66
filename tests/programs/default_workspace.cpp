// The golden programs with PyTorch's default cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG unset): every mark
// against shared/golden/scenarios-default-workspace. Relative to the :0:0 runs, the first matrix product
// of the forward thread parks 32 MiB (33554432 B: 4096 KiB x 8 on sm90) and the first bias-fused one a
// 1 MiB cuBLASLt block; the first backward matmul parks another 32 MiB for the autograd device thread
// (seed001's backward: +33554432 on top of the forward's), and its checkpoint recompute, a bias-fused
// forward run by that thread, adds that thread's own 1 MiB cuBLASLt block.
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/device_allocators.h"
#include "programs/registry.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

TEST_CASE("every golden program with the default cuBLAS workspaces matches scenarios-default-workspace") {
  for (const Program& example : seed_programs()) {
    if (!example.has_golden) continue;
    // seed003 draws 4 GB of random numbers: sim computes them all, meta only counts (the same figures).
    const bool slow_on_sim = example.name == "seed003_randn";
    for (Device d : {kSim, kMeta}) {
      if (slow_on_sim && d == kSim) continue;
      check_against_golden(example.name, d, example.run, Workspaces::pytorch_default);
    }
  }
}

TEST_CASE("backward uses the autograd device thread's workspace; without multithreading the caller's") {
  constexpr int64_t kWorkspace = 4096 * 1024 * 8;  // PyTorch's default on sm90: 33554432
  for (bool multithreading : {true, false}) {
    CAPTURE(multithreading);
    GoldenConditions conditions(kSim, Workspaces::pytorch_default);
    set_autograd_multithreading_enabled(multithreading);
    auto& allocator = caching_allocator(kSim);
    Tensor w = randn({256, 256}, device(kSim)).requires_grad_();
    Tensor x = randn({256, 256}, device(kSim));
    Tensor loss = mm(x, w).sum();  // the forward's first product parks the calling thread's workspace
    const int64_t before = allocator.memory_allocated();
    loss.backward();
    // The backward keeps w.grad (256*256*4 = 262144 B) and, on the device thread, its own workspace.
    const int64_t added = allocator.memory_allocated() - before;
    CHECK(added == 262144 + (multithreading ? kWorkspace : 0));
    set_autograd_multithreading_enabled(true);
  }
}
