// bytegrad against a directory of PyTorch GPT-2 probes (tools/probes/gpt2_sweep.py's output, or
// tests/data/pytorch_probes/gpt2/heldout and heldout_amp): every case on meta, with its workspace setting,
// printed as a table case x workspace (exact, or the first differing mark and figure). A report, not a check:
// it fails only on unreadable files. Runs when BYTEGRAD_GPT2_SWEEP names the directory (one holding x0/ and
// xd/; a relative name not found is looked up under tests/data/pytorch_probes/gpt2/):
//
//   BYTEGRAD_GPT2_SWEEP=DIR build/tests/test_programs -tc='GPT-2 probe sweep*'
//
// BYTEGRAD_GPT2_SWEEP_ALL=1 lists every differing mark of a case, not only the first;
// BYTEGRAD_GPT2_SWEEP_CASE=NAME compares only the case NAME (x0 and xd), so a script can give each case a
// process of its own; BYTEGRAD_GPT2_SWEEP_DEVICE=cuda runs the cases without a memory limit on the GPU
// (the max-batch searches stay on meta).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "tests/programs/gpt2_probes.h"
#include "tests/support/scenario_checks.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

// bytegrad-estimate's options for the case.
std::string describe(const GPTProbe& p) {
  const GPTTraining& t = p.training;
  std::ostringstream o;
  o << "--n-layer " << t.config.n_layer << " --n-head " << t.config.n_head << " --n-embd " << t.config.n_embd
    << " --vocab " << t.config.vocab_size << " --block " << t.config.block_size << " --seq " << t.seq << " --batch "
    << (p.max_batch_case ? 1 : t.batch);
  if (t.steps != 2) o << " --steps " << t.steps;
  if (t.optimizer != GPTOptimizer::adamw) o << " --optimizer " << (t.optimizer == GPTOptimizer::adam ? "adam" : "sgd");
  if (!t.foreach) o << " --foreach off";
  if (t.amp) o << " --amp " << (*t.amp == ScalarType::bfloat16 ? "bf16" : "fp16");
  if (t.config.attention == nn::AttentionKind::sdpa) o << " --attention sdpa";
  if (t.config.checkpoint_blocks) o << " --checkpoint";
  if (p.limit > 0) o << " --limit " << p.limit;
  if (p.max_batch_case) o << " --max-batch";
  if (!p.default_workspace) o << " --no-workspace";
  return o.str();
}

// Every differing mark (label and figures), for BYTEGRAD_GPT2_SWEEP_ALL.
std::string all_differences(const std::vector<GoldenStep>& got, const std::vector<GoldenStep>& want) {
  std::ostringstream o;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const std::vector<std::string> d = step_differences(got[i], want[i]);
    if (d.empty()) continue;
    o << "      " << want[i].label << ":";
    for (const std::string& s : d) o << "  " << s;
    o << '\n';
  }
  if (got.size() != want.size()) o << "      marks: bytegrad " << got.size() << ", PyTorch " << want.size() << '\n';
  return o.str();
}

// The figures that depend on where blocks sit (which segment), not only on what is allocated.
const std::vector<std::string> kPlacementFields = {"reserved", "max_reserved", "segments", "inactive_split"};

struct Cell {
  std::string text = "-";  // no file
  bool exact = false;
  std::string details;
};

Cell compare(const GPTProbe& p, bool list_all) {
  Cell cell;
  if (!p.error.empty() && !p.max_batch_case) {
    // A failed PyTorch run: the marks it reached, against bytegrad's first ones.
    std::vector<GoldenStep> got = run_gpt_marks(p.training, p.default_workspace, p.limit).steps;
    if (got.size() > p.steps.size()) got.resize(p.steps.size());
    const std::optional<std::string> d = first_mark_difference(got, p.steps);
    cell.text = "PyTorch failed after " + std::to_string(p.steps.size()) + " marks (" + (d ? *d : "those exact") + ")";
    cell.details = "      " + p.error.substr(0, 400);
    return cell;
  }
  if (!p.max_batch_case) {
    const GPTMarks got = run_gpt_marks(p.training, p.default_workspace, p.limit);
    const std::optional<std::string> d = first_mark_difference(got.steps, p.steps);
    cell.exact = !d;
    cell.text = d ? *d : "exact";
    // Where only placement differs (which segment a block went to), allocated, the peak and the block
    // counts still agree: say so.
    if (d && !first_mark_difference(got.steps, p.steps, kPlacementFields)) cell.text = "sizes exact; placement: " + *d;
    if (d && list_all) cell.details = all_differences(got.steps, p.steps);
    return cell;
  }
  // A max-batch case: bytegrad's answer under the limit, then every batch PyTorch tried (fits or not, and
  // the marks it reached) against bytegrad's run of that batch under the same limit.
  const int64_t ours = max_gpt_batch(p.training, p.limit, p.default_workspace).largest;
  std::ostringstream text;
  text << "max_batch bytegrad " << ours << ", PyTorch " << (p.max_batch ? std::to_string(*p.max_batch) : "?");
  bool trials_exact = true;
  std::string first;
  for (const GPTProbe::Trial& trial : p.trials) {
    GPTTraining t = p.training;
    t.batch = trial.batch;
    const GPTMarks got = run_gpt_marks(t, p.default_workspace, p.limit);
    std::string what;
    if (!trial.fits) what = "PyTorch failed otherwise";
    else if (*trial.fits == got.out_of_memory)
      what = std::string("bytegrad ") + (got.out_of_memory ? "OOM" : "fits") + ", PyTorch " +
             (*trial.fits ? "fits" : "OOM");
    else if (std::optional<std::string> d = first_mark_difference(got.steps, trial.steps)) what = *d;
    if (!what.empty()) {
      trials_exact = false;
      if (first.empty()) first = "batch " + std::to_string(trial.batch) + ": " + what;
      if (list_all)
        cell.details += "    batch " + std::to_string(trial.batch) + ":\n" + all_differences(got.steps, trial.steps);
    }
  }
  cell.exact = p.max_batch && ours == *p.max_batch && trials_exact;
  text << "; " << (trials_exact ? "every trial's marks exact" : first);
  if (!p.error.empty()) text << "; PyTorch: " << p.error.substr(0, 200);
  cell.text = text.str();
  return cell;
}

std::filesystem::path sweep_directory(const std::string& name) {
  std::filesystem::path dir(name);
  if (std::filesystem::is_directory(dir) || dir.is_absolute()) return dir;
  return std::filesystem::path(BYTEGRAD_TEST_DATA_DIR) / "pytorch_probes" / "gpt2" / dir;
}

}  // namespace

TEST_CASE("GPT-2 probe sweep against PyTorch (a report; runs when BYTEGRAD_GPT2_SWEEP names the directory)") {
  const char* env = std::getenv("BYTEGRAD_GPT2_SWEEP");
  if (!env || !*env) return;
  const bool list_all = std::getenv("BYTEGRAD_GPT2_SWEEP_ALL") != nullptr;
  const std::filesystem::path dir = sweep_directory(env);
  REQUIRE_MESSAGE(std::filesystem::is_directory(dir), dir.string() << " is not a directory");
  // case name -> {x0 path, xd path}
  std::map<std::string, std::array<std::string, 2>> files;
  for (const char* sub : {"x0", "xd"}) {
    if (!std::filesystem::is_directory(dir / sub)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir / sub))
      if (entry.path().extension() == ".json" && entry.path().filename().string()[0] != '.')
        files[entry.path().stem().string()][std::string(sub) == "xd"] = entry.path().string();
  }
  REQUIRE_MESSAGE(!files.empty(), "no x0/*.json or xd/*.json under " << dir.string());
  size_t width = 4;
  if (const char* only = std::getenv("BYTEGRAD_GPT2_SWEEP_CASE"); only && *only) {
    const auto it = files.find(only);
    REQUIRE_MESSAGE(it != files.end(), "no case " << only << " under " << dir.string());
    files = {*it};
  }
  for (const auto& [name, paths] : files) width = std::max(width, name.size());
  int exact = 0, compared = 0;
  std::cout << "bytegrad (" << sweep_device().str() << ") against PyTorch: " << dir.string() << "\n"
            << std::left << std::setw(static_cast<int>(width)) << "case"
            << "  ws  result\n";
  for (const auto& [name, paths] : files) {
    std::string config;
    for (int ws = 0; ws < 2; ++ws) {
      Cell cell;
      if (!paths[ws].empty()) {
        const GPTProbe p = read_gpt_probe(paths[ws]);  // throws (fails the case) on an unreadable file
        cell = compare(p, list_all);
        config = describe(p);  // the xd file's (without --no-workspace) where there is one
        ++compared;
        exact += cell.exact;
      }
      std::cout << std::left << std::setw(static_cast<int>(width)) << (ws == 0 ? name : "") << "  "
                << (ws ? "xd" : "x0") << "  " << cell.text << '\n';
      if (!cell.details.empty()) std::cout << cell.details << (cell.details.back() == '\n' ? "" : "\n");
    }
    std::cout << std::setw(static_cast<int>(width)) << ""
              << "      (" << config << ")\n";
  }
  std::cout << exact << " of " << compared << " exact at every mark\n";
}

// The sweep recorded on the H100 (tools/probes/gpt2_sweep.py, tests/data/pytorch_probes/gpt2/sweep: 21 GPT-2
// configurations with both workspace settings, and three max-batch searches): what bytegrad must keep.
//  - Every case: the bytes requested and the number of blocks at every mark are PyTorch's, and the
//    max-batch answers are PyTorch's.
//  - The cases listed below (all figures at every mark): exact. The others differ only in which free
//    block or segment a request landed in (best fit's ties between equal blocks follow the addresses the
//    CUDA driver hands out, where the placement model, its own allocations included, does not follow it
//    yet), which moves allocated (a block kept whole instead of split), reserved, segments and
//    inactive_split. The stretch below the first small segment (virtual_address_space.h) made char_12x256,
//    w512_h16_sdpa_5x200 and xd/char_bf16_sdpa_64x256 exact and cost xd/mid_fp16_sdpa_6x320 (2 MiB of
//    inactive_split at s1_backward, not one of the tie orders' figures; its x0 run misses by 2 MiB at
//    s0_zero_grad with or without the stretch, so a placement of this model is still missing).
TEST_CASE("GPT-2 sweep recorded in PyTorch: requests at every mark, max-batch answers, and the exact cases") {
  const std::filesystem::path dir = sweep_directory("sweep");
  const std::vector<std::string> exact_cases = {"x0/char_12x256",
                                                "xd/char_12x256",
                                                "xd/char_bf16_sdpa_64x256",
                                                "x0/medium_2x256",
                                                "xd/medium_2x256",
                                                "x0/mid_adam_single_8x512",
                                                "x0/mid_ckpt_4x300",
                                                "xd/mid_ckpt_4x300",
                                                "x0/mid_fp16_sdpa_6x320",
                                                "xd/mid_fp16_sdpa_6x320",
                                                "x0/mid_sgd_bf16_8x512",
                                                "xd/mid_sgd_bf16_8x512",
                                                "x0/mid_sgd_single_8x512",
                                                "x0/small_1x1024",
                                                "xd/small_1x1024",
                                                "x0/small_8x1024",
                                                "xd/small_8x1024",
                                                "x0/small_adam_4x256",
                                                "xd/small_adam_4x256",
                                                "x0/small_fp16_4x256",
                                                "xd/small_fp16_4x256",
                                                "xd/small_sgd_4x256",
                                                "x0/small_vpad_8x128",
                                                "xd/small_vpad_8x128",
                                                "x0/small_vpad_bf16_sdpa_4x512",
                                                "xd/small_vpad_bf16_sdpa_4x512",
                                                "x0/tiny_adam_bf16_sdpa_1x37",
                                                "xd/tiny_adam_bf16_sdpa_1x37",
                                                "x0/tiny_fp16_4x64",
                                                "xd/tiny_fp16_4x64",
                                                "x0/w512_h16_sdpa_5x200",
                                                "xd/w512_h16_sdpa_5x200",
                                                "x0/w512_h4_bf16_12x200",
                                                "xd/w512_h4_bf16_12x200",
                                                "x0/w512_vpad_8x256",
                                                "xd/w512_vpad_8x256"};
  const std::vector<std::string> request_fields_only = {"allocated",    "max_allocated", "reserved",
                                                        "max_reserved", "segments",      "inactive_split"};
  int cases = 0;
  for (const char* sub : {"x0", "xd"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir / sub)) {
      if (entry.path().extension() != ".json") continue;
      const GPTProbe p = read_gpt_probe(entry.path().string());
      const std::string key = std::string(sub) + "/" + p.name;
      CAPTURE(key);
      ++cases;
      if (p.max_batch_case) {
        REQUIRE(p.max_batch.has_value());
        CHECK(max_gpt_batch(p.training, p.limit, p.default_workspace).largest == *p.max_batch);
        continue;
      }
      REQUIRE(p.error.empty());
      const GPTMarks got = run_gpt_marks(p.training, p.default_workspace, p.limit);
      const std::optional<std::string> requests = first_mark_difference(got.steps, p.steps, request_fields_only);
      CHECK_MESSAGE(!requests, *requests);
      const std::optional<std::string> any = first_mark_difference(got.steps, p.steps);
      if (std::find(exact_cases.begin(), exact_cases.end(), key) != exact_cases.end()) CHECK_MESSAGE(!any, *any);
      else if (!any) MESSAGE(key << " is exact too: add it to exact_cases");
    }
  }
  CHECK(cases == 45);  // 21 x 2 plain runs, 3 max-batch searches (the recording's time ran out on the rest)
}
