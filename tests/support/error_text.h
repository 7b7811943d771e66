// Checking error messages in tests: whether a text contains a part, and the message a call throws.
#pragma once

#include <exception>
#include <string>

namespace bytegrad::testing {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the std::exception `f` throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace bytegrad::testing
