// The scenario library (programs/scenario.h): the golden reader on every shared golden file and on the
// shapes a step may take, and the recorder's JSON read back.
#include <cstdio>
#include <fstream>

#include "bytegrad/tensor/tensor.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

std::string write_temp(const std::string& text) {
  const std::string path = "/tmp/bytegrad_scenario_reader_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("every golden scenario file reads, with its step count") {
  // Counts from the files (one step per r.mark in shared/golden/scenarios.py).
  const std::vector<std::pair<std::string, size_t>> files = {
      {"seed000_builtin_sum", 8},    {"seed000_torch_sum", 8},          {"seed000_wide_builtin_sum", 8},
      {"seed000_wide_torch_sum", 8}, {"seed001_mlp_estimate", 14},      {"seed002_small_linear", 4},
      {"seed003_randn", 20},         {"seed004_attention_function", 4}, {"seed004_attention_global", 3},
      {"seed004_x_plus_1", 9}};
  for (const auto& [name, count] : files) {
    CAPTURE(name);
    CHECK(golden(name).size() == count);
  }
  const auto seed002 = golden("seed002_small_linear");
  CHECK(seed002[0].label == "linear10x10_cuda");  // carries param_bytes too, skipped
  CHECK(seed002[0].requested == 440);
  CHECK(seed002[1].inactive_split == 2095616);
  // seed003's code A succeeded on the 80 GiB card: no A_oom step.
  for (const GoldenStep& s : golden("seed003_randn")) CHECK(s.label != "A_oom");
}

TEST_CASE("the reader skips unknown fields and nested notes, and keeps a step's message") {
  const std::string path = write_temp(R"({"name": "x", "notes": {"a": [1, 2.5, {"b": "}]"}], "ok": true, "n": null},
    "steps": [
      {"label": "one", "allocated": 1, "reserved": 2, "max_allocated": 3, "max_reserved": 4, "segments": 5,
       "blocks": 6, "requested": 7, "inactive_split": 8, "loops": 20, "ratio": 0.5e3},
      {"message": "CUDA out of memory. \"quoted\" {braces}\n", "label": "A_oom", "allocated": -1,
       "reserved": 0, "max_allocated": 0, "max_reserved": 0, "segments": 0, "blocks": 0, "requested": 0,
       "inactive_split": 0}]})");
  const auto steps = read_golden_scenario(path);
  std::remove(path.c_str());
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].label == "one");
  CHECK(steps[0].max_reserved == 4);
  CHECK(steps[0].inactive_split == 8);
  CHECK(steps[0].message.empty());
  CHECK(steps[1].label == "A_oom");
  CHECK(steps[1].allocated == -1);
  CHECK(steps[1].message == "CUDA out of memory. \"quoted\" {braces}\n");
}

TEST_CASE("the reader names the file and the problem") {
  CHECK(contains(error_of([] { read_golden_scenario("/nonexistent/x.json"); }), "/nonexistent/x.json: cannot open"));
  const std::string path = write_temp(R"({"steps": [{"label": "s", "allocated": 1}]})");
  const std::string message = error_of([&] { read_golden_scenario(path); });
  std::remove(path.c_str());
  CHECK(contains(message, path));
  CHECK(contains(message, "step \"s\" has no integer \"reserved\""));
}

TEST_CASE("the recorder reads the device's allocator, and its JSON reads back") {
  GoldenConditions conditions(kMeta);
  ScenarioRecorder r("roundtrip", kMeta);
  {
    const Tensor t = empty({1000}, device(kMeta));  // 4000 B -> one 4096-byte block in a 2 MiB segment
    r.mark("held");
  }
  r.mark("freed", "a \"note\"");
  REQUIRE(r.steps().size() == 2);
  CHECK(r.steps()[0].allocated == 4096);
  CHECK(r.steps()[0].requested == 4000);
  CHECK(r.steps()[0].reserved == 2097152);
  CHECK(r.steps()[0].inactive_split == 2097152 - 4096);
  CHECK(r.steps()[1].allocated == 0);
  CHECK(r.steps()[1].max_allocated == 4096);

  const std::string path = write_temp(r.to_json());
  const auto back = read_golden_scenario(path);
  std::remove(path.c_str());
  check_marks(back, r.steps());
  CHECK(back[1].message == "a \"note\"");
}
