// Parameter initialisation, as torch.nn.init's: values are drawn on the host from the process generator
// (tensor/tensor.h), one per element in row-major order, and written into the tensor; so a seed gives the
// same parameters on every device.
#pragma once

#include <cstdint>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad::nn::init {

// An uninitialised parameter tensor, its allocation tagged "parameter" (memory/allocation_context.h).
Tensor empty_parameter(const Shape& sizes, TensorOptions options);

// torch.nn.init.uniform_(t, -bound, bound).
const Tensor& uniform_(const Tensor& t, double bound);
// torch.nn.init.normal_(t, mean, std).
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0);

// 1 / sqrt(fan_in) (0 without inputs): the bound of Linear's weight (kaiming_uniform_ with a = sqrt(5))
// and of its bias.
double fan_in_bound(int64_t fan_in);

// Called with the tensor before each random fill above (none is installed by default): distributed/fsdp.h
// installs one that allocates what DTensor's random-number tracker allocates when a sharded parameter is
// filled (reset_parameters after to_empty). A plain function so installing it races with no reader.
using RandomFillObserver = void (*)(const Tensor&);
void set_random_fill_observer(RandomFillObserver observer);

}  // namespace bytegrad::nn::init
