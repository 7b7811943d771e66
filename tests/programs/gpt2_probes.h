// GPT-2 training cases recorded in real PyTorch beyond the goldens (tools/probes/gpt2_heldout.py,
// gpt2_heldout_amp.py, gpt2_sweep.py: one JSON file a case and cuBLAS workspace setting, x0/ with
// CUBLAS_WORKSPACE_CONFIG=:0:0, xd/ with PyTorch's default workspaces) and bytegrad's run of the same case on
// meta. Shared by the held-out tests (gpt2.cpp) and the sweep comparison (gpt2_sweep.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "programs/gpt2_programs.h"

namespace bytegrad::testing {

const nn::GPTConfig& gpt2_mid_config();  // 4 layers, 4 heads, 256 wide, vocabulary 8000, block 512

// The cases of gpt2_heldout.py and gpt2_heldout_amp.py by name (their JSON files carry no configuration);
// nullopt for another name.
std::optional<programs::GPTTraining> held_out_training(const std::string& name);

// A probe file's case: its training (from the file's "config", gpt2_sweep.py's, else held_out_training of
// its name), the allocator limit it ran under (0: none) and, for a max-batch case, PyTorch's answer and the
// batches tried.
struct GPTProbe {
  std::string name;
  bool default_workspace = false;
  programs::GPTTraining training;
  int64_t limit = 0;
  std::string error;  // the PyTorch run's failure, as recorded
  std::vector<programs::GoldenStep> steps;
  bool max_batch_case = false;
  std::optional<int64_t> max_batch;
  struct Trial {
    int64_t batch = 0;
    std::optional<bool> fits;  // nullopt: the run failed otherwise
    std::vector<programs::GoldenStep> steps;
  };
  std::vector<Trial> trials;
};

// Reads one probe file (the workspace setting from its folder's name, x0 or xd). Throws std::runtime_error
// when the file is unreadable or its case unknown.
GPTProbe read_gpt_probe(const std::string& path);

// tests/data/pytorch_probes/gpt2/<dir>/<x0|xd>/<name>.json
std::string gpt_probe_path(const std::string& dir, const std::string& name, bool default_workspace);

// bytegrad's marks for `training` on meta, as the probe ran it (a fresh process, that workspace setting,
// the limit when > 0); out_of_memory tells whether it ran out under the limit.
struct GPTMarks {
  std::vector<programs::GoldenStep> steps;
  bool out_of_memory = false;
};
// Where run_gpt_marks runs a case without a memory limit: meta, or BYTEGRAD_GPT2_SWEEP_DEVICE (sim, cuda).
Device sweep_device();
GPTMarks run_gpt_marks(const programs::GPTTraining& training, bool default_workspace, int64_t limit = 0);

// The first figure (in mark order, then golden_step_fields order, skipping skip_fields) where got and want
// differ, as "LABEL FIELD: bytegrad X, PyTorch Y (X - Y)"; a differing mark count or label is named too.
// nullopt when every compared figure is equal.
std::optional<std::string> first_mark_difference(const std::vector<programs::GoldenStep>& got,
                                                 const std::vector<programs::GoldenStep>& want,
                                                 const std::vector<std::string>& skip_fields = {});

}  // namespace bytegrad::testing
