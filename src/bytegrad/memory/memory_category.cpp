#include "bytegrad/memory/memory_category.h"

namespace bytegrad {

namespace {
thread_local MemoryCategory birth_category = MemoryCategory::other;
thread_local MemoryPhase phase = MemoryPhase::forward;
}  // namespace

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

CategoryScope::CategoryScope(MemoryCategory category) : previous_(birth_category) { birth_category = category; }
CategoryScope::~CategoryScope() { birth_category = previous_; }
MemoryCategory current_birth_category() { return birth_category; }

std::string_view phase_name(MemoryPhase p) {
  switch (p) {
    case MemoryPhase::forward: return "forward";
    case MemoryPhase::backward: return "backward";
    case MemoryPhase::optimizer_step: return "optimizer step";
  }
  return "forward";
}

PhaseScope::PhaseScope(MemoryPhase p) : previous_(phase) { phase = p; }
PhaseScope::~PhaseScope() { phase = previous_; }
MemoryPhase current_phase() { return phase; }

}  // namespace bytegrad
