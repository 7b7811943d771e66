#include "bytegrad/core/checked_convert.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace bytegrad {

namespace {

// The largest finite value of a floating dtype.
double largest_finite(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float32: return 0x1.fffffep127;  // FLT_MAX
    case ScalarType::float16: return 65504.0;         // (2 - 2^-10) * 2^15
    case ScalarType::bfloat16: return 0x1.fep127;     // (2 - 2^-7) * 2^127
    default: return 0x1.fffffffffffffp1023;           // DBL_MAX
  }
}

}  // namespace

bool overflows(double value, ScalarType dtype) {
  if (dtype == ScalarType::bool_) return false;
  if (is_floating_point(dtype)) return std::isfinite(value) && std::fabs(value) > largest_finite(dtype);
  if (std::isnan(value)) return true;
  // Integer ranges as doubles. int64's max (2^63 - 1) is not a double, so its bound is exclusive at 2^63:
  // c10 compares against (double)max == 2^63 and lets 2^63 through, which no int64 holds.
  switch (dtype) {
    case ScalarType::int64: return !(value >= -0x1p63 && value < 0x1p63);
    case ScalarType::int32: return !(value >= -2147483648.0 && value <= 2147483647.0);
    case ScalarType::uint8:
      if (value < 0.0 && value >= -255.0 && value == std::trunc(value)) return false;  // a wrapping negative int
      return !(value >= 0.0 && value <= 255.0);
    default: return false;
  }
}

double checked_convert(double value, ScalarType dtype, std::string_view op) {
  if (overflows(value, dtype))
    throw std::invalid_argument(fmt::format("{}: value {} cannot be converted to type {} without overflow", op, value,
                                            scalar_type_name(dtype)));
  if (dtype == ScalarType::uint8 && value < 0.0) return value + 256.0;  // -255 .. -1, whole (overflows above)
  return value;
}

std::string_view pytorch_type_name(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float32: return "Float";
    case ScalarType::float64: return "Double";
    case ScalarType::float16: return "Half";
    case ScalarType::bfloat16: return "BFloat16";
    case ScalarType::int64: return "Long";
    case ScalarType::int32: return "Int";
    case ScalarType::uint8: return "Byte";
    case ScalarType::bool_: return "Bool";
  }
  return "unknown";
}

}  // namespace bytegrad
