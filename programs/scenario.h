// Scenarios: a program's device-memory figures at named marks, recorded the way shared/golden/scenarios.py
// records PyTorch's (its Rec.mark), and the golden files those figures are held to.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bytegrad/memory/memory_category.h"
#include "bytegrad/reports/memory_story.h"
#include "bytegrad/core/device.h"

namespace bytegrad::json {
struct Value;
}

namespace bytegrad::programs {

// One mark: the fields of a step in shared/golden/scenarios/*.json (see shared/golden/README.md).
struct GoldenStep : MemoryFigures {
  std::string label;
  std::string message;      // an error text the step carries (scenarios.py's A_oom step), else ""
  std::string explanation;  // bytegrad's own: what the error means (OutOfMemoryError::report()), else ""
  // bytegrad's own, not in the goldens: allocated bytes by category (memory_category.h) at the mark.
  CategoryBytes ledger{};
};

// The eight figures by name, in the golden files' order, for comparisons and printing.
struct StepField {
  const char* name;
  int64_t GoldenStep::*member;
};
const std::vector<StepField>& golden_step_fields();

// "field: got X, want Y" for every figure that differs; empty when the steps agree.
std::vector<std::string> step_differences(const GoldenStep& got, const GoldenStep& want);

// The JSON document in the file at `path`. Throws std::runtime_error "<what> <path>: cannot open" when the
// file cannot be read, "<what> <path>: <the parser's message>" when it is not JSON (`what` names the kind of
// file: "golden scenario", "GPT-2 probe").
json::Value read_json_file(const std::string& path, const std::string& what);

// The "steps" of a golden scenario file, in order. Other members and unknown step fields (notes,
// "param_bytes", "loops") are skipped. Throws std::runtime_error naming the file on unreadable input or a
// step without a label or one of the eight figures.
std::vector<GoldenStep> read_golden_scenario(const std::string& path);
// The same from a parsed document (any JSON object with a "steps" array: a probe file, or one of its
// parts); `where` names it in errors.
std::vector<GoldenStep> golden_steps(const json::Value& document, const std::string& where);
// shared/golden/scenarios/NAME.json (or shared/golden/gpt2/scenarios/NAME.json where only that exists), under the
// shared folder this build was configured with: the runs with CUBLAS_WORKSPACE_CONFIG=:0:0; with default_workspace,
// scenarios-default-workspace/NAME.json (the same programs with PyTorch's default cuBLAS workspaces); with
// expandable_segments, scenarios-expandable/NAME.json (:0:0 and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; there
// is no set with both).
std::string golden_scenario_path(const std::string& name, bool default_workspace = false,
                                 bool expandable_segments = false);

// Records the figures of `device`'s caching allocator at each mark. The allocator is looked up at every
// mark, so a device reconfigured mid-scenario (configure_simulated_device) is still read correctly.
class ScenarioRecorder {
 public:
  ScenarioRecorder(std::string name, Device device);

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  void mark(const std::string& label, const std::string& message = "", const std::string& explanation = "");
  const std::vector<GoldenStep>& steps() const { return steps_; }
  // Called with every step as it is recorded (the walkthrough prints them as they happen).
  void on_mark(std::function<void(const GoldenStep&)> listener) { listener_ = std::move(listener); }
  // {"name": ..., "steps": [...]} in the golden files' layout (read_golden_scenario reads it back).
  std::string to_json() const;

 private:
  std::string name_;
  Device device_;
  std::vector<GoldenStep> steps_;
  std::function<void(const GoldenStep&)> listener_;
};

}  // namespace bytegrad::programs
