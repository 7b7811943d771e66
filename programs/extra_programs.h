// PyTorch programs (tools/probes/pytorch_extra_scenarios.py) written in bytegrad (programs/extra_programs/),
// statement by statement, each recording its memory figures at the marks the Python records. They double
// as examples of bytegrad's API: a Python `del x` or rebinding is a reset/reassignment at the same point.
// One difference in lifetimes needs care: CPython frees an intermediate as soon as the call that consumed
// it returns (in `lin2(relu(lin1(x)))` lin1's output is gone before lin2 runs, unless a node saved it),
// while a C++ temporary lives to the end of the full expression. Where that would raise a peak, the
// programs split the Python expression into statements (with a scope for the names). Every program runs on
// the recorder's device; registry.h lists them by name.
#pragma once

#include <memory>
#include <vector>

#include "bytegrad/nn/sequential.h"
#include "programs/scenario.h"

namespace bytegrad::programs {

// Training loops.
void x_mlp_adam_train(ScenarioRecorder& r);              // MLP, cross-entropy, Adam (single-tensor), 3 steps
void x_mlp_sgd_momentum_mse(ScenarioRecorder& r);        // deeper MLP, mse_loss, SGD with momentum
void x_grad_accumulation(ScenarioRecorder& r);           // 4 micro-batches per step, zero_grad keeping grads
void x_seed_mlp_bias_adam_default(ScenarioRecorder& r);  // the seed MLP with biases, Adam's default (foreach)
// Graph lifetimes.
void x_no_grad_and_detach(ScenarioRecorder& r);   // no_grad forward, a detached hidden, grads set to None
void x_inplace_ops(ScenarioRecorder& r);          // mul_, add_, relu_ on activations, leaves and weights
void x_retain_graph(ScenarioRecorder& r);         // backward(retain_graph) twice, then freeing
void x_checkpoint_deep(ScenarioRecorder& r);      // a deep MLP plain, then checkpoint_sequential
void x_mean_sum_reductions(ScenarioRecorder& r);  // broadcasting, sum/mean over dims, scalar losses
// LayerNorm and masked attention.
void x_layernorm_mlp(ScenarioRecorder& r);
void x_tiny_transformer_adamw(ScenarioRecorder& r);

// pytorch_extra_scenarios.py's mlp(sizes): Linear(sizes[i], sizes[i+1]) with a ReLU between consecutive
// layers, on the device (PyTorch builds it on the CPU and moves it with .to(): the same device blocks in the
// same order, weight then bias per layer).
std::shared_ptr<nn::Sequential> mlp(Device on, const std::vector<int64_t>& sizes, bool inplace = false);

}  // namespace bytegrad::programs
