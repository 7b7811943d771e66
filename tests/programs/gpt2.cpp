// nanoGPT's GPT-2 fp32 training (programs/gpt2_programs/) against PyTorch 2.11's figures on the H100
// (shared/golden/gpt2/scenarios and scenarios-default-workspace): every mark, every figure, with both cuBLAS
// workspace settings; the tiny model on sim (values computed) and meta, GPT-2 small on meta (no arithmetic:
// seconds).
#include "programs/gpt2_programs.h"
#include "programs/registry.h"
#include "tests/programs/gpt2_probes.h"
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
  const char* name;  // its training: gpt2_probes.h's held_out_training
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
  const GPTProbe probe = read_gpt_probe(gpt_probe_path(dir, c.name, default_workspace));
  const GPTMarks got = run_gpt_marks(probe.training, default_workspace);
  CHECK_FALSE(got.out_of_memory);
  // With default workspaces, some cases land blocks in other segments than PyTorch's (best fit's ties
  // between equal free blocks, decided by the driver's segment addresses: see the default-workspace test
  // above); their allocation sequences are the same.
  const std::vector<std::string> placement =
      c.sizes_exact ? std::vector<std::string>{"reserved", "max_reserved", "segments", "inactive_split"}
                    : std::vector<std::string>{"allocated", "reserved", "max_allocated", "max_reserved", "segments",
                                               "inactive_split"};
  check_marks(got.steps, probe.steps,
              (default_workspace ? c.placement_exact_with_default_workspaces : c.placement_exact_without_workspaces)
                  ? std::vector<std::string>{}
                  : placement);
}

}  // namespace

TEST_CASE("GPT-2 beyond the goldens: single-tensor AdamW, 4096 tokens (sort-based embedding backward), other sizes") {
  const HeldOutCase cases[] = {
      {"tiny_single", true}, {"small_single", false}, {"small_4x1024", true}, {"mid_8x512", false},
      {"mid_single_8x512", true},
  };
  for (const HeldOutCase& c : cases)
    for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout", c, w);
}

TEST_CASE("GPT-2 under bfloat16 autocast beyond the goldens: single-tensor AdamW, another size, checkpointed blocks") {
  const HeldOutCase cases[] = {{"tiny_bf16_single", true}, {"mid_bf16_8x512", true}, {"tiny_bf16_checkpoint", true}};
  for (const HeldOutCase& c : cases)
    for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout_amp", c, w);
}

TEST_CASE("GPT-2 with scaled_dot_product_attention beyond the goldens: bf16 (cuDNN) and fp32 (memory-efficient)") {
  const HeldOutCase cases[] = {
      {"tiny_bf16_sdpa", true},
      {"tiny_fp32_sdpa", true},
      // These two: allocated and the peaks at every mark, but from the first backward a block lands in
      // another segment than PyTorch's (inactive_split, and once a 2 MiB small segment more in PyTorch).
      {"mid_bf16_sdpa_8x512", false, false, true},
      {"mid_fp32_sdpa_8x512", false, false, true},
  };
  for (const HeldOutCase& c : cases)
    for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default}) check_held_out("heldout_amp", c, w);
}

TEST_CASE("GPT-2 with every block checkpointed (use_reentrant=False), fp32: tiny as PyTorch at every mark") {
  for (Workspaces w : {Workspaces::none, Workspaces::pytorch_default})
    check_held_out("heldout_amp", {"tiny_fp32_checkpoint", true}, w);
}

// GPT-2 small checkpointed: the forward is PyTorch's event for event; backward is not yet (s0_backward's
// allocated differs by 525 KiB). One known difference (tools/probes/compare_gpt2_events.py against
// heldout_amp/x0/small_fp32_checkpoint.events.gz, whose recording ran under an op-tagging dispatch mode that
// also turns the residual's in-place gradient sums into out-of-place ones): PyTorch's early stop ends a
// block's recomputation when c_proj's addmm saves its inputs, before its output exists, where bytegrad (which
// records an op after computing it) allocates that 3 MiB output and frees it.
TEST_CASE("GPT-2 small with every block checkpointed: the forward as PyTorch") {
  const GPTProbe probe = read_gpt_probe(gpt_probe_path("heldout_amp", "small_fp32_checkpoint", false));
  const GPTMarks got = run_gpt_marks(probe.training, false);
  CHECK_FALSE(got.out_of_memory);
  REQUIRE(got.steps.size() == probe.steps.size());
  check_marks({got.steps.begin(), got.steps.begin() + 3}, {probe.steps.begin(), probe.steps.begin() + 3});
}
