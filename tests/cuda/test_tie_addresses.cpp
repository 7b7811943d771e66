// On a real GPU, best fit breaks ties by where the placement model puts each segment (RawMemory::tie_address,
// cuda_raw_memory.cpp), so a program's figures on cuda are its figures on meta, whatever addresses the driver
// gave this process, and the driver's own allocations (kernel launches, cuBLAS handles) are noted to the model on
// cuda as on meta. The programs here are those whose ties turn on segment addresses: GPT-2 small in fp32 (a tie
// at its first blocks' residual adds) and two extra programs that the driver's allocations decide.
#include <string>

#include "programs/registry.h"
#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/scenario_checks.h"

namespace bytegrad::testing {
namespace {

void (*program_named(const std::string& name))(programs::ScenarioRecorder&) {
  for (const auto* list : {&programs::gpt2_programs(), &programs::extra_programs()})
    for (const programs::Program& p : *list)
      if (p.name == name) return p.run;
  FAIL("no program " << name);
  return nullptr;
}

TEST_CASE("cuda's figures equal meta's where best fit's ties depend on segment addresses") {
  require_gpu();
  for (const char* name : {"g_gpt2_small_fp32", "x_tiny_transformer_adamw", "x_mlp_sgd_momentum_mse"}) {
    for (programs::Workspaces w : {programs::Workspaces::none, programs::Workspaces::pytorch_default}) {
      CAPTURE(name);
      CAPTURE(static_cast<int>(w));
      const auto on_meta = programs::run_scenario(name, kMeta, program_named(name), w);
      const auto on_cuda = programs::run_scenario(name, kCuda, program_named(name), w);
      check_marks(on_cuda, on_meta);
    }
  }
}

}  // namespace
}  // namespace bytegrad::testing
