// torch.utils.checkpoint.checkpoint_sequential(functions, segments, input, use_reentrant=False): the
// modules are cut into `segments` runs of len / segments modules; every run but the last is
// checkpointed, the last (with any remainder) runs normally.
#pragma once

#include "bytegrad/nn/sequential.h"

namespace bytegrad::nn {

Tensor checkpoint_sequential(const Sequential& modules, int64_t segments, const Tensor& input);

}  // namespace bytegrad::nn
