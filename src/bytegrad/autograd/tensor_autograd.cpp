// Tensor's autograd members.
#include <stdexcept>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/validate_gradient.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

void install_graph_recorder();  // recorder.cpp

namespace {
// TensorOptions::requires_grad: the tensor layer's factories call this on their new tensor. Installed at
// start-up; this file is linked whenever anything about gradients is used (it defines Tensor's autograd
// members).
[[maybe_unused]] const bool requires_grad_setter_installed =
    (install_requires_grad_setter([](const Tensor& t) { t.requires_grad_(true); }), true);
}  // namespace

bool Tensor::requires_grad() const { return bytegrad::requires_grad(*this); }

const Tensor& Tensor::requires_grad_(bool enabled) const {
  AutogradMeta* meta = autograd_meta(*this);
  if (meta && meta->grad_fn) {
    if (!enabled)
      throw std::runtime_error("requires_grad_(false) on " + describe(*this) +
                               ", which is not a leaf: use detach() to get a tensor without history");
    return *this;
  }
  if (enabled) {
    if (!is_floating_point(dtype()))
      throw std::invalid_argument("only floating point tensors can require gradients, got " + describe(*this));
    install_graph_recorder();
  }
  if (enabled || meta) ensure_autograd_meta(*this).requires_grad = enabled;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* meta = autograd_meta(*this);
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    if (grad.impl_ptr() == impl_ptr())
      throw std::invalid_argument("set_grad: can't assign a tensor as its own grad (" + describe(grad) + ")");
    validate_gradient(grad, gradient_metadata_of(*this), {GradientEntry::assigned, 0, {}});
  }
  set_grad_of(ensure_autograd_meta(*this), grad, *this);
}

bool Tensor::is_leaf() const {
  const AutogradMeta* meta = autograd_meta(*this);
  return !meta || !meta->grad_fn;
}

std::string Tensor::grad_fn_name() const {
  const AutogradMeta* meta = autograd_meta(*this);
  return meta && meta->grad_fn ? meta->grad_fn->name() : "";
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const { return alias(); }

RemovableHandle Tensor::register_gradient_hook(GradientHook hook) const {
  if (!requires_grad())
    throw std::runtime_error("register_hook: cannot register a hook on a tensor that doesn't require gradient (" +
                             describe(*this) + ")");
  AutogradMeta& meta = ensure_autograd_meta(*this);
  if (!meta.hooks) {
    meta.hooks = std::make_shared<GradientHooks>();
    if (meta.grad_fn) meta.grad_fn->tensor_pre_hooks.emplace_back(meta.output_nr, meta.hooks);
  }
  const uint64_t id = meta.hooks->next_id++;
  meta.hooks->hooks.emplace_back(id, std::move(hook));
  return RemovableHandle([weak = std::weak_ptr<GradientHooks>(meta.hooks), id] {
    if (const std::shared_ptr<GradientHooks> hooks = weak.lock())
      std::erase_if(hooks->hooks, [id](const auto& entry) { return entry.first == id; });
  });
}

}  // namespace bytegrad
