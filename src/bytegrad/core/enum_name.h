// Names of the enumerators of a small enum, written as a list instead of a switch.
#pragma once

#include <cstddef>
#include <type_traits>

namespace bytegrad {

// The name of `value` for an enum numbered 0, 1, 2, ... in declaration order, `names` listing the
// enumerators' names in that order; `fallback` for a value past the list (one cast from bad data). Give it a
// static constexpr array (a braced list would be built again on every call): then it is an index, as fast
// as the switch it replaces. Name: const char* or std::string_view, whichever the caller returns.
template <typename Enum, typename Name, size_t N>
constexpr Name enum_name(Enum value, const Name (&names)[N], std::type_identity_t<Name> fallback) {
  const auto index = static_cast<size_t>(value);
  return index < N ? names[index] : fallback;
}

}  // namespace bytegrad
