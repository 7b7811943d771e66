// Embedding, as torch.nn.Embedding.
#pragma once

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

// A (num_embeddings, embedding_dim) weight drawn from N(0, 1) (torch.nn.init.normal_, as PyTorch's
// reset_parameters); forward(indices) = embedding(weight, indices), int64/int32 indices of any shape.
// EmbeddingBackward0 keeps the indices; its weight gradient is dense (zeros + index_add).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, TensorOptions options = {});
  Tensor forward(const Tensor& indices) override;
  // torch.nn.Embedding.reset_parameters (no padding_idx here): the weight drawn again from N(0, 1), in place.
  void reset_parameters();
  const Tensor& weight() const { return weight_; }
  // `embedding.weight = other.weight` (weight tying): registers that tensor as this module's "weight",
  // replacing its own, so both modules share one parameter.
  void set_weight(const Tensor& weight);

 private:
  Tensor weight_;
};

}  // namespace bytegrad::nn
