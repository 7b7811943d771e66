// The golden programs with expandable segments (BYTEGRAD_ALLOC_CONF=expandable_segments:True, PyTorch's
// PYTORCH_CUDA_ALLOC_CONF; CUBLAS_WORKSPACE_CONFIG=:0:0): every mark against shared/golden/
// scenarios-expandable, on sim and on meta, and seed000's memory_summary() against the one PyTorch printed.
// segments and inactive_split stay 0 there; reserved moves by mapped pages (2 MiB small, 20 MiB large).
#include <algorithm>
#include <fstream>
#include <sstream>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/reports/memory_summary.h"
#include "programs/registry.h"
#include "programs/seed_programs.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

constexpr Workspaces kExpandable = Workspaces::none_expandable_segments;

json::Value golden_document(const std::string& name) {
  const std::string path = golden_scenario_path(name, false, true);
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

const GoldenStep& step(const std::vector<GoldenStep>& steps, const std::string& label) {
  auto it = std::find_if(steps.begin(), steps.end(), [&](const GoldenStep& s) { return s.label == label; });
  REQUIRE_MESSAGE(it != steps.end(), "no mark " << label);
  return *it;
}

}  // namespace

TEST_CASE("every golden program with expandable segments matches scenarios-expandable on sim and meta") {
  for (const Program& example : seed_programs()) {
    if (!example.has_golden) continue;
    // seed003 draws 4 GB of random numbers: sim computes them all, meta only counts (the same figures);
    // sim runs it scaled down below.
    const bool slow_on_sim = example.name == "seed003_randn";
    for (Device d : {kSim, kMeta}) {
      if (slow_on_sim && d == kSim) continue;
      check_against_golden(example.name, d, example.run, kExpandable);
    }
  }
}

TEST_CASE("seed000 with expandable segments: memory_summary() at loop_end equals PyTorch's") {
  for (const char* name :
       {"seed000_builtin_sum", "seed000_torch_sum", "seed000_wide_builtin_sum", "seed000_wide_torch_sum"}) {
    const json::Value document = golden_document(name);
    const std::string want = document["notes"]["summary"].string();
    for (Device d : {kSim, kMeta}) {
      CAPTURE(name);
      CAPTURE(d.str());
      const Program* program = nullptr;
      for (const Program& p : seed_programs())
        if (p.name == name) program = &p;
      REQUIRE(program != nullptr);
      std::string got;
      {
        GoldenConditions conditions(d, kExpandable);
        ScenarioRecorder r(name, d);
        // PyTorch printed it inside the program, right after its last mark, with every tensor still alive.
        r.on_mark([&](const GoldenStep& s) {
          if (s.label == "loop_end") got = memory_summary(caching_allocator(d));
        });
        program->run(r);
      }
      CHECK(got == want);
    }
  }
}

namespace {

// seed003 at 1/67 of its size (as tests/programs/seed003_randn.cpp runs it on sim without the option):
//   big:    200*300*3*20 floats = 14,400,000 B;  bigger: 300*300*4*20 floats = 28,800,000 B.
// With expandable segments a block is exactly its (512-rounded) request, split from mapped 20 MiB pages.
const Seed003Shapes kScaled{{200, 300, 3, 20}, {300, 300, 4, 20}};
constexpr int64_t kBig = 14400000, kBigger = 28800000, kPage = 20971520, kSmallPage = 2097152;

void run_scaled(ScenarioRecorder& r) { run_seed003_randn(r, kScaled); }

}  // namespace

TEST_CASE("seed003 scaled down with expandable segments: sim agrees with meta, with the golden's arithmetic") {
  const auto on_sim = run_scenario("seed003_randn_scaled", kSim, run_scaled, kExpandable);
  const auto on_meta = run_scenario("seed003_randn_scaled", kMeta, run_scaled, kExpandable);
  check_marks(on_sim, on_meta);
  REQUIRE(on_sim.size() == golden("seed003_randn", kExpandable).size());
  // big1: one 20 MiB page holds the 14.4 MB block (the 2x3 keeps its 2 MiB small page).
  CHECK(step(on_sim, "big1").allocated == kBig);
  CHECK(step(on_sim, "big1").reserved == kSmallPage + kPage);
  // Code B: the second tensor takes the first page's free tail (20971520 - 14400000 = 6571520) and one
  // more page; later ones reuse the first tensor's place.
  CHECK(step(on_sim, "B_assign2").reserved == 2 * kPage);
  CHECK(step(on_sim, "B_assign6").reserved == 2 * kPage);
  // Code A: six live tensors packed end to end, 6 * 14400000 = 86400000 B, on ceil(86400000 / 20 MiB) = 5
  // pages (without the option: one 14680064-byte segment each).
  CHECK(step(on_sim, "A_alloc6").reserved == 5 * kPage);
  CHECK(step(on_sim, "A_cleared").reserved == 0);
  // bigger after big: 14400000 + 28800000 = 43200000 B end to end: ceil(43200000 / 20 MiB) = 3 pages.
  CHECK(step(on_sim, "bigger_after_big").allocated == kBigger);
  CHECK(step(on_sim, "bigger_after_big").reserved == 3 * kPage);
  for (const GoldenStep& s : on_sim) {
    CAPTURE(s.label);
    CHECK(s.segments == 0);
    CHECK(s.inactive_split == 0);
  }
}
