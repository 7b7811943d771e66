#include "programs/checks.h"

#include <cstdlib>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/blas_workspace.h"

namespace bytegrad::programs {

namespace {
constexpr const char* kWorkspaceVariable = "CUBLAS_WORKSPACE_CONFIG";
}  // namespace

void fresh_process_state(Device device) {
  clear_blas_workspaces();
  reset_device(device);
}

GoldenConditions::GoldenConditions(Device device, Workspaces workspaces) : device_(device) {
  if (const char* old = std::getenv(kWorkspaceVariable)) saved_ = old;
  if (workspaces == Workspaces::none) setenv(kWorkspaceVariable, ":0:0", 1);
  else unsetenv(kWorkspaceVariable);
  fresh_process_state(device_);
}

GoldenConditions::~GoldenConditions() {
  if (saved_) setenv(kWorkspaceVariable, saved_->c_str(), 1);
  else unsetenv(kWorkspaceVariable);
  fresh_process_state(device_);
}

std::vector<GoldenStep> golden(const std::string& name, Workspaces workspaces) {
  return read_golden_scenario(golden_scenario_path(name, workspaces == Workspaces::pytorch_default));
}

std::vector<GoldenStep> run_scenario(const std::string& name, Device device, void (*program)(ScenarioRecorder&),
                                     Workspaces workspaces) {
  GoldenConditions conditions(device, workspaces);
  ScenarioRecorder r(name, device);
  program(r);
  return r.steps();
}

}  // namespace bytegrad::programs
