// The one rule for a number that becomes a tensor element (a fill value, a factory's values, a padding
// value): PyTorch's c10::checked_convert / c10::overflows. A value that does not fit its dtype is refused
// before anything is allocated or written, where a plain cast would wrap, saturate or be undefined
// behaviour. (PyTorch 2.11 checks these; it does not check a scalar operand of arithmetic, x + 300 on uint8
// wraps there too: tests/data/pytorch_probes/bad_inputs.)
#pragma once

#include <string_view>

#include "bytegrad/core/scalar_type.h"

namespace bytegrad {

// Whether `value` cannot be held by `dtype` (c10::overflows). bytegrad's scalars are doubles; a whole
// number is taken as PyTorch takes a Python int (C++ callers write full({2}, -1, ...) with an int literal):
//  - floating dtypes: a finite value beyond the type's largest magnitude overflows (float32: 1e39, float16:
//    65505); infinities and NaN are representable and pass; values between representable ones round.
//  - integer dtypes: NaN, the infinities and values outside [lowest, max] overflow; a fraction inside the
//    range does not (it is truncated toward zero). As PyTorch lets a negative Python int wrap into an
//    unsigned type, uint8 also takes the whole numbers -255 .. -1 (-1 becomes 255).
//  - bool: nothing overflows (c10's checked_convert skips bool: any nonzero value is true).
bool overflows(double value, ScalarType dtype);

// The value an element of `dtype` will hold for `value` (value itself, or a negative whole number wrapped
// into uint8: -1 gives 255), safe to cast to dtype's C++ type; otherwise std::invalid_argument naming `op`,
// the value and the dtype: "full: value 300 cannot be converted to type uint8 without overflow" (PyTorch's
// words).
double checked_convert(double value, ScalarType dtype, std::string_view op);

// PyTorch's own name for a dtype in its messages ("not implemented for 'Long'"; c10::toString): Float,
// Double, Half, BFloat16, Long, Int, Byte, Bool.
std::string_view pytorch_type_name(ScalarType dtype);

}  // namespace bytegrad
