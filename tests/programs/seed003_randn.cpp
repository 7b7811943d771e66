// seed003 (programs/seed_programs/growing_randn.cpp): randn of growing sizes under a 6 GiB fraction, code B, code A,
// and a bigger tensor after a big one, against shared/golden/scenarios/seed003_randn.json.
// The full program allocates up to 5.4 GiB. On meta that costs nothing; on sim randn writes every element
// to host memory, and the full run takes minutes (measured: about 16 s per 240-million-value draw, 15
// draws), so sim runs the same program scaled down and must agree with meta mark for mark.
#include "programs/seed_programs.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

TEST_CASE("seed003_randn matches the golden at every mark on meta") {
  check_against_golden("seed003_randn", kMeta, run_seed003_randn);
}

namespace {

// Shapes that keep the golden's allocator regime (large pool, one segment per tensor rounded to 2 MiB,
// a tail under 1 MiB so the block is not split) at 1/67 of the size:
//   big:    200*300*3*20 floats = 14,400,000 B -> segment 7 * 2 MiB = 14680064 (tail 280064 < 1 MiB)
//   bigger: 300*300*4*20 floats = 28,800,000 B -> segment 14 * 2 MiB = 29360128 (tail 560128 < 1 MiB)
const Seed003Shapes kScaled{{200, 300, 3, 20}, {300, 300, 4, 20}};
constexpr int64_t kBigBlock = 14680064, kBiggerBlock = 29360128;

void run_scaled(ScenarioRecorder& r) { run_seed003_randn(r, kScaled); }

const GoldenStep& step(const std::vector<GoldenStep>& steps, const std::string& label) {
  auto it = std::find_if(steps.begin(), steps.end(), [&](const GoldenStep& s) { return s.label == label; });
  REQUIRE_MESSAGE(it != steps.end(), "no mark " << label);
  return *it;
}

}  // namespace

TEST_CASE("seed003_randn scaled down: sim agrees with meta at every mark, with the golden's arithmetic") {
  const auto on_sim = run_scenario("seed003_randn_scaled", kSim, run_scaled);
  const auto on_meta = run_scenario("seed003_randn_scaled", kMeta, run_scaled);
  check_marks(on_sim, on_meta);
  REQUIRE(on_sim.size() == golden("seed003_randn").size());  // the same 20 marks
  // The golden's figures with its 960495616-byte block replaced by the scaled one:
  CHECK(step(on_sim, "big1").max_allocated == kBigBlock + 512);  // the 2x3 still held while big1 is drawn
  CHECK(step(on_sim, "B_assign6").reserved == 2 * kBigBlock);    // code B: two segments, reused
  CHECK(step(on_sim, "B_assign6").max_allocated == 2 * kBigBlock);
  CHECK(step(on_sim, "A_alloc6").reserved == 6 * kBigBlock);  // code A: one segment per live tensor
  CHECK(step(on_sim, "A_cleared").reserved == 0);
  CHECK(step(on_sim, "bigger_after_big").allocated == kBiggerBlock);
  CHECK(step(on_sim, "bigger_after_big").reserved == kBigBlock + kBiggerBlock);
}
