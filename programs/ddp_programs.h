// tools/probes/ddp_probe.py's programs written in bytegrad, one rank's part each: an MLP and nanoGPT under
// DistributedDataParallel (default, bucket views, a 1 MiB bucket cap, unused parameters, static graph,
// no_sync) and under ZeroRedundancyOptimizer (with and without parameters_as_bucket_view); nanoGPT runs
// train_gpt's loop (gpt2_programs.h) as the group's rank. Their marks are held to the probe's recordings on two H100s
// (tests/data/pytorch_probes/ddp_n2/), on every rank.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bytegrad/distributed/process_group.h"

namespace bytegrad::programs {

// The probe's program names, in its order ("mlp_ddp", ..., "gpt2_small_zero1").
const std::vector<std::string>& ddp_program_names();

// Runs program `name` as rank pg.rank() of pg.size() on pg.device(); mark(label) at each of the probe's
// marks ("start", "process_group", "model", "wrapped", "data", "s0_forward", ...), after synchronizing the
// device as the probe does. Throws std::invalid_argument for an unknown name.
void run_ddp_program(const std::string& name, distributed::ProcessGroup& pg,
                     const std::function<void(const std::string&)>& mark);

}  // namespace bytegrad::programs
