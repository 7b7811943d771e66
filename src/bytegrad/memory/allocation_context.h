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

// Names the blocks allocated on this thread while it lives, whatever op allocates them: the ledger, the
// peak and out-of-memory reports, the memory_viz snapshot, the HTML report and the story call them `name`
// instead of the op's tag ("zeros", "randn"). Optimizers name their state this way ("0.weight.exp_avg");
// a program names its own tensors:
//
//   Tensor batch;
//   { bytegrad::TensorNameScope name("my batch"); batch = randn({64, 784}); }
//   Tensor mask = bytegrad::named("attention mask", [&] { return ones({T, T}).tril(); });
//
// Scopes nest (the innermost name wins). Names are interned for the life of the process, like tags: name
// things (a model's inputs, a cache), not every step ("batch 17"). An empty name is refused
// (std::invalid_argument).
class TensorNameScope {
 public:
  explicit TensorNameScope(std::string_view name);

 private:
  ScopedValue<const std::string*> scope_;
};

// Runs `make` inside a TensorNameScope(name) and returns what it returns.
template <typename Make>
auto named(std::string_view name, Make&& make) {
  TensorNameScope scope(name);
  return make();
}

// What a block allocated now is called: the innermost TensorNameScope's name, else the op's tag (the
// allocator records this one; current_allocation_tag stays the op's, for kernel labels).
const std::string& current_block_tag();
// Whether a TensorNameScope is live on this thread (the block is named, not just tagged by its op).
bool naming_blocks();

}  // namespace bytegrad
