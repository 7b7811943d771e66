// nanoGPT's GPT-2 fp32 training (programs/gpt2_programs/) against PyTorch 2.11's figures on the H100
// (shared/golden/gpt2/scenarios and scenarios-default-workspace): every mark, every figure, with both cuBLAS
// workspace settings; the tiny model on sim (values computed) and meta, GPT-2 small on meta (no arithmetic:
// seconds).
#include "programs/registry.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

void (*gpt2_program(const std::string& name))(ScenarioRecorder&) {
  for (const Program& p : gpt2_programs())
    if (p.name == name) return p.run;
  FAIL("no program " << name);
  return nullptr;
}

}  // namespace

TEST_CASE("g_gpt2_tiny_fp32: nanoGPT tiny, two AdamW (foreach) steps, every mark as PyTorch, sim and meta") {
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default})
    for (Device d : {kSim, kMeta}) check_against_golden("g_gpt2_tiny_fp32", d, gpt2_program("g_gpt2_tiny_fp32"), w);
}

TEST_CASE("g_gpt2_small_fp32: GPT-2 small (124M), batch 4 x 256, two AdamW (foreach) steps, as PyTorch, on meta") {
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default})
    check_against_golden("g_gpt2_small_fp32", kMeta, gpt2_program("g_gpt2_small_fp32"), w);
}
