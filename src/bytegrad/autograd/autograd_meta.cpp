#include "bytegrad/autograd/autograd_meta.h"

#include "bytegrad/autograd/accumulate_grad.h"
#include "bytegrad/core/recycling_allocator.h"

namespace bytegrad {

AutogradMeta* autograd_meta(const Tensor& t) { return t.defined() ? t.impl().autograd.get() : nullptr; }

AutogradMeta& ensure_autograd_meta(const Tensor& t) {
  auto& slot = t.impl().autograd;
  if (!slot) slot = make_shared_recycled<AutogradMeta>();
  return *slot;
}

void set_grad_of(AutogradMeta& meta, Tensor grad, const Tensor& variable) {
  meta.grad = std::move(grad);
  // Named after the parameter it belongs to ("fc1.weight.grad"), when a module named that one.
  const std::string owner = meta.grad.defined() ? memory_role_owner(variable) : std::string();
  meta.grad_role = MemoryRole(meta.grad, MemoryCategory::gradient, owner.empty() ? owner : owner + ".grad");
}

bool requires_grad(const Tensor& t) {
  const AutogradMeta* meta = autograd_meta(t);
  return meta && (meta->requires_grad || meta->grad_fn);
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* meta = autograd_meta(t);
  if (!meta) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::shared_ptr<Node> accumulator = meta->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(Tensor(t.impl_ptr()));
    meta->grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& meta = ensure_autograd_meta(t);
  meta.grad_fn = node;
  meta.output_nr = output_nr;
  if (node->input_metadata.size() <= output_nr) node->input_metadata.resize(output_nr + 1);
  node->input_metadata[output_nr] = {t.sizes(), t.dtype(), t.device()};
}

Tensor view_base(const Tensor& view) {
  const AutogradMeta* meta = autograd_meta(view);
  if (!meta) return Tensor();
  std::shared_ptr<TensorImpl> base = meta->view_base.lock();
  return base ? Tensor(std::move(base)) : Tensor();
}

}  // namespace bytegrad
