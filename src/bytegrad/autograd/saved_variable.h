// A tensor a node keeps for its derivative. It holds the storage alive (that is the memory cost of
// training) but not the tensor's own autograd history, so saving an op's output creates no cycle. It
// remembers the version at saving time: an in-place change before backward is an error naming it.
// Under saved-tensor hooks it keeps only what the hooks packed (see saved_tensor_hooks.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "bytegrad/autograd/saved_tensor_hooks.h"
#include "bytegrad/tensor/memory_role.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

class SavedVariable {
 public:
  SavedVariable() = default;
  // `saved_by` is the node's name ("MulBackward0"), `operand` what the tensor is to it ("other").
  // `node_output`: the tensor is an output of the saving node itself (save_output), an activation even
  // when it has no history of its own (Dropout's bool mask, max's indices).
  SavedVariable(const Tensor& tensor, std::string_view saved_by, std::string operand = {}, bool node_output = false);

  bool defined() const { return defined_; }
  bool released() const { return released_; }
  // The tensor (sharing storage with the original); throws if released or modified in place since, or
  // when saved-tensor hooks kept nothing or gave back an undefined tensor.
  Tensor unpack(const std::string& node_name) const;
  void reset();                                            // release the storage reference
  const Tensor& peek() const { return data_; }             // for reports; undefined once released or when packed
  bool packed() const { return hooks_ != nullptr; }        // kept by saved-tensor hooks
  const std::string& operand() const { return operand_; }  // what the tensor is to the node ("other")

 private:
  Tensor unpack_from_hooks(const std::string& node_name) const;

  Tensor data_;
  MemoryRole activation_role_;  // data_'s block is an activation while saved here (non-leaves and the node's outputs)
  std::shared_ptr<SavedTensorHooks> hooks_;
  std::shared_ptr<void> packed_;
  uint64_t saved_version_ = 0;
  bool defined_ = false;
  bool released_ = false;
  std::string operand_;
  Shape sizes_;
  ScalarType dtype_ = ScalarType::float32;
};

}  // namespace bytegrad
