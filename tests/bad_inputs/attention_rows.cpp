// Bad-input rows: scaled_dot_product_attention and the attention modules. PyTorch 2.11's behaviour for each
// (tests/data/pytorch_probes/sdpa_mask/errors.txt, tools/probes/sdpa_mask_probe.py on the H100):
//   mask dtype      "Expected attn_mask dtype to be bool or float or to match query dtype, but got
//                   attn_mask.dtype: long int and  query.dtype: float instead." (every backend)
//   1-d mask        4-d float16/bfloat16 inputs: "IndexError: Dimension out of range (expected to be in range of
//                   [-1, 0], but got -2)" (the backend selection; every head dim)
//   mask shape      "The expanded size of the tensor (8) must match the existing size (9) at non-singleton
//                   dimension 3.  Target sizes: [2, 3, 8, 8].  Tensor sizes: [8, 9]"
//   mask device     "Expected all tensors to be on the same device, but got attn_bias is on cpu, ..."
//   dropout_p       math: "dropout probability has to be between 0 and 1, but got 1.5" (-0.1 and NaN pass
//                   there); memory-efficient: accepted (1.5 gives zeros, NaN gives NaN); cuDNN: a cuDNN
//                   frontend error (bernoulli_dist_probability). bytegrad refuses every p outside [0, 1] and NaN.
//   dropout_p = 1   cuDNN: "cuDNN Frontend error: Dropout probability cannot be 1 as corresponding scale wont be
//                   well formed." (refused here too); memory-efficient: NaN (bytegrad gives math's zeros)
//   mask + causal   math: "_scaled_dot_product_attention: Explicit attn_mask should not be set when
//                   is_causal=True"; the fused backends combine the two (as bytegrad does; mask_and_causal_f32
//                   and mask_and_causal_bool_bf16 answer)
//   1-d inputs      "Expected query, key, and value to all be  at least 2 dimensional, ..."
//   MultiheadAttention   "query should be unbatched 2D or batched 3D tensor but received 1-D query tensor",
//                   "was expecting embedding dimension of 16, but got 12"
// The fixture's a is (3, 4) float32 on sim: as q, k and v it is a valid 2-d call (L = S = 3, E = 4).
#include "bytegrad/nn/attention.h"
#include "tests/bad_inputs/bad_input_rows.h"

namespace bytegrad::bad_inputs {

std::vector<Row> attention_rows() {
  using E = Expect;
  auto sdpa = [](const Tensor& q, const std::optional<Tensor>& mask, double dropout_p, bool causal = false) {
    scaled_dot_product_attention(q, q, q, mask, dropout_p, causal);
  };
  return {
      {"sdpa with an int64 attn_mask", E::invalid_argument, "bool or float",
       [=](Fixture& f) {
         sdpa(f.a, f.ints.view({2, 3}), 0.0);
       }},
      {"sdpa with a mask that does not broadcast to the scores", E::invalid_argument, "cannot be broadcast",
       [=](Fixture& f) { sdpa(f.a, f.flags, 0.0); }},
      {"sdpa with a mask of more dims than the scores", E::invalid_argument, "[3, 3]",
       [=](Fixture& f) { sdpa(f.a, f.a.slice(1, 0, 3).unsqueeze(0).unsqueeze(0).unsqueeze(0), 0.0); }},
      {"sdpa with a mask on another device", E::invalid_argument, "device",
       [=](Fixture& f) { sdpa(f.a, f.c.slice(1, 0, 3), 0.0); }},
      {"sdpa with dropout_p below 0", E::invalid_argument, "between 0 and 1, but got -0.1",
       [=](Fixture& f) { sdpa(f.a, std::nullopt, -0.1); }},
      {"sdpa with dropout_p above 1", E::invalid_argument, "between 0 and 1, but got 1.5",
       [=](Fixture& f) { sdpa(f.a, std::nullopt, 1.5); }},
      {"sdpa with dropout_p NaN", E::invalid_argument, "but got nan",
       [=](Fixture& f) { sdpa(f.a, std::nullopt, std::numeric_limits<double>::quiet_NaN()); }},
      {"sdpa with a mask and is_causal on the math backend (2-d inputs)", E::invalid_argument, "is_causal",
       [=](Fixture& f) { sdpa(f.a, f.a.slice(1, 0, 3), 0.0, true); }},
      {"sdpa with dropout_p 1 on the cuDNN backend (bfloat16, head dim 8)", E::invalid_argument,
       "cannot be 1 on the cuDNN backend",
       [=](Fixture&) {
         const Tensor q = empty({1, 2, 4, 8}, TensorOptions{ScalarType::bfloat16, kMeta});
         sdpa(q, std::nullopt, 1.0);
       }},
      {"sdpa_efficient_attention with an attn_bias not of the scores' shape", E::invalid_argument,
       "does not have the scores' shape [1, 2, 4, 4]",
       [](Fixture&) {
         const Tensor q = empty({1, 2, 4, 8}, TensorOptions{ScalarType::float32, kMeta});
         scaled_dot_product_efficient_attention(q, q, q, empty({4, 4}, TensorOptions{ScalarType::float32, kMeta}),
                                                false, 0.0, false, std::nullopt);
       }},
      {"sdpa_cudnn_attention with an attn_bias on another device", E::invalid_argument, "not on the device",
       [](Fixture& f) {
         const Tensor q = empty({1, 2, 4, 8}, TensorOptions{ScalarType::bfloat16, kMeta});
         scaled_dot_product_cudnn_attention(q, q, q, f.c.slice(1, 0, 4).slice(0, 0, 1), false, 0.0, false,
                                            std::nullopt);
       }},
      {"sdpa with a 1-d mask and 4-d bfloat16 inputs", E::out_of_range, "1-d attn_mask",
       [=](Fixture&) {
         const Tensor q = empty({1, 2, 4, 8}, TensorOptions{ScalarType::bfloat16, kMeta});
         sdpa(q, empty({4}, TensorOptions{ScalarType::bool_, kMeta}), 0.0);
       }},
      {"sdpa on 1-d inputs", E::invalid_argument, "at least 2-dimensional",
       [=](Fixture& f) { sdpa(f.a.select(0, 0), std::nullopt, 0.0); }},
      {"sdpa on an integer query", E::invalid_argument, "",
       [=](Fixture& f) {
         sdpa(f.ints.view({2, 3}), std::nullopt, 0.0);
       }},
      {"MultiheadSelfAttention on a 1-d input", E::invalid_argument, "unbatched (L, 4)",
       [](Fixture& f) {
         nn::MultiheadSelfAttention attn(4, 2, true, TensorOptions{ScalarType::float32, kCpu});
         attn(f.c.select(0, 0));
       }},
      {"MultiheadSelfAttention on an unbatched input of the wrong width", E::invalid_argument, "[4, 3]",
       [](Fixture& f) {
         nn::MultiheadSelfAttention attn(4, 2, true, TensorOptions{ScalarType::float32, kCpu});
         attn(f.c.t().slice(1, 0, 3));
       }},
  };
}

}  // namespace bytegrad::bad_inputs
