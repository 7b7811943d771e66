#include "bytegrad/nn/embedding.h"

#include "bytegrad/nn/init.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, TensorOptions options) {
  weight_ = register_parameter("weight", init::normal_(init::empty_parameter({num_embeddings, embedding_dim}, options)));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight_, indices); }

}  // namespace bytegrad::nn
