// The allocator's requests of two programs, event for event, against PyTorch's between every pair of marks
// (tests/data/pytorch_probes/t0 and td: tools/probes/pytorch_extra_scenarios.py with TRACE_EVENTS=1, on the
// H100, CUBLAS_WORKSPACE_CONFIG=:0:0 and the default). Equal request sequences are what makes a remaining
// difference in reserved/segments/inactive_split a matter of segment placement alone (check_programs.cpp).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "programs/checks.h"
#include "programs/registry.h"
#include "tests/support/json.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

using Events = std::vector<std::pair<std::string, int64_t>>;  // ("alloc" | "free", requested bytes)

std::vector<std::pair<std::string, Events>> pytorch_trace(const std::string& folder, const std::string& name) {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/" + folder + "/" + name + ".events.json");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::pair<std::string, Events>> marks;
  for (const Json& mark : parse_json(text.str()).items) {
    Events events;
    for (const Json& e : mark.find("events")->items) {
      const std::string action = e.items.at(0).string();
      if (action == "alloc") events.emplace_back("alloc", e.items.at(1).integer());
      if (action == "free_completed") events.emplace_back("free", e.items.at(1).integer());
    }
    marks.emplace_back(mark.find("label")->string(), std::move(events));
  }
  return marks;
}

void check_trace(const std::string& name, Workspaces workspaces) {
  const auto want = pytorch_trace(workspaces == Workspaces::none ? "t0" : "td", name);
  const Device d{DeviceType::sim, 0};
  GoldenConditions conditions(d, workspaces);
  ScenarioRecorder r(name, d);
  caching_allocator(d).record_history(true);
  std::vector<std::pair<std::string, Events>> got;
  size_t seen = 0;
  r.on_mark([&](const GoldenStep& step) {
    const std::vector<TraceEntry> trace = caching_allocator(d).snapshot().trace;
    Events events;
    for (size_t i = seen; i < trace.size(); ++i) {
      if (trace[i].action == TraceAction::alloc) events.emplace_back("alloc", static_cast<int64_t>(trace[i].size));
      if (trace[i].action == TraceAction::free_completed)
        events.emplace_back("free", static_cast<int64_t>(trace[i].size));
    }
    seen = trace.size();
    got.emplace_back(step.label, std::move(events));
  });
  for (const Program& p : extra_programs())
    if (p.name == name) p.run(r);
  caching_allocator(d).record_history(false);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(name);
    CAPTURE(want[i].first);
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second == want[i].second);
  }
}

}  // namespace

TEST_CASE("x_tiny_transformer_adamw requests what PyTorch's requests, in order, between every two marks") {
  check_trace("x_tiny_transformer_adamw", Workspaces::none);
  check_trace("x_tiny_transformer_adamw", Workspaces::pytorch_default);
}

TEST_CASE("x_mlp_sgd_momentum_mse requests what PyTorch's requests, in order, between every two marks") {
  check_trace("x_mlp_sgd_momentum_mse", Workspaces::none);
  check_trace("x_mlp_sgd_momentum_mse", Workspaces::pytorch_default);
}
