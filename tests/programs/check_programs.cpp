// Every mark of every extra program (programs/extra_programs/) against PyTorch's figures for the same program
// (tests/data/pytorch_probes/x0/NAME.json: recorded on the H100 with CUBLAS_WORKSPACE_CONFIG=:0:0, each in a
// fresh process; xd/NAME.json: the same with PyTorch's default cuBLAS workspaces), on sim and on meta (and
// cuda on a GPU machine): allocated, reserved, both peaks, segments, blocks, requested and inactive_split.
#include <cstdio>

#include "bytegrad/memory/device_allocators.h"
#include "programs/registry.h"
#include "tests/support/devices.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

// x0/: recorded with CUBLAS_WORKSPACE_CONFIG=:0:0; xd/: with PyTorch's default workspaces.
std::vector<GoldenStep> pytorch_figures(const std::string& name, Workspaces workspaces) {
  const char* folder = workspaces == Workspaces::none ? "/pytorch_probes/x0/" : "/pytorch_probes/xd/";
  return read_golden_scenario(std::string(BYTEGRAD_TEST_DATA_DIR) + folder + name + ".json");
}

void (*program_named(const std::string& name))(ScenarioRecorder&) {
  for (const Program& p : extra_programs())
    if (p.name == name) return p.run;
  FAIL("no program " << name);
  return nullptr;
}

// One line per differing mark ("label: field got X, want Y; ..."), to read a failure at a glance.
std::string differing_marks(const std::vector<GoldenStep>& got, const std::vector<GoldenStep>& want) {
  std::string out;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    std::vector<std::string> diffs = step_differences(got[i], want[i]);
    if (diffs.empty()) continue;
    out += "  " + want[i].label + ":";
    for (const std::string& d : diffs) out += " " + d + ";";
    out += "\n";
  }
  return out;
}

// On sim and meta, and on cuda when a GPU is present; with both workspace settings.
void check_program(const std::string& name) {
  std::vector<Device> devices = {kSim, kMeta};
  if (cuda_is_available()) devices.push_back(Device{DeviceType::cuda, 0});
  for (Workspaces workspaces : {Workspaces::none, Workspaces::pytorch_default}) {
    const std::vector<GoldenStep> want = pytorch_figures(name, workspaces);
    for (Device d : devices) {
      CAPTURE(name);
      CAPTURE(d.str());
      const std::string setting =
          workspaces == Workspaces::none ? "CUBLAS_WORKSPACE_CONFIG=:0:0" : "default workspaces";
      CAPTURE(setting);
      const std::vector<GoldenStep> got = run_scenario(name, d, program_named(name), workspaces);
      const std::string differences = differing_marks(got, want);
      if (!differences.empty()) MESSAGE(name << " on " << d.str() << " differs from PyTorch at:\n" << differences);
      check_marks(got, want);
    }
  }
}

}  // namespace

TEST_CASE("x_mlp_adam_train: MLP, cross-entropy, single-tensor Adam for 3 steps, every mark as PyTorch") {
  check_program("x_mlp_adam_train");
}
TEST_CASE("x_mlp_sgd_momentum_mse: deeper MLP, mse_loss, SGD with momentum, every mark as PyTorch") {
  check_program("x_mlp_sgd_momentum_mse");
}
TEST_CASE("x_grad_accumulation: four micro-batches per step, zero_grad(set_to_none=False), as PyTorch") {
  check_program("x_grad_accumulation");
}
TEST_CASE("x_no_grad_and_detach: no_grad forward, detached hidden, grads set to None, as PyTorch") {
  check_program("x_no_grad_and_detach");
}
TEST_CASE("x_inplace_ops: in-place ops on activations, an input leaf and a weight, as PyTorch") {
  check_program("x_inplace_ops");
}
TEST_CASE("x_retain_graph: backward(retain_graph=True) twice then a freeing backward, as PyTorch") {
  check_program("x_retain_graph");
}
TEST_CASE("x_checkpoint_deep: a deep MLP plain, then checkpoint_sequential in 3 segments, as PyTorch") {
  check_program("x_checkpoint_deep");
}
TEST_CASE("x_mean_sum_reductions: broadcast, sum/mean over a dim, scalar losses, backward, as PyTorch") {
  check_program("x_mean_sum_reductions");
}
// PyTorch runs this program's Adam with foreach=True (its default on CUDA), whose step holds one sqrt
// temporary per parameter until the step ends (4 MiB + 4096 + 4096 + 4 here): the single-tensor path would
// peak 4194304 - 8704 bytes higher at step0 (two weight-sized temporaries, the rest freed on the way).
TEST_CASE("x_seed_mlp_bias_adam_default: the seed MLP with biases and Adam's foreach path, as PyTorch") {
  check_program("x_seed_mlp_bias_adam_default");
}
TEST_CASE("x_layernorm_mlp: Linear/LayerNorm/GELU/Tanh MLP, backward, no_grad forward, as PyTorch") {
  check_program("x_layernorm_mlp");
}
TEST_CASE("x_tiny_transformer_adamw: embedding, masked attention block, LayerNorm, AdamW, as PyTorch") {
  check_program("x_tiny_transformer_adamw");
}
