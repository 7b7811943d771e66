// Every program by name: the seed documents' (seed_programs.h, what the walkthrough replays) and the extra
// PyTorch programs (extra_programs.h, held to figures in tests/data/pytorch_probes).
#pragma once

#include <string>
#include <vector>

#include "programs/scenario.h"

namespace bytegrad::programs {

struct Program {
  std::string name;  // the scenario's name, a key of its golden file
  void (*run)(ScenarioRecorder&);
  bool has_golden = false;              // shared/golden/[gpt2/]scenarios/<name>.json exists for it
  bool needs_simulated_device = false;  // reconfigures the device: sim or meta only
};

// In the walkthrough's order.
const std::vector<Program>& seed_programs();
// In tools/probes/pytorch_extra_scenarios.py's order.
const std::vector<Program>& extra_programs();
// nanoGPT's GPT-2 training (gpt2_programs.h), held to shared/golden/gpt2/; the walkthrough runs them by name.
const std::vector<Program>& gpt2_programs();

}  // namespace bytegrad::programs
