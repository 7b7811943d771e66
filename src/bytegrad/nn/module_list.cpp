#include "bytegrad/nn/module_list.h"

#include <fmt/format.h>

namespace bytegrad::nn {

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

ModuleList::ModuleList(const std::vector<std::shared_ptr<Module>>& modules) { extend(modules); }

void ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

ModuleList& ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](int64_t index) const {
  const auto n = static_cast<int64_t>(modules_.size());
  if (index < -n || index >= n)
    throw std::out_of_range(fmt::format("index {} is out of range for a ModuleList of {} modules", index, n));
  return modules_[static_cast<size_t>(index < 0 ? index + n : index)];
}

Tensor ModuleList::forward(const Tensor&) {
  throw std::logic_error("Module [ModuleList] is missing the required \"forward\" function (iterate over its modules)");
}

}  // namespace bytegrad::nn
