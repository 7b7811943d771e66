// nanoGPT's GPT (Karpathy's model.py; the exact program bytegrad is held to is
// shared/golden/gpt2/gpt2_scenarios.py): token and position embeddings, pre-LayerNorm blocks of causal
// self-attention and a GELU MLP with residual adds, a final LayerNorm, and an lm_head tied to the token
// embedding. Parameters, buffers and submodules are registered under PyTorch's names and in its order, so
// named_parameters(), .to(device) and the optimizer's groups see what PyTorch's would.
#pragma once

#include <cstdint>
#include <memory>

#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/embedding.h"
#include "bytegrad/nn/layer_norm.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/module_dict.h"
#include "bytegrad/nn/module_list.h"

namespace bytegrad::nn {

// How attention is computed. slow: nanoGPT's explicit path (q @ k^T, masked_fill against the registered
// `bias` buffer, softmax, @ v). sdpa: nanoGPT's flash branch, scaled_dot_product_attention(q, k, v,
// is_causal=true) with the backend PyTorch 2.11 picks on an H100 (cuDNN for bfloat16/float16,
// memory-efficient for float32: tensor/ops.h), and no `bias` buffer (GPT-2 small's "model" mark is then
// 498558976 bytes instead of 552298496: shared/golden/gpt2/scenarios/g_gpt2_small_bf16_sdpa.json).
enum class AttentionKind { slow, sdpa };

struct GPTConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;
  AttentionKind attention = AttentionKind::slow;
  // Each block under activation checkpointing (autograd/checkpoint.h; PyTorch's
  // `x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` in the block loop): a block keeps
  // only its input until backward recomputes it.
  bool checkpoint_blocks = false;
};

// x (B, T, C) -> (B, T, C). c_attn's output (B, T, 3C) is split into q, k, v views that stay alive until
// forward returns (after c_proj has run); the (1, 1, block, block) `bias` buffer is tril(ones), a
// float32 block of block_size^2 * 4 bytes, and `bias[:, :, :T, :T] == 0` is a bool (1, 1, T, T) that
// MaskedFillBackward0 keeps until backward. With AttentionKind::sdpa there is no buffer: the fused
// attention's node keeps q, k, v (so c_attn's output), its output and its logsumexp until backward.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& config, TensorOptions options = {});
  Tensor forward(const Tensor& x) override;

 private:
  int64_t n_head_, n_embd_;
  bool sdpa_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  Tensor bias_;  // undefined with AttentionKind::sdpa
};

class GPT : public Module {
 public:
  // Built where options say (nanoGPT builds on the CPU and then calls .to(device)). PyTorch's default
  // initializations (Embedding: N(0, 1); Linear: uniform(+-1/sqrt(fan_in))); lm_head's weight is created
  // and then also registered as transformer.wte's, so named_parameters() lists it once, as
  // "transformer.wte.weight".
  explicit GPT(const GPTConfig& config, TensorOptions options = {});

  struct Output {
    Tensor logits;  // (B, T, vocab_size)
    Tensor loss;    // 0-d; undefined without targets
  };
  // idx, targets: int64 (B, T), T <= block_size. loss = cross_entropy(logits.view(-1, V), targets.view(-1),
  // ignore_index=-1). The locals nanoGPT keeps until it returns (pos, tok_emb, pos_emb) are kept as long.
  Output forward(const Tensor& idx, const Tensor& targets);
  // logits for every position, no loss.
  Tensor forward(const Tensor& idx) override { return forward(idx, Tensor()).logits; }

  const GPTConfig& config() const { return config_; }
  // The parameter count (the tied weight once), as nanoGPT's get_num_params(non_embedding=False).
  int64_t num_parameters() const;

 private:
  GPTConfig config_;
  std::shared_ptr<ModuleDict> transformer_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<ModuleList> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace bytegrad::nn
