// Module: a tree of parameters, buffers and child modules, like torch.nn.Module.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/tensor/tensor.h"

namespace bytegrad::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& input) = 0;
  Tensor operator()(const Tensor& input) { return forward(input); }

  // Depth first, in registration order (this module's own first), as PyTorch lists them.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;

  // set_to_none (PyTorch's default since 2.0) drops every .grad; otherwise zeroes them in place.
  void zero_grad(bool set_to_none = true);
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves parameters and buffers, in registration order, keeping every handle to them valid (the
  // parameter's data is replaced, as `param.data = param.data.to(device)` does).
  Module& to(Device device);
  Module& cuda() { return to(Device{DeviceType::cuda, 0}); }

 protected:
  const Tensor& register_parameter(std::string name, const Tensor& tensor);  // sets requires_grad
  const Tensor& register_buffer(std::string name, const Tensor& tensor);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace bytegrad::nn
