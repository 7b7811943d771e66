// Element types a tensor can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace bytegrad {

enum class ScalarType : uint8_t { float32, float64, float16, bfloat16, int64, int32, uint8, bool_ };

// libtorch's dtype constants (torch::kFloat, torch::kLong, ...), so `dtype(kHalf)` reads as libtorch does.
inline constexpr ScalarType kFloat32 = ScalarType::float32, kFloat = kFloat32;
inline constexpr ScalarType kFloat64 = ScalarType::float64, kDouble = kFloat64;
inline constexpr ScalarType kFloat16 = ScalarType::float16, kHalf = kFloat16;
inline constexpr ScalarType kBFloat16 = ScalarType::bfloat16;
inline constexpr ScalarType kInt64 = ScalarType::int64, kLong = kInt64;
inline constexpr ScalarType kInt32 = ScalarType::int32, kInt = kInt32;
inline constexpr ScalarType kUInt8 = ScalarType::uint8, kByte = kUInt8;
inline constexpr ScalarType kBool = ScalarType::bool_;

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
inline constexpr ScalarType promote_types(ScalarType a, ScalarType b) {
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
  if ((a == ScalarType::float16 && b == ScalarType::bfloat16) ||
      (a == ScalarType::bfloat16 && b == ScalarType::float16))
    return ScalarType::float32;
  return rank(a) >= rank(b) ? a : b;
}

inline constexpr bool is_integral(ScalarType type, bool include_bool) {
  return type == ScalarType::int64 || type == ScalarType::int32 || type == ScalarType::uint8 ||
         (include_bool && type == ScalarType::bool_);
}

// PyTorch's canCast: whether an op's result of type `from` may be written into a tensor of type `to` (an
// in-place op's target, an out= argument). Floating into integral is refused, and anything but bool into
// bool (bool is its own category); everything else, narrowing included (float32 into bfloat16), is allowed.
inline constexpr bool can_cast(ScalarType from, ScalarType to) {
  if (is_floating_point(from) && is_integral(to, /*include_bool=*/false)) return false;
  if (from != ScalarType::bool_ && to == ScalarType::bool_) return false;
  return true;
}

// PyTorch's result_type over tensor operands (at::native::ResultTypeState, without wrapped numbers:
// bytegrad's Python-number scalars never take part): operands with dimensions and zero-dim operands are
// promoted separately, then combined by category (bool < integral < floating): a zero-dim operand only
// decides the type when it is of a higher category than every operand with dimensions. So float32 of
// shape [] with bfloat16 of shape [4] gives bfloat16, int64 of shape [] with int32 of shape [4] gives int32,
// but float64 of shape [] with int32 of shape [4] gives float64.
class ResultTypeState {
 public:
  // Adds one operand: its dtype and whether it has dimensions (dim() > 0).
  constexpr void add(ScalarType dtype, bool has_dimensions) {
    Slot& slot = has_dimensions ? dimensioned_ : zero_dim_;
    slot.type = slot.defined ? promote_types(slot.type, dtype) : dtype;
    slot.defined = true;
  }
  // The result type (float32 when nothing was added).
  constexpr ScalarType result() const {
    if (!dimensioned_.defined) return zero_dim_.defined ? zero_dim_.type : ScalarType::float32;
    if (!zero_dim_.defined) return dimensioned_.type;
    // c10's combine_categories(higher = dimensioned, lower = zero-dim).
    const ScalarType higher = dimensioned_.type, lower = zero_dim_.type;
    if (is_floating_point(higher)) return higher;
    if (higher == ScalarType::bool_ || is_floating_point(lower)) return promote_types(higher, lower);
    return higher;
  }

 private:
  struct Slot {
    ScalarType type = ScalarType::float32;
    bool defined = false;
  };
  Slot dimensioned_, zero_dim_;
};

}  // namespace bytegrad
