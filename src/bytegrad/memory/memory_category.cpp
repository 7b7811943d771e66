#include "bytegrad/memory/memory_category.h"

#include "bytegrad/core/enum_name.h"

namespace bytegrad {

namespace detail {
MemoryCategory& thread_birth_category() {
  thread_local MemoryCategory category = MemoryCategory::other;
  return category;
}
MemoryPhase& thread_phase() {
  thread_local MemoryPhase phase = MemoryPhase::forward;
  return phase;
}
}  // namespace detail

// The names in the enum's order (memory_category.h).
std::string_view category_name(MemoryCategory category) {
  static constexpr std::string_view kNames[] = {
      "parameter",     "gathered_parameter", "buffer",     "gradient",           "optimizer_state",
      "communication", "workspace",          "activation", "autograd_temporary", "other"};
  return enum_name(category, kNames, "other");
}

MemoryCategory current_birth_category() { return detail::thread_birth_category(); }

std::string_view phase_name(MemoryPhase p) {
  static constexpr std::string_view kNames[] = {"forward", "backward", "optimizer step"};
  return enum_name(p, kNames, "forward");
}

MemoryPhase current_phase() { return detail::thread_phase(); }

}  // namespace bytegrad
