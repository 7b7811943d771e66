#include "bytegrad/autograd/saved_tensor_hooks.h"

namespace bytegrad {

namespace {
thread_local std::shared_ptr<SavedTensorHooks> installed;
}

std::shared_ptr<SavedTensorHooks> current_saved_tensor_hooks() { return installed; }

SavedTensorHooksScope::SavedTensorHooksScope(std::shared_ptr<SavedTensorHooks> hooks)
    : previous_(std::move(installed)) {
  installed = std::move(hooks);
}

SavedTensorHooksScope::~SavedTensorHooksScope() { installed = std::move(previous_); }

}  // namespace bytegrad
