#include "bytegrad/autograd/module_scope.h"

#include <utility>

namespace bytegrad {

namespace {
thread_local std::shared_ptr<const std::string> current;
}

std::shared_ptr<const std::string> current_module_name_ptr() { return current; }

ModuleScope::ModuleScope(std::string name) : scope_(current, std::make_shared<const std::string>(std::move(name))) {}

}  // namespace bytegrad
