// The shape of every scope that tags this thread's work (AllocationScope, ModuleScope,
// KernelProfileLabel): a thread-local variable set for the scope's lifetime, the outer value restored when
// it ends, so scopes nest. ScopedSetting does the same for a setting behind a getter and a setter
// (GradModeGuard, the tests' default-device scope).
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

// Sets a setting read by `kGet` and written by `kSet` to `value` for its lifetime and then restores the
// previous value.
template <typename T, T (*kGet)(), void (*kSet)(T)>
class ScopedSetting {
 public:
  explicit ScopedSetting(T value) : previous_(kGet()) { kSet(std::move(value)); }
  ~ScopedSetting() { kSet(std::move(previous_)); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  T previous_;
};

}  // namespace bytegrad
