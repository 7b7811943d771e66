// What registering a hook returns (PyTorch's RemovableHandle): remove() unregisters the hook; removing
// twice, or after what held the hook is gone, does nothing.
#pragma once

#include <functional>
#include <utility>

namespace bytegrad {

class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  void remove() {
    if (remove_) std::exchange(remove_, nullptr)();
  }

 private:
  std::function<void()> remove_;
};

}  // namespace bytegrad
