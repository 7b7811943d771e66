#include "bytegrad/memory/allocation_context.h"

namespace bytegrad {

namespace {
thread_local std::string current_tag;
}

const std::string& current_allocation_tag() { return current_tag; }

AllocationScope::AllocationScope(std::string_view tag) : previous_(std::move(current_tag)) {
  current_tag.assign(tag);
}

AllocationScope::~AllocationScope() { current_tag = std::move(previous_); }

}  // namespace bytegrad
