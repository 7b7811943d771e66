// ModuleList, as torch.nn.ModuleList: modules held in order, each registered under its index ("0", "1",
// ...), so parameters() lists them in that order as PyTorch's named_parameters() does ("0.weight",
// "0.bias", "1.weight", ...). It has no forward of its own: iterate over it.
#pragma once

#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

class ModuleList : public Module {
 public:
  using value_type = std::shared_ptr<Module>;

  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules);

  // Registers the module as the next index.
  void push_back(std::shared_ptr<Module> module);
  ModuleList& append(std::shared_ptr<Module> module) {
    push_back(std::move(module));
    return *this;
  }
  ModuleList& extend(const std::vector<std::shared_ptr<Module>>& modules);

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // A negative index counts from the end, as in Python; out of range throws std::out_of_range.
  const std::shared_ptr<Module>& operator[](int64_t index) const;
  // The module as its own type (libtorch's at<T>); std::invalid_argument when it is another type.
  template <typename M>
  std::shared_ptr<M> at(int64_t index) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[index]);
    if (!typed) throw std::invalid_argument("ModuleList::at: module " + std::to_string(index) + " is another type");
    return typed;
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

  // As PyTorch: a ModuleList cannot be called (std::logic_error).
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace bytegrad::nn
