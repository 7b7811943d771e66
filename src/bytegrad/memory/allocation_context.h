// A thread-local tag naming who is asking for memory right now ("matmul", "linear1.weight", ...).
// The allocator stores it with every history entry; ledgers and timelines are built from it.
#pragma once

#include <string>
#include <string_view>

#include "bytegrad/core/scoped_value.h"

namespace bytegrad {

// The tag of the innermost live AllocationScope on this thread ("" when none). Tags are interned: the
// reference stays valid, and equal to the same text, for the life of the process, so a block can keep a
// pointer to its tag without copying it. Tags name ops and modules, a finite set; a program making a new
// tag text per step would grow the intern table.
const std::string& current_allocation_tag();

// Sets the tag for its lifetime; nested scopes restore the outer tag when they end.
class AllocationScope {
 public:
  explicit AllocationScope(std::string_view tag);

 private:
  ScopedValue<const std::string*> scope_;
};

}  // namespace bytegrad
