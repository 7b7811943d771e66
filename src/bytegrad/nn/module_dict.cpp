#include "bytegrad/nn/module_dict.h"

#include <fmt/format.h>

namespace bytegrad::nn {

ModuleDict::ModuleDict(std::initializer_list<Item> items) {
  for (const auto& [key, module] : items) insert(key, module);
}

ModuleDict::ModuleDict(const std::vector<Item>& items) { update(items); }

void ModuleDict::insert(std::string key, std::shared_ptr<Module> module) {
  register_module(std::move(key), std::move(module));
}

ModuleDict& ModuleDict::update(const std::vector<Item>& items) {
  for (const auto& [key, module] : items) insert(key, module);
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, module] : named_children())
    if (name == key) return true;
  return false;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& item : named_children())
    if (item.first == key) return item.second;
  throw std::out_of_range(fmt::format("ModuleDict has no module '{}'", key));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, module] : named_children()) out.push_back(name);
  return out;
}

Tensor ModuleDict::forward(const Tensor&) {
  throw std::logic_error(
      "Module [ModuleDict] is missing the required \"forward\" function (look its modules up by key)");
}

}  // namespace bytegrad::nn
