#include "bytegrad/nn/dropout.h"

#include <stdexcept>

#include <fmt/format.h>

#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

Dropout::Dropout(double p) : p_(p) {
  if (p < 0.0 || p > 1.0) throw std::invalid_argument(fmt::format("Dropout: p must be in [0, 1], got {}", p));
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p_, is_training()); }

}  // namespace bytegrad::nn
