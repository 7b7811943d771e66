// The seed documents' tensor programs (programs/seed_programs/), written as a user would write them, each
// recording its memory figures at the marks shared/golden/scenarios.py records in PyTorch. Each runs on the
// recorder's device; registry.h lists them by scenario name.
#pragma once

#include "bytegrad/memory/raw_memory.h"
#include "programs/scenario.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::programs {

// seed000 (linear_sum.cpp): Linear(1024, hidden, bias=False) -> Linear(hidden, 1, bias=False), a loss from
// torch.sum or Python's builtin sum, backward, and a training loop (hidden 1024 or 2048).
void run_seed000_builtin_sum(ScenarioRecorder& r);
void run_seed000_torch_sum(ScenarioRecorder& r);
void run_seed000_wide_builtin_sum(ScenarioRecorder& r);
void run_seed000_wide_torch_sum(ScenarioRecorder& r);

// seed001 (mlp_estimate.cpp): a 3-layer MLP's memory through forward, loss, backward and zero_grad; with
// in-place ReLU; with checkpoint_sequential; and under no_grad.
void run_seed001_mlp_estimate(ScenarioRecorder& r);

// seed004 (attention.cpp): scaled dot-product attention inside a function, at global scope, and with an
// unassigned x + 1.
void run_seed004_attention_function(ScenarioRecorder& r);
void run_seed004_attention_global(ScenarioRecorder& r);
void run_seed004_x_plus_1(ScenarioRecorder& r);

// seed002 (small_linear.cpp): nn.Linear(10, 10).cuda() and a one-element tensor, freed, then empty_cache.
void run_seed002_small_linear(ScenarioRecorder& r);

// seed003 (growing_randn.cpp): randn of growing sizes under a 6 GiB memory fraction; code B (reassign six
// times), code A (six live tensors), then a bigger tensor after a big one.
void run_seed003_randn(ScenarioRecorder& r);
// Code A alone: six live (200, 300, 200, 20) tensors, marks A_alloc1..6, or "A_oom" with the error text at
// the one that fails; then frees them all and empties the cache (mark "A_cleared").
void run_seed003_code_a(ScenarioRecorder& r);

// The same two programs with other tensor shapes. On sim randn writes every element of host memory, so
// the full program (15 draws of 240 million and more values) takes minutes there; tests scale it down.
struct Seed003Shapes {
  Shape big = {200, 300, 200, 20};     // 960,000,000 bytes: a 916 MiB block and segment
  Shape bigger = {300, 300, 300, 20};  // 2,160,000,000 bytes
};
void run_seed003_randn(ScenarioRecorder& r, const Seed003Shapes& shapes);
void run_seed003_code_a(ScenarioRecorder& r, const Shape& big);

// seed003's own card (small_card_oom.cpp, with the arithmetic): 6 GiB, of which the context and other
// holders leave room for five of code A's six 916 MiB tensors.
SimulatedCapacity seed003_card();
// Code A on that card: makes the recorder's device (sim or meta, holding no blocks) that card and runs
// code A, which fails at the sixth tensor. The device keeps the card's capacity afterwards
// (configure_simulated_device(device, SimulatedCapacity{}) restores the default).
void run_seed003_code_a_small_card(ScenarioRecorder& r);

}  // namespace bytegrad::programs
