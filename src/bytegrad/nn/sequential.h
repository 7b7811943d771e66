// Sequential, as torch.nn.Sequential: its modules run in order, each registered under its index.
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace bytegrad::nn
