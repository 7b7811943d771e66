// seed002's tensor part (programs/seed_programs/small_linear.cpp): a 10x10 layer's two parameters and a
// one-element tensor on the device, deleted, then empty_cache, against shared/golden/scenarios/
// seed002_small_linear.json at every mark.
#include "programs/seed_programs.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

TEST_CASE("seed002_small_linear (nn::Linear moved to the device) matches the golden on sim") {
  const auto steps = run_scenario("seed002_small_linear", kSim, run_seed002_small_linear);
  check_marks(steps, golden("seed002_small_linear"));
  // 400 + 40 bytes requested (param_bytes), rounded to two 512-byte blocks in one 2 MiB segment.
  CHECK(steps[0].requested == 440);
  CHECK(steps[0].allocated == 2 * 512);
  CHECK(steps[0].inactive_split == 2097152 - 1024);
}

TEST_CASE("seed002_small_linear (nn::Linear moved to the device) matches the golden on meta") {
  check_marks(run_scenario("seed002_small_linear", kMeta, run_seed002_small_linear), golden("seed002_small_linear"));
}
