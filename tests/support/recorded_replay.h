// Text forms the replay tests compare with PyTorch's recordings: an event list, and a tensor's sizes and
// strides as Python prints the tuples ("(2, 3):(3, 1)", a 1-tuple with its trailing comma).
#pragma once

#include <string>

#include "bytegrad/tensor/tensor.h"
#include "tests/support/allocation_probe.h"

namespace bytegrad::testing {

inline std::string show(const AllocationEvents& events) {
  std::string out;
  for (const auto& [what, bytes] : events) out += (out.empty() ? "" : ", ") + what + " " + std::to_string(bytes);
  return "[" + out + "]";
}

inline std::string sizes_and_strides(const Tensor& t) {
  auto tuple = [](const Shape& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + (s.size() == 1 ? ",)" : ")");
  };
  return tuple(t.sizes()) + ":" + tuple(t.strides());
}

}  // namespace bytegrad::testing
