// Sequential, as torch.nn.Sequential: its modules run in order, each registered under its index.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "bytegrad/nn/module.h"
#include "bytegrad/nn/module_holder.h"

namespace bytegrad::nn {

// Whether the arguments are exactly one M (then a constructor call is M's copy or move, not a list of children).
template <typename M, typename... Args>
concept CopyOf = sizeof...(Args) == 1 && (std::is_same_v<std::remove_cvref_t<Args>, M> && ...);

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  // libtorch's variadic form: Sequential(Linear(4, 8), ReLU(), Linear(8, 2)), each argument a module value
  // (moved in), a shared_ptr or a ModuleHolder. One Sequential argument is a copy, as for any class.
  template <ModuleArgument... Ms>
  explicit Sequential(Ms&&... modules) requires(!CopyOf<Sequential, Ms...>) {
    (push_back(as_module_ptr(std::forward<Ms>(modules))), ...);
  }
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace bytegrad::nn
