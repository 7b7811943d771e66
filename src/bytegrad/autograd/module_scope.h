// Which module is running: nn::Module's call operator sets a ModuleScope naming the module by its path in
// the model ("fc1", "blocks.0.attn"), and every autograd node records the innermost one when it is made,
// so saved_tensors() can say which module saved what (PyTorch names it through module hooks; bytegrad
// records it on the node).
#pragma once

#include <memory>
#include <string>

#include "bytegrad/core/scoped_value.h"

namespace bytegrad {

// The innermost live ModuleScope's name on this thread, shared (what a node keeps); null when none (or at a
// model's top level).
std::shared_ptr<const std::string> current_module_name_ptr();

// Names the running module for its lifetime; nested scopes restore the outer name when they end.
class ModuleScope {
 public:
  explicit ModuleScope(std::string name);

 private:
  ScopedValue<std::shared_ptr<const std::string>> scope_;
};

}  // namespace bytegrad
