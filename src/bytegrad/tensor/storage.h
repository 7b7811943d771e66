// A tensor's bytes: one allocation from its device's allocator, shared by the tensor and all its views,
// and returned the moment the last of them goes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "bytegrad/core/device.h"

namespace bytegrad {

class CachingAllocator;

class StorageImpl {
 public:
  // Allocates `nbytes` on `device` (nothing for 0 bytes), tagged with the current AllocationScope.
  StorageImpl(size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  // PyTorch's untyped_storage().resize_(nbytes) as FSDP uses it to free a tensor's memory while its views
  // stay valid: resize(0) returns the block to the allocator (the storage and every tensor on it remain,
  // holding no bytes); resize(n) from 0 allocates a fresh block of n bytes on the current stream (contents
  // unspecified). Resizing to the current size does nothing; between two non-zero sizes it throws
  // std::invalid_argument (nothing needs to keep contents across a resize).
  void resize(size_t nbytes);
  // The allocator's block behind it (nbytes rounded as the caching allocator rounds, or the whole block
  // when it was not split), as memory_allocated() counts it; on cpu (no caching allocator), nbytes.
  size_t block_bytes() const;
  Device device() const { return device_; }
  CachingAllocator* allocator() const { return allocator_; }  // null on cpu

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  CachingAllocator* allocator_ = nullptr;  // null for cpu (host allocator)
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace bytegrad
