#include "bytegrad/nn/gpt.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/autograd/checkpoint.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

namespace {

void check_config(const GPTConfig& c) {
  if (c.n_layer < 0 || c.n_head < 1 || c.n_embd < 1 || c.vocab_size < 1 || c.block_size < 1)
    throw std::invalid_argument(
        fmt::format("GPT: invalid config (n_layer {}, n_head {}, n_embd {}, vocab_size {}, "
                    "block_size {})",
                    c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.block_size));
  if (c.n_embd % c.n_head != 0)
    throw std::invalid_argument(fmt::format("GPT: n_embd {} is not a multiple of n_head {}", c.n_embd, c.n_head));
}

}  // namespace

// ------------------------------------------------------------------------------------- attention

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config, TensorOptions options)
    : n_head_(config.n_head), n_embd_(config.n_embd), sdpa_(config.attention == AttentionKind::sdpa) {
  c_attn_ = register_module("c_attn", std::make_shared<Linear>(config.n_embd, 3 * config.n_embd, true, options));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(config.n_embd, config.n_embd, true, options));
  if (sdpa_) return;  // nanoGPT's flash branch registers no mask
  // torch.tril(torch.ones(block, block)).view(1, 1, block, block): a view of tril's result (ones is freed).
  const int64_t block = config.block_size;
  bias_ = register_buffer("bias", tril(ones({block, block}, options)).view({1, 1, block, block}));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head_;
  // q, k, v are views of c_attn's output, which they keep alive until this function returns.
  std::vector<Tensor> qkv = (*c_attn_)(x).split(n_embd_, 2);
  Tensor k = qkv[1].view({B, T, n_head_, hs}).transpose(1, 2);
  Tensor q = qkv[0].view({B, T, n_head_, hs}).transpose(1, 2);
  Tensor v = qkv[2].view({B, T, n_head_, hs}).transpose(1, 2);
  Tensor att, y;  // both named as in nanoGPT's source; released below in Python's order
  if (sdpa_) {
    // F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
    y = scaled_dot_product_attention(q, k, v, /*is_causal=*/true);
  } else {
    // Each rebinding of att frees the previous scores once the new ones exist, as Python's does; the mask
    // is a temporary of its own statement, so it goes before the scores it replaced (Python frees call
    // arguments when the call returns, before the assignment).
    att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
    Tensor masked =
        masked_fill(att, eq(bias_.slice(2, 0, T).slice(3, 0, T), 0.0), -std::numeric_limits<double>::infinity());
    att = std::move(masked);
    att = softmax(att, -1);
    y = matmul(att, v);
  }
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  Tensor out = (*c_proj_)(y);
  // Python clears a frame's locals in the order its source names them: q, k, v (c_attn's output goes with
  // the last view), then y (nanoGPT names y in its flash branch, before att), then att. Only what no node
  // saved is freed here (all of it under checkpointing).
  qkv.clear();
  q = k = v = Tensor();
  y = Tensor();
  att = Tensor();
  return out;
}

// The transformer block and its MLP: modules of GPT's own (reached through GPT's `transformer.h`
// ModuleList, never built elsewhere), so they live here rather than in the header.
namespace {

// c_proj(gelu(c_fc(x))), 4x wide.
class MLP : public Module {
 public:
  MLP(const GPTConfig& config, TensorOptions options) {
    c_fc_ = register_module("c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, true, options));
    gelu_ = register_module("gelu", std::make_shared<GELU>());
    c_proj_ = register_module("c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, true, options));
  }

  // c_fc's output is released when gelu returns and gelu's when c_proj returns, as Python releases call
  // arguments (one C++ full expression would keep both until its end and free them in the other order).
  Tensor forward(const Tensor& x) override {
    Tensor h = (*gelu_)((*c_fc_)(x));
    return (*c_proj_)(h);
  }

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<GELU> gelu_;
};

// x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
class Block : public Module {
 public:
  Block(const GPTConfig& config, TensorOptions options) {
    ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, true, options));
    attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(config, options));
    ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, true, options));
    mlp_ = register_module("mlp", std::make_shared<MLP>(config, options));
  }

  // Python's `x = x + f(g(x))`: g's output goes when f returns, f's when the add has its result, then the
  // old x when the name is rebound.
  Tensor forward(const Tensor& input) override {
    Tensor x;
    {
      Tensor a = (*attn_)((*ln_1_)(input));
      x = input + a;
    }
    Tensor m = (*mlp_)((*ln_2_)(x));
    Tensor sum = x + m;
    m = Tensor();
    x = std::move(sum);
    return x;
  }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace

// ------------------------------------------------------------------------------------------- GPT

GPT::GPT(const GPTConfig& config, TensorOptions options) : config_(config) {
  check_config(config);
  wte_ = std::make_shared<Embedding>(config.vocab_size, config.n_embd, options);
  wpe_ = std::make_shared<Embedding>(config.block_size, config.n_embd, options);
  h_ = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < config.n_layer; ++i) h_->push_back(std::make_shared<Block>(config, options));
  ln_f_ = std::make_shared<LayerNorm>(config.n_embd, 1e-5, true, true, options);
  transformer_ = register_module("transformer", std::make_shared<ModuleDict>(ModuleDict{
                                                    {"wte", wte_}, {"wpe", wpe_}, {"h", h_}, {"ln_f", ln_f_}}));
  lm_head_ = register_module("lm_head", std::make_shared<Linear>(config.n_embd, config.vocab_size, false, options));
  wte_->set_weight(lm_head_->weight());  // weight tying: one parameter in both modules
}

GPT::Output GPT::forward(const Tensor& idx, const Tensor& targets) {
  const int64_t t = idx.size(1);
  if (t > config_.block_size)
    throw std::invalid_argument(
        fmt::format("GPT: cannot forward a sequence of length {}, block size is only {}", t, config_.block_size));
  Tensor pos = arange(0, static_cast<double>(t), 1.0, TensorOptions{ScalarType::int64, idx.device()});
  Tensor tok_emb = (*wte_)(idx);  // (B, T, C)
  Tensor pos_emb = (*wpe_)(pos);  // (T, C)
  Tensor x = tok_emb + pos_emb;
  for (const auto& block : *h_) {
    if (config_.checkpoint_blocks) x = checkpoint([block](const Tensor& in) { return (*block)(in); }, x);
    else x = (*block)(x);
  }
  x = (*ln_f_)(x);
  Output out;
  out.logits = (*lm_head_)(x);
  if (targets.defined()) {
    const int64_t vocab = out.logits.size(-1);
    out.loss = cross_entropy(out.logits.view({-1, vocab}), targets.view({-1}), Reduction::mean, /*ignore_index=*/-1);
  }
  // Python frees the frame's locals in their order: tok_emb, then pos_emb (pos is kept by wpe's node).
  tok_emb = Tensor();
  pos_emb = Tensor();
  return out;
}

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

}  // namespace bytegrad::nn
