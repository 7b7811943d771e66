// Running a seed program on a device and holding every mark to PyTorch's golden (tensor and GPU suites).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "examples/seed_programs.h"
#include "memory/device_allocators.h"
#include "tensor/blas_workspace.h"
#include "tools/scenario.h"

namespace bgscenario {

using namespace bytegrad;
using namespace bytegrad::examples;

// Which cuBLAS workspace setting a golden set was recorded with: shared/golden/scenarios with
// CUBLAS_WORKSPACE_CONFIG=:0:0 (no cuBLAS/cuBLASLt workspace parked by the first matmul of a thread),
// shared/golden/scenarios-default-workspace with the variable unset (PyTorch's default: 32 MiB on sm90).
enum class Workspaces { none, pytorch_default };

// The conditions the goldens were recorded under: that workspace setting and an allocator with fresh
// statistics (PyTorch ran each scenario in a fresh process). Restores the caller's setting afterwards and
// drops every workspace, so neither leaks into other tests.
class GoldenConditions {
 public:
  explicit GoldenConditions(Device device, Workspaces workspaces = Workspaces::none) : device_(device) {
    if (const char* old = std::getenv(kVariable)) saved_ = old;
    if (workspaces == Workspaces::none) setenv(kVariable, ":0:0", 1);
    else unsetenv(kVariable);
    fresh();
  }
  ~GoldenConditions() {
    if (saved_) setenv(kVariable, saved_->c_str(), 1);
    else unsetenv(kVariable);
    fresh();
  }
  GoldenConditions(const GoldenConditions&) = delete;
  GoldenConditions& operator=(const GoldenConditions&) = delete;

 private:
  static constexpr const char* kVariable = "CUBLAS_WORKSPACE_CONFIG";
  void fresh() {
    clear_blas_workspaces();
    reset_device(device_);
  }
  Device device_;
  std::optional<std::string> saved_;
};

inline std::vector<GoldenStep> golden(const std::string& name, Workspaces workspaces = Workspaces::none) {
  return read_golden_scenario(golden_scenario_path(name, workspaces == Workspaces::pytorch_default));
}

// Runs `program` on `device` under the golden conditions and returns its marks.
inline std::vector<GoldenStep> run_scenario(const std::string& name, Device device, void (*program)(ScenarioRecorder&),
                                            Workspaces workspaces = Workspaces::none) {
  GoldenConditions conditions(device, workspaces);
  ScenarioRecorder r(name, device);
  program(r);
  return r.steps();
}

// The recorded marks are the golden's labels in order, and every named figure equals PyTorch's.
inline void check_marks(const std::vector<GoldenStep>& got, const std::vector<GoldenStep>& want,
                        const std::vector<std::string>& skip_fields = {}) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(want[i].label);
    REQUIRE(got[i].label == want[i].label);
    for (const StepField& f : golden_step_fields()) {
      if (std::find(skip_fields.begin(), skip_fields.end(), f.name) != skip_fields.end()) continue;
      const std::string field = f.name;
      CAPTURE(field);
      CHECK(got[i].*f.member == want[i].*f.member);
    }
  }
}

inline void check_against_golden(const std::string& name, Device device, void (*program)(ScenarioRecorder&),
                                 Workspaces workspaces = Workspaces::none) {
  CAPTURE(name);
  CAPTURE(device.str());
  check_marks(run_scenario(name, device, program, workspaces), golden(name, workspaces));
}

}  // namespace bgscenario
