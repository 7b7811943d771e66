// Derivatives of scaled_dot_product_attention's fused backends (cuDNN, memory-efficient, flash), as
// derivatives.yaml states them:
//   _scaled_dot_product_cudnn_attention: query, key, value: _scaled_dot_product_cudnn_attention_backward(grad,
//     query, key, value, output, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k, ...)
//   _scaled_dot_product_efficient_attention: query, key, value, attn_bias:
//     _scaled_dot_product_efficient_attention_backward(grad, query, key, value, attn_bias, output, log_sumexp,
//     philox_seed, philox_offset, ...)
// The node saves the three inputs (views of their base: no new memory), the output, the logsumexp and the
// philox seed and offset, so the output, logsumexp (and cuDNN's two 8-byte blocks) stay allocated until
// backward. PyTorch's generated node releases its saved inputs, then its saved outputs, each set sorted by
// name (gen_autograd_functions.py), which is the order the blocks are freed in after backward:
// key, query, value (the split base freed with the last of them), logsumexp, output, philox_offset,
// philox_seed (g_gpt2_small_bf16_sdpa.events: after the workspace and the incoming gradient, 4718592 qkv,
// 49152 logsumexp, 1572864 output, 8, 8). Backward computes all three gradients whenever any is needed.
#include "bytegrad/autograd/functions/formulas.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::formulas {

namespace {

enum Inputs : size_t { kQuery, kKey, kValue, kBias };
enum Outputs : size_t { kOutput, kLogsumexp, kPhiloxSeed, kPhiloxOffset };

// The inputs (and the bias, when the op had one) are saved before the kernel runs, the output, logsumexp and
// philox seed and offset after (each set in the order the node releases them: attn_bias sorts first).
// seed_first: flash's outputs are named rng_state and unused (sorted: seed, then offset); cuDNN's and the
// efficient backend's philox_seed and philox_offset sort the other way. The backward gets the saved bias (or
// none), the forward's dropout draw (its seed and offset are in the op's arguments) and whether the bias
// needs a gradient (only the efficient op's derivative reaches it).
using BiasedBackward = AttentionGrads (*)(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const std::optional<Tensor>& bias, const Tensor& out, const Tensor& lse,
                                          const AttentionDropout& dropout, bool bias_needs_grad, bool is_causal,
                                          double scale);

std::shared_ptr<FormulaNode> attention_node(const OpRecord& r, const op_args::Attention& a, BiasedBackward backward,
                                            bool seed_first = false) {
  const bool has_bias = r.inputs.size() > kBias;
  const AttentionDropout dropout{a.dropout_p, a.philox_seed, a.philox_offset};
  auto node = make_node(
      r,
      [a, backward, has_bias, dropout](const FormulaNode& n, TensorList& g) {
        TensorList out(has_bias ? 4 : 3);
        const bool bias_needs_grad = has_bias && n.needs_grad(kBias);
        if (!g[0].defined() || !(n.needs_grad(kQuery) || n.needs_grad(kKey) || n.needs_grad(kValue) || bias_needs_grad))
          return out;
        const std::optional<Tensor> bias = has_bias ? std::optional<Tensor>(n.saved("attn_bias")) : std::nullopt;
        AttentionGrads grads =
            backward(g[0], n.saved("query"), n.saved("key"), n.saved("value"), bias, n.saved("output"),
                     n.saved("logsumexp"), dropout, bias_needs_grad, a.is_causal, a.scale);
        out[kQuery] = std::move(grads.grad_query);
        out[kKey] = std::move(grads.grad_key);
        out[kValue] = std::move(grads.grad_value);
        if (has_bias) out[kBias] = std::move(grads.grad_bias);
        return out;
      },
      /*differentiable_outputs=*/1);
  if (has_bias) node->save("attn_bias", r.inputs.at(kBias));
  node->save("key", r.inputs.at(kKey));
  node->save("query", r.inputs.at(kQuery));
  node->save("value", r.inputs.at(kValue));
  node->save_output("logsumexp", kLogsumexp);
  node->save_output("output", kOutput);
  if (seed_first) {
    node->save_output("philox_seed", kPhiloxSeed);
    node->save_output("philox_offset", kPhiloxOffset);
  } else {
    node->save_output("philox_offset", kPhiloxOffset);
    node->save_output("philox_seed", kPhiloxSeed);
  }
  return node;
}

AttentionGrads cudnn_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::optional<Tensor>& bias, const Tensor& out, const Tensor& lse,
                              const AttentionDropout& dropout, bool, bool is_causal, double scale) {
  return scaled_dot_product_cudnn_attention_backward(grad_out, q, k, v, bias, out, lse, dropout, is_causal, scale);
}

AttentionGrads flash_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::optional<Tensor>&, const Tensor& out, const Tensor& lse,
                              const AttentionDropout& dropout, bool, bool is_causal, double scale) {
  return scaled_dot_product_flash_attention_backward(grad_out, q, k, v, out, lse, dropout, is_causal, scale);
}

AttentionGrads efficient_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::optional<Tensor>& bias, const Tensor& out, const Tensor& lse,
                                  const AttentionDropout& dropout, bool bias_needs_grad, bool is_causal, double scale) {
  return scaled_dot_product_efficient_attention_backward(grad_out, q, k, v, bias, out, lse, dropout, bias_needs_grad,
                                                         is_causal, scale);
}

}  // namespace

// inputs: query, key, value[, attn_bias]; outputs: output, logsumexp, philox_seed, philox_offset (only the
// first differentiable). derivatives.yaml gives the cuDNN op no gradient for attn_bias (the selection sends
// masks that require grad to the memory-efficient backend).
std::shared_ptr<FormulaNode> scaled_dot_product_cudnn_attention(const OpRecord& r, const op_args::Attention& a) {
  return attention_node(r, a, cudnn_backward);
}

// as cuDNN's, with the bias's gradient; the philox seed and offset are undefined (PyTorch's live on the host)
std::shared_ptr<FormulaNode> scaled_dot_product_efficient_attention(const OpRecord& r, const op_args::Attention& a) {
  return attention_node(r, a, efficient_backward);
}

// _scaled_dot_product_flash_attention: query, key, value: _scaled_dot_product_flash_attention_backward(grad,
// query, key, value, output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, rng_state,
// unused, scale). Saved and released as cuDNN's (the padded q, k, v stay with the node until backward); the
// dense call's cum_seq_q / cum_seq_k are undefined and its rng_state (16 bytes) and unused (8) sort before
// each other as named (recorded: free lse, 16, 8 after the padded inputs in sdpa_flash/flash.events).
std::shared_ptr<FormulaNode> scaled_dot_product_flash_attention(const OpRecord& r, const op_args::Attention& a) {
  return attention_node(r, a, flash_backward, /*seed_first=*/true);
}

}  // namespace bytegrad::formulas
