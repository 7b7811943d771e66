#include "bytegrad/tensor/memory_role.h"

#include <utility>

#include "bytegrad/memory/caching_allocator.h"

namespace bytegrad {

MemoryRole::MemoryRole(const Tensor& tensor, MemoryCategory role, std::string_view owner) : role_(role) {
  if (!tensor.defined()) return;
  const Storage& storage = tensor.storage();
  if (!storage || !storage->allocator() || !storage->data()) return;
  storage->allocator()->add_block_role(storage->data(), role, owner);
  storage_ = storage;
}

std::string memory_role_owner(const Tensor& tensor) {
  if (!tensor.defined()) return {};
  const Storage& storage = tensor.storage();
  if (!storage || !storage->allocator() || !storage->data()) return {};
  return storage->allocator()->block_owner(storage->data());
}

MemoryRole::MemoryRole(MemoryRole&& other) noexcept : storage_(std::exchange(other.storage_, {})), role_(other.role_) {}

MemoryRole& MemoryRole::operator=(MemoryRole&& other) noexcept {
  if (this != &other) {
    reset();
    storage_ = std::exchange(other.storage_, {});
    role_ = other.role_;
  }
  return *this;
}

void MemoryRole::reset() {
  if (Storage storage = storage_.lock()) storage->allocator()->remove_block_role(storage->data(), role_);
  storage_.reset();
}

}  // namespace bytegrad
