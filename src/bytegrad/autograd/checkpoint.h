// Activation checkpointing, PyTorch's non-reentrant form (use_reentrant=False): the function runs with
// its graph recorded but none of its saved tensors kept (its inputs are kept); the first time a backward
// pass needs one of them, the function is run again to recompute them all, and each recomputed tensor is
// then held until the node that needed it has run. Each backward pass recomputes (a retained graph's second
// backward as well); a recomputation that saves other tensors than the forward did (another count, shape,
// dtype or device) is an error naming them, raised before any node uses one.
#pragma once

#include <functional>
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

using CheckpointedFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::vector<Tensor> checkpoint(const CheckpointedFunction& function, const std::vector<Tensor>& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& function, const Tensor& input);

}  // namespace bytegrad
