// Running a program as PyTorch's goldens were recorded (a fresh process, a chosen cuBLAS workspace setting)
// and reading the figures it is held to. The test suites and the walkthrough share these.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "programs/scenario.h"

namespace bytegrad::programs {

// Which setting a golden set was recorded with: shared/golden/scenarios with CUBLAS_WORKSPACE_CONFIG=:0:0
// (no cuBLAS/cuBLASLt workspace parked by the first matmul of a thread), shared/golden/
// scenarios-default-workspace with the variable unset (PyTorch's default: 32 MiB on sm90), and
// shared/golden/scenarios-expandable with :0:0 and expandable segments (BYTEGRAD_ALLOC_CONF=
// expandable_segments:True, PyTorch's PYTORCH_CUDA_ALLOC_CONF).
enum class Workspaces { none, pytorch_default, none_expandable_segments };

// PyTorch ran each scenario in a fresh process: drops this thread's BLAS workspaces and starts the device's
// allocator afresh (on cuda too: its cached segments are given back).
void fresh_process_state(Device device);

// The conditions the goldens were recorded under: that workspace setting and an allocator with fresh
// statistics. Restores the caller's setting afterwards and drops every workspace, so neither leaks into
// what runs next.
class GoldenConditions {
 public:
  explicit GoldenConditions(Device device, Workspaces workspaces = Workspaces::none);
  ~GoldenConditions();
  GoldenConditions(const GoldenConditions&) = delete;
  GoldenConditions& operator=(const GoldenConditions&) = delete;

 private:
  Device device_;
  std::optional<std::string> saved_;
  bool sets_alloc_conf_ = false;
  std::optional<std::string> saved_alloc_conf_;
};

// shared/golden's figures for the scenario `name`.
std::vector<GoldenStep> golden(const std::string& name, Workspaces workspaces = Workspaces::none);

// Runs `program` on `device` under the golden conditions and returns its marks.
std::vector<GoldenStep> run_scenario(const std::string& name, Device device, void (*program)(ScenarioRecorder&),
                                     Workspaces workspaces = Workspaces::none);

}  // namespace bytegrad::programs
