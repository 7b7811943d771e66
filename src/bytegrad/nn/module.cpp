#include "bytegrad/nn/module.h"

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

const Tensor& Module::register_parameter(std::string name, const Tensor& tensor) {
  tensor.requires_grad_(true);
  parameters_.emplace_back(std::move(name), tensor);
  return parameters_.back().second;
}

const Tensor& Module::register_buffer(std::string name, const Tensor& tensor) {
  buffers_.emplace_back(std::move(name), tensor);
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, buffers);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, false);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      grad.zero_();
    }
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  auto move = [&](const Tensor& t) {
    if (t.device() == device) return;
    Tensor moved = t.to(device);
    TensorImpl& impl = t.impl();
    impl.storage = moved.storage();
    impl.sizes = moved.sizes();
    impl.strides = moved.strides();
    impl.storage_offset = moved.storage_offset();
  };
  for (auto& [name, t] : parameters_) move(t);
  for (auto& [name, t] : buffers_) move(t);
  for (auto& [name, child] : children_) child->to(device);
  return *this;
}

}  // namespace bytegrad::nn
