// Element types a tensor can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace bytegrad {

enum class ScalarType : uint8_t { float32, float64, float16, bfloat16, int64, int32, uint8, bool_ };

inline constexpr size_t element_size(ScalarType type) {
  switch (type) {
    case ScalarType::float64:
    case ScalarType::int64: return 8;
    case ScalarType::float32:
    case ScalarType::int32: return 4;
    case ScalarType::float16:
    case ScalarType::bfloat16: return 2;
    case ScalarType::uint8:
    case ScalarType::bool_: return 1;
  }
  return 0;
}

inline constexpr bool is_floating_point(ScalarType type) {
  return type == ScalarType::float32 || type == ScalarType::float64 || type == ScalarType::float16 ||
         type == ScalarType::bfloat16;
}



// "float32", "int64", "bool", ... (PyTorch's names without the "torch." prefix).
inline std::string_view scalar_type_name(ScalarType type) {
  switch (type) {
    case ScalarType::float32: return "float32";
    case ScalarType::float64: return "float64";
    case ScalarType::float16: return "float16";
    case ScalarType::bfloat16: return "bfloat16";
    case ScalarType::int64: return "int64";
    case ScalarType::int32: return "int32";
    case ScalarType::uint8: return "uint8";
    case ScalarType::bool_: return "bool";
  }
  return "unknown";
}

// The type of a binary op's result: floating beats integral, wider beats narrower (float16 with bfloat16
// gives float32).
inline ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // Rank within a category: bool < uint8 < int32 < int64 < (float16 | bfloat16) < float32 < float64.
  auto rank = [](ScalarType t) {
    switch (t) {
      case ScalarType::bool_: return 0;
      case ScalarType::uint8: return 1;
      case ScalarType::int32: return 2;
      case ScalarType::int64: return 3;
      case ScalarType::float16:
      case ScalarType::bfloat16: return 4;
      case ScalarType::float32: return 5;
      case ScalarType::float64: return 6;
    }
    return 0;
  };
  if ((a == ScalarType::float16 && b == ScalarType::bfloat16) || (a == ScalarType::bfloat16 && b == ScalarType::float16))
    return ScalarType::float32;
  return rank(a) >= rank(b) ? a : b;
}


}  // namespace bytegrad
