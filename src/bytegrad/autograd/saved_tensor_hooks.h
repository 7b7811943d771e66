// PyTorch's saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks): while a hooks object is
// installed on this thread, every tensor a node saves is handed to pack(), and the node keeps only what
// pack() returned; backward calls unpack() to get the tensor back. Activation checkpointing is built on it.
#pragma once

#include <memory>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  virtual std::shared_ptr<void> pack(const Tensor& tensor) = 0;
  virtual Tensor unpack(const std::shared_ptr<void>& packed) = 0;
};

// The innermost installed hooks on this thread, or null.
std::shared_ptr<SavedTensorHooks> current_saved_tensor_hooks();

class SavedTensorHooksScope {
 public:
  explicit SavedTensorHooksScope(std::shared_ptr<SavedTensorHooks> hooks);
  ~SavedTensorHooksScope();
  SavedTensorHooksScope(const SavedTensorHooksScope&) = delete;
  SavedTensorHooksScope& operator=(const SavedTensorHooksScope&) = delete;

 private:
  std::shared_ptr<SavedTensorHooks> previous_;
};

}  // namespace bytegrad
