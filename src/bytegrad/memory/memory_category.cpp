#include "bytegrad/memory/memory_category.h"

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

std::string_view category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameter: return "parameter";
    case MemoryCategory::buffer: return "buffer";
    case MemoryCategory::gradient: return "gradient";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::workspace: return "workspace";
    case MemoryCategory::activation: return "activation";
    case MemoryCategory::autograd_temporary: return "autograd_temporary";
    case MemoryCategory::other: return "other";
  }
  return "other";
}

MemoryCategory current_birth_category() { return detail::thread_birth_category(); }

std::string_view phase_name(MemoryPhase p) {
  switch (p) {
    case MemoryPhase::forward: return "forward";
    case MemoryPhase::backward: return "backward";
    case MemoryPhase::optimizer_step: return "optimizer step";
  }
  return "forward";
}

MemoryPhase current_phase() { return detail::thread_phase(); }

}  // namespace bytegrad
