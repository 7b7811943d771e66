// ModuleDict, as torch.nn.ModuleDict: modules by key, in insertion order, each registered under its key,
// so parameters() lists them in that order as PyTorch's named_parameters() does ("encoder.weight", ...).
// Setting an existing key replaces that module in place (it keeps its position), as Python's does. It has
// no forward of its own: look modules up, or iterate over (key, module) pairs.
#pragma once

#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

class ModuleDict : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;

  ModuleDict() = default;
  ModuleDict(std::initializer_list<Item> items);
  explicit ModuleDict(const std::vector<Item>& items);

  // dict[key] = module: registered under key (which must be non-empty and without "."); an existing key
  // keeps its position and gets the new module.
  void insert(std::string key, std::shared_ptr<Module> module);
  ModuleDict& update(const std::vector<Item>& items);

  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  bool contains(const std::string& key) const;
  // std::out_of_range naming the key when it is absent.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <typename M>
  std::shared_ptr<M> at(const std::string& key) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[key]);
    if (!typed) throw std::invalid_argument("ModuleDict::at: module '" + key + "' is another type");
    return typed;
  }
  std::vector<std::string> keys() const;
  std::vector<std::shared_ptr<Module>> values() const { return children(); }
  const std::vector<Item>& items() const { return named_children(); }
  std::vector<Item>::const_iterator begin() const { return named_children().begin(); }
  std::vector<Item>::const_iterator end() const { return named_children().end(); }

  // As PyTorch: a ModuleDict cannot be called (std::logic_error).
  Tensor forward(const Tensor& input) override;
};

}  // namespace bytegrad::nn
