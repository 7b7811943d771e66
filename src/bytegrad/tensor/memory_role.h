// A role a tensor's block holds while this object lives (memory/memory_category.h): a module's parameter
// or buffer, a leaf's .grad, an activation a node saved. The holder keeps one beside the tensor it keeps
// (Module beside its parameters, AutogradMeta beside .grad, SavedVariable beside the saved tensor); it
// never keeps the storage alive itself, so no memory figure changes because of it. cpu tensors (not
// cached) and undefined tensors hold nothing.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "bytegrad/memory/memory_category.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

class MemoryRole {
 public:
  MemoryRole() = default;
  MemoryRole(const Tensor& tensor, MemoryCategory role, std::string_view owner = {});
  ~MemoryRole() { reset(); }
  MemoryRole(MemoryRole&& other) noexcept;
  MemoryRole& operator=(MemoryRole&& other) noexcept;
  MemoryRole(const MemoryRole&) = delete;
  MemoryRole& operator=(const MemoryRole&) = delete;

  void reset();  // gives the role up now (no-op once the storage is gone)

 private:
  std::weak_ptr<StorageImpl> storage_;
  MemoryCategory role_ = MemoryCategory::other;
};

// The name a module gave the tensor's block as its parameter or buffer ("fc1.weight"), or "" when none did.
std::string memory_role_owner(const Tensor& tensor);

}  // namespace bytegrad
