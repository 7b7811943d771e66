// seed000 (all four variants) and seed001: every mark against PyTorch's goldens (all eight figures:
// allocated, reserved, both peaks, segments, blocks, requested, inactive_split), on sim and on meta.
#include "programs/seed_programs.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

TEST_CASE("seed000: Linear -> Linear -> sum, backward, loop: every mark as PyTorch") {
  for (Device d : {kSim, kMeta}) {
    check_against_golden("seed000_torch_sum", d, run_seed000_torch_sum);
    check_against_golden("seed000_builtin_sum", d, run_seed000_builtin_sum);
    check_against_golden("seed000_wide_torch_sum", d, run_seed000_wide_torch_sum);
    check_against_golden("seed000_wide_builtin_sum", d, run_seed000_wide_builtin_sum);
  }
}

TEST_CASE("seed001: MLP forward, loss, backward, zero_grad, in-place ReLU, checkpointing, no_grad as PyTorch") {
  for (Device d : {kSim, kMeta}) check_against_golden("seed001_mlp_estimate", d, run_seed001_mlp_estimate);
}
