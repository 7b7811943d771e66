// From a ScalarType to the C++ element type a backend computes with, one switch for every backend: Half and
// BFloat16 are the backend's 16-bit float types (Eigen's on cpu, CUDA's on cuda).
#pragma once

#include <stdexcept>
#include <string>

#include "bytegrad/core/scalar_type.h"

namespace bytegrad {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the element type of `dtype` (`backend` names the caller in the message for a
// value outside the enum).
template <typename Half, typename BFloat16, typename F>
decltype(auto) dispatch_element_type(ScalarType dtype, const char* backend, F&& f) {
  switch (dtype) {
    case ScalarType::float32: return f(TypeTag<float>{});
    case ScalarType::float64: return f(TypeTag<double>{});
    case ScalarType::float16: return f(TypeTag<Half>{});
    case ScalarType::bfloat16: return f(TypeTag<BFloat16>{});
    case ScalarType::int64: return f(TypeTag<int64_t>{});
    case ScalarType::int32: return f(TypeTag<int32_t>{});
    case ScalarType::uint8: return f(TypeTag<uint8_t>{});
    case ScalarType::bool_: return f(TypeTag<bool>{});
  }
  throw std::invalid_argument(std::string(backend) + " backend: unknown dtype");
}

// Like dispatch_element_type for the four floating dtypes only; the others throw, naming `op`.
template <typename Half, typename BFloat16, typename F>
decltype(auto) dispatch_floating_type(ScalarType dtype, const char* backend, const char* op, F&& f) {
  switch (dtype) {
    case ScalarType::float32: return f(TypeTag<float>{});
    case ScalarType::float64: return f(TypeTag<double>{});
    case ScalarType::float16: return f(TypeTag<Half>{});
    case ScalarType::bfloat16: return f(TypeTag<BFloat16>{});
    default:
      throw std::invalid_argument(std::string(backend) + " backend: " + op + " needs a floating dtype, got " +
                                  std::string(scalar_type_name(dtype)));
  }
}

}  // namespace bytegrad
