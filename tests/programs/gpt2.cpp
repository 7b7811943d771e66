// nanoGPT's GPT-2 fp32 training (programs/gpt2_programs/) against PyTorch 2.11's figures on the H100
// (shared/golden/gpt2/scenarios and scenarios-default-workspace): every mark, every figure, with both cuBLAS
// workspace settings; the tiny model on sim (values computed) and meta, GPT-2 small on meta (no arithmetic:
// seconds).
#include "programs/gpt2_programs.h"
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
  check_against_golden("g_gpt2_small_fp32", kMeta, gpt2_program("g_gpt2_small_fp32"), Workspaces::none);
}

TEST_CASE("g_gpt2_tiny_bf16: the forward under bfloat16 autocast, every mark as PyTorch, sim and meta") {
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default})
    for (Device d : {kSim, kMeta}) check_against_golden("g_gpt2_tiny_bf16", d, gpt2_program("g_gpt2_tiny_bf16"), w);
}

TEST_CASE("g_gpt2_small_bf16: GPT-2 small under bfloat16 autocast, both workspace settings, as PyTorch, on meta") {
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default})
    check_against_golden("g_gpt2_small_bf16", kMeta, gpt2_program("g_gpt2_small_bf16"), w);
}

TEST_CASE("g_gpt2_small_bf16_sdpa: bfloat16 autocast and scaled_dot_product_attention (cuDNN's), as PyTorch, on meta") {
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default})
    check_against_golden("g_gpt2_small_bf16_sdpa", kMeta, gpt2_program("g_gpt2_small_bf16_sdpa"), w);
}

// With PyTorch's default workspaces the allocation and free sequence is PyTorch's event for event
// (tests/data/pytorch_probes/gpt2/small_default_workspace.events), but best fit's ties go another way: at
// the third block's residual add (event 526) two free 9437184-byte blocks tie, one in a 20 MiB segment and
// one in a 12 MiB segment made after it, and the CUDA driver placed that later segment above the earlier one
// in this run, where memory/virtual_address_space.h's model (fitted to fresh processes before cuBLAS loads)
// places it below. Until the driver's placement after cuBLAS is modelled, the marks up to the first
// backward are held (inactive_split at s0_backward excepted: it shows where blocks sit).
TEST_CASE("g_gpt2_small_fp32 with the default cuBLAS workspaces: as PyTorch up to the first backward") {
  const std::vector<GoldenStep> got = run_scenario("g_gpt2_small_fp32", kMeta, gpt2_program("g_gpt2_small_fp32"),
                                                   Workspaces::pytorch_default);
  const std::vector<GoldenStep> want = golden("g_gpt2_small_fp32", Workspaces::pytorch_default);
  REQUIRE(got.size() == want.size());
  check_marks({got.begin(), got.begin() + 3}, {want.begin(), want.begin() + 3});
  check_marks({got.begin() + 3, got.begin() + 4}, {want.begin() + 3, want.begin() + 4}, {"inactive_split"});
}

// Beyond the goldens (tools/probes/gpt2_heldout.py, recorded on the H100 with PyTorch 2.11, each case in a
// fresh process): AdamW's single-tensor path (foreach=False), 4 x 1024 tokens (4096 indices: the embedding's
// sort-based backward), and another model size. tests/data/pytorch_probes/gpt2/heldout/x0: with
// CUBLAS_WORKSPACE_CONFIG=:0:0; xd: PyTorch's default workspaces.
namespace {

struct HeldOutCase {
  const char* name;
  GPTTraining training;
  bool placement_exact_with_default_workspaces;  // see below
  bool placement_exact_without_workspaces = true;
  // Where placement is not exact: allocated and the peaks still are (only where blocks sit differs).
  bool sizes_exact = false;
};

// dir: under tests/data/pytorch_probes/gpt2/ (heldout: tools/probes/gpt2_heldout.py; heldout_amp:
// tools/probes/gpt2_heldout_amp.py, which also keeps each run's op-tagged events beside it).
void check_held_out(const std::string& dir, const HeldOutCase& c, Workspaces workspaces) {
  const std::string case_name = c.name;
  CAPTURE(case_name);
  const bool default_workspace = workspaces == Workspaces::pytorch_default;
  CAPTURE(default_workspace);
  const std::string path = std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/gpt2/" + dir + "/" +
                           (default_workspace ? "xd/" : "x0/") + c.name + ".json";
  ScenarioRecorder r(c.name, kMeta);
  const TrainingPeak peak = estimate_gpt_training(c.training, default_workspace, 0, &r);
  CHECK_FALSE(peak.out_of_memory);
  // With default workspaces, some cases land blocks in other segments than PyTorch's (best fit's ties
  // between equal free blocks, decided by the driver's segment addresses: see the default-workspace test
  // above); their allocation sequences are the same.
  const std::vector<std::string> placement =
      c.sizes_exact ? std::vector<std::string>{"reserved", "max_reserved", "segments", "inactive_split"}
                    : std::vector<std::string>{"allocated", "reserved", "max_allocated", "max_reserved", "segments",
                                               "inactive_split"};
  check_marks(r.steps(), read_golden_scenario(path),
              (default_workspace ? c.placement_exact_with_default_workspaces : c.placement_exact_without_workspaces)
                  ? std::vector<std::string>{}
                  : placement);
}

const nn::GPTConfig kMid{.n_layer = 4, .n_head = 4, .n_embd = 256, .vocab_size = 8000, .block_size = 512};

nn::GPTConfig checkpointed(nn::GPTConfig config) {
  config.checkpoint_blocks = true;
  return config;
}

}  // namespace

TEST_CASE("GPT-2 beyond the goldens: single-tensor AdamW, 4096 tokens (sort-based embedding backward), other sizes") {
  const HeldOutCase cases[] = {
      {"tiny_single", {.config = gpt2_tiny_config(), .batch = 4, .seq = 64, .foreach = false}, true},
      {"small_single", {.config = gpt2_small_config(), .batch = 4, .seq = 256, .foreach = false}, false},
      {"small_4x1024", {.config = gpt2_small_config(), .batch = 4, .seq = 1024}, true},
      {"mid_8x512", {.config = kMid, .batch = 8, .seq = 512}, false},
      {"mid_single_8x512", {.config = kMid, .batch = 8, .seq = 512, .foreach = false}, true},
  };
  for (const HeldOutCase& c : cases)
    for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout", c, w);
}

TEST_CASE("GPT-2 under bfloat16 autocast beyond the goldens: single-tensor AdamW, another size, checkpointed blocks") {
  const HeldOutCase cases[] = {
      {"tiny_bf16_single",
       {.config = gpt2_tiny_config(), .batch = 4, .seq = 64, .foreach = false, .amp = ScalarType::bfloat16}, true},
      {"mid_bf16_8x512", {.config = kMid, .batch = 8, .seq = 512, .amp = ScalarType::bfloat16}, true},
      {"tiny_bf16_checkpoint",
       {.config = checkpointed(gpt2_tiny_config()), .batch = 4, .seq = 64, .amp = ScalarType::bfloat16}, true},
  };
  for (const HeldOutCase& c : cases)
    for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout_amp", c, w);
}

nn::GPTConfig with_sdpa(nn::GPTConfig config) {
  config.attention = nn::AttentionKind::sdpa;
  return config;
}

TEST_CASE("GPT-2 with scaled_dot_product_attention beyond the goldens: bf16 (cuDNN) and fp32 (memory-efficient)") {
  const HeldOutCase cases[] = {
      {"tiny_bf16_sdpa", {.config = with_sdpa(gpt2_tiny_config()), .batch = 4, .seq = 64, .amp = ScalarType::bfloat16}, true},
      {"tiny_fp32_sdpa", {.config = with_sdpa(gpt2_tiny_config()), .batch = 4, .seq = 64}, true},
      // These two: allocated and the peaks at every mark, but from the first backward a block lands in
      // another segment than PyTorch's (inactive_split, and once a 2 MiB small segment more in PyTorch).
      {"mid_bf16_sdpa_8x512", {.config = with_sdpa(kMid), .batch = 8, .seq = 512, .amp = ScalarType::bfloat16}, false, false, true},
      {"mid_fp32_sdpa_8x512", {.config = with_sdpa(kMid), .batch = 8, .seq = 512}, false, false, true},
  };
  for (const HeldOutCase& c : cases)
    for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout_amp", c, w);
}

TEST_CASE("GPT-2 with every block checkpointed (use_reentrant=False), fp32: tiny as PyTorch at every mark") {
  const HeldOutCase tiny{"tiny_fp32_checkpoint", {.config = checkpointed(gpt2_tiny_config()), .batch = 4, .seq = 64}, true};
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout_amp", tiny, w);
}

// GPT-2 small checkpointed: the forward is PyTorch's event for event; backward is not yet (s0_backward's
// allocated differs by 525 KiB). One known difference (tools/probes/compare_gpt2_events.py against
// heldout_amp/x0/small_fp32_checkpoint.events.gz, whose recording ran under an op-tagging dispatch mode that
// also turns the residual's in-place gradient sums into out-of-place ones): PyTorch's early stop ends a
// block's recomputation when c_proj's addmm saves its inputs, before its output exists, where bytegrad (which
// records an op after computing it) allocates that 3 MiB output and frees it.
TEST_CASE("GPT-2 small with every block checkpointed: the forward as PyTorch") {
  ScenarioRecorder r("small_fp32_checkpoint", kMeta);
  const GPTTraining t{.config = checkpointed(gpt2_small_config()), .batch = 4, .seq = 256};
  CHECK_FALSE(estimate_gpt_training(t, false, 0, &r).out_of_memory);
  const std::vector<GoldenStep> want = read_golden_scenario(std::string(BYTEGRAD_TEST_DATA_DIR) +
                                                            "/pytorch_probes/gpt2/heldout_amp/x0/small_fp32_checkpoint.json");
  REQUIRE(r.steps().size() == want.size());
  check_marks({r.steps().begin(), r.steps().begin() + 3}, {want.begin(), want.begin() + 3});
}
