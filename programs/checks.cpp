#include "programs/checks.h"

#include <cstdlib>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/blas_workspace.h"

namespace bytegrad::programs {

namespace {
constexpr const char* kWorkspaceVariable = "CUBLAS_WORKSPACE_CONFIG";
constexpr const char* kAllocConfVariable = "BYTEGRAD_ALLOC_CONF";
}  // namespace

void fresh_process_state(Device device) {
  clear_blas_workspaces();
  // A fresh process has no cuBLAS handle yet. Handles are noted by allocator address, and the next allocator
  // can be built where this one was: without this, a later run found "its" handle made and skipped the
  // driver's allocations for it, so a run's figures depended on the runs before it in the same process.
  release_blas_workspaces(caching_allocator(device));
  reset_device(device);
}

GoldenConditions::GoldenConditions(Device device, Workspaces workspaces) : device_(device) {
  if (const char* old = std::getenv(kWorkspaceVariable)) saved_ = old;
  if (workspaces == Workspaces::pytorch_default) unsetenv(kWorkspaceVariable);
  else setenv(kWorkspaceVariable, ":0:0", 1);
  // The allocator reads its settings when the device is reset below; the caller's come back afterwards.
  sets_alloc_conf_ = workspaces == Workspaces::none_expandable_segments;
  if (sets_alloc_conf_) {
    if (const char* old = std::getenv(kAllocConfVariable)) saved_alloc_conf_ = old;
    setenv(kAllocConfVariable, "expandable_segments:True", 1);
  }
  fresh_process_state(device_);
}

GoldenConditions::~GoldenConditions() {
  if (saved_) setenv(kWorkspaceVariable, saved_->c_str(), 1);
  else unsetenv(kWorkspaceVariable);
  if (sets_alloc_conf_) {
    if (saved_alloc_conf_) setenv(kAllocConfVariable, saved_alloc_conf_->c_str(), 1);
    else unsetenv(kAllocConfVariable);
  }
  fresh_process_state(device_);
}

std::vector<GoldenStep> golden(const std::string& name, Workspaces workspaces) {
  return read_golden_scenario(golden_scenario_path(name, workspaces == Workspaces::pytorch_default,
                                                   workspaces == Workspaces::none_expandable_segments));
}

std::vector<GoldenStep> run_scenario(const std::string& name, Device device, void (*program)(ScenarioRecorder&),
                                     Workspaces workspaces) {
  GoldenConditions conditions(device, workspaces);
  ScenarioRecorder r(name, device);
  program(r);
  return r.steps();
}

}  // namespace bytegrad::programs
