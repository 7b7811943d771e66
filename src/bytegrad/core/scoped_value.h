// The shape of every scope that tags this thread's work (AllocationScope, ModuleScope,
// KernelProfileLabel): a thread-local variable set for the scope's lifetime, the outer value restored when
// it ends, so scopes nest.
#pragma once

#include <utility>

namespace bytegrad {

// Sets `variable` to `value` for its lifetime and then restores the previous value. `variable` must outlive
// it (a thread_local, with the scope on that thread's stack).
template <typename T>
class ScopedValue {
 public:
  ScopedValue(T& variable, T value) : variable_(variable), previous_(std::exchange(variable, std::move(value))) {}
  ~ScopedValue() { variable_ = std::move(previous_); }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 private:
  T& variable_;
  T previous_;
};

}  // namespace bytegrad
