#include "bytegrad/tensor/storage.h"

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/host_work.h"
#include "bytegrad/memory/streams.h"

#include <stdexcept>
#include <string>

namespace bytegrad {

namespace {

// The host's address map follows the host's blocks (memory/host_work.h).
void note_made(const void* data, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  if (is_host_work_device(device)) note_host_block(data, nbytes);
  else note_device_storage();
}

void note_freed(const void* data, Device device) {
  if (data != nullptr && is_host_work_device(device)) note_host_block_freed(data);
}

}  // namespace

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.uses_caching_allocator()) {
    allocator_ = &caching_allocator(device);
    data_ = allocator_->malloc(nbytes, current_stream(device).id());  // the stream it will be used on
  } else {
    data_ = host_allocator().malloc(nbytes);
  }
  note_made(data_, nbytes_, device_);
}

void StorageImpl::resize(size_t nbytes) {
  if (nbytes == nbytes_) return;
  if (nbytes != 0 && nbytes_ != 0)
    throw std::invalid_argument("StorageImpl::resize: from " + std::to_string(nbytes_) + " to " +
                                std::to_string(nbytes) + " bytes; only resizing to or from 0 is supported");
  if (nbytes == 0) {
    note_freed(data_, device_);
    if (allocator_) allocator_->free(data_);
    else host_allocator().free(data_, nbytes_);
    data_ = nullptr;
    nbytes_ = 0;
    return;
  }
  data_ = allocator_ ? allocator_->malloc(nbytes, current_stream(device_).id()) : host_allocator().malloc(nbytes);
  nbytes_ = nbytes;
  note_made(data_, nbytes_, device_);
}

StorageImpl::~StorageImpl() {
  note_freed(data_, device_);
  if (allocator_) allocator_->free(data_);
  else host_allocator().free(data_, nbytes_);
}

size_t StorageImpl::block_bytes() const {
  if (!data_) return 0;
  return allocator_ ? allocator_->block_size(data_) : nbytes_;
}

}  // namespace bytegrad
