// Multi-head self-attention, as PyTorch's (nn.MultiheadAttention with batch_first, no dropout, written out
// with the ops it decomposes into), with an optional attention mask as user code applies one.
#pragma once

#include <memory>
#include <optional>

#include "bytegrad/nn/linear.h"

namespace bytegrad::nn {

// x (B, L, C) -> (B, L, C), H heads of D = C / H:
//   qkv    = in_proj(x)                                   Linear(C, 3C): addmm on x viewed (B*L, C)
//   q,k,v  = qkv.view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4}).select(0, i)      views, (B, H, L, D)
//   scores = matmul(q, k.transpose(-2, -1)) * (1 / sqrt(D))                      (B, H, L, L)
//   scores = scores.masked_fill(mask, -inf)   bool mask, true = masked out   } only with a mask
//         or scores + mask                     floating mask, added          } (see forward below)
//   attn   = softmax(scores, -1)
//   out    = matmul(attn, v).transpose(1, 2).reshape({B, L, C})
//   y      = out_proj(out)                                Linear(C, C)
//
// What autograd keeps for backward (autograd/functions/), i.e. the memory a forward holds until backward:
//  - in_proj's AddmmBackward0 saves mat1 = x viewed (B*L, C) (the input: no new memory) and mat2 = W^T
//    (the parameter). The qkv output itself (B*L*3C elements) is saved by nobody: q, k and v are views
//    whose nodes (View/Permute/Select) keep only shapes, so qkv is freed when forward returns.
//  - matmul on 4-d operands is one bmm on operands reshaped to (B*H, ., .). q, k^T and v are strided
//    views of qkv that cannot be flattened, so each reshape is a contiguous copy (CloneBackward0 keeps
//    nothing) and BmmBackward0 saves both copies: q (B*H*L*D) and k^T (B*H*D*L) for the scores, v (B*H*L*D)
//    for the output. attn is contiguous, so its reshape is a view and saving it costs nothing extra.
//  - the raw bmm product of q k^T is freed after the scale (MulBackward1 keeps only the scalar);
//    the scaled scores are freed after softmax; SoftmaxBackward0 saves its result attn (B*H*L*L).
//  - the (B, H, L, D) bmm output is freed after transpose(1, 2).reshape, which copies (B*L*C), and that
//    copy is out_proj's saved mat1 (with W_out^T).
// Kept in all: 3 * B*L*C (q, k^T, v copies) + B*H*L*L (attn) + B*L*C (out copy) elements, plus the output
// y (B*L*C) held by the caller; each block rounded up to 512 bytes by the caching allocator.
//
// With a mask (the measured sequences are events.jsonl's "masked_fill causal", "add float mask" rows):
//  - forward: masked_fill (or the add) allocates one more (B, H, L, L) block, after which the scaled scores
//    are freed; it is freed once softmax has its result. No more (B, H, L, L) blocks are alive at once than
//    without a mask, so the forward peak grows only by the mask itself (tests/nn/attention_masks.cpp).
//  - a bool mask is saved by MaskedFillBackward0 (the mask itself: L*L bytes for an (L, L) mask, no copy);
//    an additive float mask is saved by nobody (AddBackward0 keeps nothing; the mask needs no gradient).
//  - is_causal builds the mask as torch.triu(torch.ones(L, L, dtype=bool), 1) does: ones (L*L bytes, freed
//    at once) then triu's result, which MaskedFillBackward0 keeps until backward.
//  - backward: softmax's gradient allocates (B, H, L, L) and, as PyTorch's CUDA softmax_backward, a
//    grad * output temporary of the same size (freed at once); masked_fill's gradient is one more
//    (B, H, L, L) (grad.masked_fill(mask, 0)), after which softmax's gradient is freed; the additive mask's
//    gradient passes through the add without allocating.
class MultiheadSelfAttention : public Module {
 public:
  MultiheadSelfAttention(int64_t embed_dim, int64_t num_heads, bool bias = true, TensorOptions options = {});
  // input (B, L, C), or unbatched (L, C) as nn.MultiheadAttention takes it (run as a batch of one: the same
  // memory as (1, L, C), the result (L, C)); no mask
  Tensor forward(const Tensor& input) override;
  // attn_mask: bool, true where a query may NOT attend to a key (scores.masked_fill(mask, -inf)), or
  // floating (input's dtype), added to the scores (-inf or a large negative value to mask out); (L, L) or
  // anything broadcastable to (B, H, L, L), on the input's device. is_causal: the (L, L) causal mask
  // triu(ones(L, L, bool), 1) built on each call (query i attends to keys 0..i); give either, not both.
  Tensor forward(const Tensor& input, const std::optional<Tensor>& attn_mask, bool is_causal = false);
  Tensor operator()(const Tensor& input, const std::optional<Tensor>& attn_mask, bool is_causal = false) {
    return forward(input, attn_mask, is_causal);
  }
  using Module::operator();
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  Linear& in_proj() { return *in_proj_; }
  Linear& out_proj() { return *out_proj_; }

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  int64_t head_dim_;
  std::shared_ptr<Linear> in_proj_;
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace bytegrad::nn
