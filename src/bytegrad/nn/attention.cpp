#include "bytegrad/nn/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

MultiheadSelfAttention::MultiheadSelfAttention(int64_t embed_dim, int64_t num_heads, bool bias, TensorOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0)
    throw std::invalid_argument(fmt::format(
        "MultiheadSelfAttention: embed_dim ({}) must be a positive multiple of num_heads ({})", embed_dim, num_heads));
  head_dim_ = embed_dim / num_heads;
  in_proj_ = register_module("in_proj", std::make_shared<Linear>(embed_dim, 3 * embed_dim, bias, options));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, options));
}

Tensor MultiheadSelfAttention::forward(const Tensor& input) { return forward(input, std::nullopt, false); }

Tensor MultiheadSelfAttention::forward(const Tensor& input, const std::optional<Tensor>& attn_mask, bool is_causal) {
  if (!input.defined()) throw std::invalid_argument("MultiheadSelfAttention: input is an undefined tensor");
  if ((input.dim() != 2 && input.dim() != 3) || input.sizes()[input.dim() - 1] != embed_dim_)
    throw std::invalid_argument(
        fmt::format("MultiheadSelfAttention: expected input (B, L, {0}) or unbatched (L, {0}), "
                    "got {1}",
                    embed_dim_, describe(input)));
  // Unbatched (L, E), as nn.MultiheadAttention accepts it: a batch of one (views only, so the memory is that of
  // the (1, L, E) call), the batch dimension dropped from the result.
  if (input.dim() == 2) return forward(input.unsqueeze(0), attn_mask, is_causal).squeeze(0);
  const int64_t B = input.sizes()[0], L = input.sizes()[1], H = num_heads_, D = head_dim_, C = embed_dim_;
  if (attn_mask && is_causal)
    throw std::invalid_argument("MultiheadSelfAttention: give either attn_mask or is_causal, not both");
  Tensor mask;
  if (attn_mask) {
    mask = *attn_mask;
    if (!mask.defined()) throw std::invalid_argument("MultiheadSelfAttention: attn_mask is an undefined tensor");
    if (mask.device() != input.device())
      throw std::invalid_argument(fmt::format("MultiheadSelfAttention: attn_mask {} is not on the input's device {}",
                                              describe(mask), input.device().str()));
    if (mask.dtype() != ScalarType::bool_ && mask.dtype() != input.dtype())
      throw std::invalid_argument(
          fmt::format("MultiheadSelfAttention: attn_mask {} must be bool (true = masked out) "
                      "or of the input's dtype {} (added to the scores)",
                      describe(mask), scalar_type_name(input.dtype())));
    bool broadcastable = mask.dim() <= 4;
    const Shape scores_shape{B, H, L, L};
    for (int64_t i = 0; broadcastable && i < mask.dim(); ++i) {
      const int64_t s = mask.sizes()[mask.dim() - 1 - i];
      broadcastable = s == 1 || s == scores_shape[3 - i];
    }
    if (!broadcastable)
      throw std::invalid_argument(
          fmt::format("MultiheadSelfAttention: attn_mask of shape {} cannot be broadcast to "
                      "the scores' shape {} (B, H, L, L)",
                      shape_str(mask.sizes()), shape_str(scores_shape)));
  } else if (is_causal) {
    mask = triu(ones({L, L}, TensorOptions{ScalarType::bool_, input.device()}), 1);
  }
  Tensor out;
  {
    // Scoped so that qkv and the q/k/v views are released before the output projection runs.
    const Tensor qkv = (*in_proj_)(input).view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4});
    const Tensor q = qkv.select(0, 0), k = qkv.select(0, 1), v = qkv.select(0, 2);
    // Each temporary is dropped as soon as the next op has its result, as Python's reference counting
    // drops them: the raw product once it is scaled, the scaled scores once softmax has its result.
    Tensor scores = matmul(q, k.transpose(-2, -1));
    scores = scores * (1.0 / std::sqrt(static_cast<double>(D)));
    if (mask.defined())
      scores = mask.dtype() == ScalarType::bool_ ? masked_fill(scores, mask, -std::numeric_limits<double>::infinity())
                                                 : scores + mask;
    const Tensor attn = softmax(scores, -1);
    scores = Tensor();
    out = matmul(attn, v).transpose(1, 2).reshape({B, L, C});
  }
  return (*out_proj_)(out);
}

}  // namespace bytegrad::nn
