// What LayerNorm and RMSNorm refuse alike when made, as torch.nn's constructors and first forward do.
#pragma once

#include <fmt/format.h>

#include <stdexcept>

#include "bytegrad/core/scalar_type.h"
#include "bytegrad/core/strided_view.h"

namespace bytegrad::nn {

// An empty normalized_shape, a negative size in it, or parameters of a dtype that is not floating point:
// std::invalid_argument, the message starting with `module` ("LayerNorm") and naming the parameters as
// `parameters` says ("parameters", "the weight").
inline void check_norm_arguments(const char* module, const Shape& normalized_shape, ScalarType dtype,
                                 const char* parameters) {
  if (normalized_shape.empty())
    throw std::invalid_argument(fmt::format("{}: normalized_shape must have at least one dimension", module));
  for (int64_t s : normalized_shape)
    if (s < 0)
      throw std::invalid_argument(
          fmt::format("{}: normalized_shape {} has a negative size", module, shape_str(normalized_shape)));
  if (!is_floating_point(dtype))
    throw std::invalid_argument(
        fmt::format("{}: {} must be floating point, got {}", module, parameters, scalar_type_name(dtype)));
}

}  // namespace bytegrad::nn
