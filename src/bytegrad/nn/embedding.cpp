#include "bytegrad/nn/embedding.h"

#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/init.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, TensorOptions options) {
  weight_ =
      register_parameter("weight", init::normal_(init::empty_parameter({num_embeddings, embedding_dim}, options)));
}

void Embedding::set_weight(const Tensor& weight) {
  if (weight.dim() != 2)
    throw std::invalid_argument("Embedding::set_weight: the weight must be 2-d, got " + describe(weight));
  weight_ = register_parameter("weight", weight);
}

void Embedding::reset_parameters() {
  NoGradGuard no_grad;
  init::normal_(weight_);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight_, indices); }

}  // namespace bytegrad::nn
