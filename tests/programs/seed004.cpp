// The seed004 attention programs (programs/seed_programs/attention.cpp) on sim and meta, checked at every mark
// against the goldens recorded on an H100 with PyTorch 2.11 (shared/golden/scenarios/seed004_*.json), with
// CUBLAS_WORKSPACE_CONFIG=:0:0 as they were recorded.
#include "programs/seed_programs.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

TEST_CASE("seed004_attention_function matches the golden at every mark") {
  for (Device d : {kSim, kMeta}) {
    const auto steps = run_scenario("seed004_attention_function", d, run_seed004_attention_function);
    CAPTURE(d.str());
    REQUIRE(!steps.empty());
    CHECK(steps[0].allocated == 4 * 4194304);  // 4 tensors of 64*8*32*64 floats = 4194304 bytes
    check_marks(steps, golden("seed004_attention_function"));
  }
}

TEST_CASE("seed004_attention_global matches the golden at every mark") {
  for (Device d : {kSim, kMeta}) check_against_golden("seed004_attention_global", d, run_seed004_attention_global);
}

TEST_CASE("seed004_x_plus_1 matches the golden at every mark") {
  for (Device d : {kSim, kMeta}) check_against_golden("seed004_x_plus_1", d, run_seed004_x_plus_1);
}
