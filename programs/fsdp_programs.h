// tools/probes/fsdp_probe.py's programs written in bytegrad, one rank's part each: an MLP and nanoGPT under
// FSDP2 (fully_shard on each Linear / transformer block, then the root). Their marks are held to the
// probe's recordings on two H100s (tests/data/pytorch_probes/fsdp_n2/), on every rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/distributed/process_group.h"
#include "bytegrad/nn/gpt.h"

namespace bytegrad::programs {

// fully_shard on each of nanoGPT's transformer blocks, then on the root (the probe's and torchtitan's
// order); returns the root's handle, whose forward(...) runs GPT::forward(x, y) between its hooks.
distributed::FSDPModule fully_shard_gpt(const std::shared_ptr<nn::GPT>& model, distributed::ProcessGroup& pg,
                                        const distributed::FullyShardOptions& options);

// The probe's program names, in its order ("mlp_fsdp", ..., "gpt2_small_fsdp_mixed").
const std::vector<std::string>& fsdp_program_names();

// Runs program `name` as rank pg.rank() of pg.size() on pg.device(); mark(label) at each of the probe's
// marks ("start", "process_group", "model", "sharded", ["to_empty", "initialised",] "data", "s0_forward",
// ...), after synchronizing the device as the probe does. `at_end` runs once the program has dropped its
// locals as Python's frame does at return (the optimizer, then the data) while the model still lives: the
// probe's trace ends there (FSDP's reference cycles keep PyTorch's model until a garbage collection).
// Throws std::invalid_argument for an unknown name.
void run_fsdp_program(const std::string& name, distributed::ProcessGroup& pg,
                      const std::function<void(const std::string&)>& mark, const std::function<void()>& at_end = {});

}  // namespace bytegrad::programs
