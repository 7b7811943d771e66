// The tensor layer's one point of contact with autograd. Differentiable ops report what they did here;
// the autograd layer, when linked in, installs a hook that records graph nodes (which tensors each node
// saves decides what stays allocated until backward). Without a hook, ops only compute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bytegrad/core/op_table.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

// What an op did, in the terms its derivative needs: its row in the op table, its tensors and its typed
// arguments. Build one with make_record<OpId::x>(...), which checks the arguments' type at compile time.
struct OpRecord {
  OpId op;
  bool in_place = false;        // add_, sqrt_, masked_fill_, ...: outputs[0] is the modified tensor
  std::vector<Tensor> inputs;   // tensor operands in signature order (undefined where optional and absent)
  std::vector<Tensor> outputs;  // results (for in-place ops: the modified tensor)
  OpArgs args;                  // ArgsOf<op>

  template <OpId id>
  const ArgsOf<id>& args_of() const {
    return std::get<ArgsOf<id>>(args);
  }
};

template <OpId id>
OpRecord make_record(std::vector<Tensor> inputs, std::vector<Tensor> outputs, ArgsOf<id> args = {}) {
  return OpRecord{id, false, std::move(inputs), std::move(outputs), std::move(args)};
}
// In place: the modified tensor is both inputs[0] and the output.
template <OpId id>
OpRecord make_in_place_record(std::vector<Tensor> inputs, ArgsOf<id> args = {}) {
  Tensor self = inputs.at(0);
  return OpRecord{id, true, std::move(inputs), {std::move(self)}, std::move(args)};
}

class AutogradHook {
 public:
  virtual ~AutogradHook() = default;
  // Whether any of these operands needs a graph (grad mode on and one of them requires grad).
  virtual bool needs_graph(const std::vector<Tensor>& inputs) const = 0;
  // tensor.requires_grad(), whatever the grad mode.
  virtual bool requires_grad(const Tensor& t) const = 0;
  // tensor.is_leaf(): no node made it.
  virtual bool is_leaf(const Tensor& t) const = 0;
  virtual void record(OpRecord record) = 0;
  // Called by an in-place op (inputs[0] is the tensor it modifies) before it writes anything: throws when
  // autograd would refuse to record it (a leaf that requires grad, a view of one, a row without a formula
  // while a graph is needed), so that a refused op leaves every tensor unchanged.
  virtual void check_in_place(OpId op, const std::vector<Tensor>& inputs) const = 0;
  // The name of the node that made t ("AddmmBackward0"), "" for leaves and tensors without history; for
  // printing (Tensor::str shows grad_fn=<...> as PyTorch's repr does).
  virtual std::string grad_fn_name(const Tensor& t) const = 0;
};

void install_autograd_hook(AutogradHook* hook);
AutogradHook* autograd_hook();

// What a factory given TensorOptions::requires_grad calls on its new tensor (t.requires_grad_(true)). The
// autograd layer installs it when linked (tensor_autograd.cpp, at start-up); without it such a factory
// throws, as nothing could use the gradient.
using RequiresGradSetter = void (*)(const Tensor& t);
void install_requires_grad_setter(RequiresGradSetter setter);
RequiresGradSetter requires_grad_setter();

// A primitive op (one with its own derivative) computes under a pause, so the views and copies it makes
// internally are not recorded; then it records itself once. Composite ops (matmul, linear, ...) do not
// pause: the primitives they are made of record, as in PyTorch.
bool autograd_recording_paused();
class AutogradRecordingPause {
 public:
  AutogradRecordingPause();
  ~AutogradRecordingPause();
  AutogradRecordingPause(const AutogradRecordingPause&) = delete;
  AutogradRecordingPause& operator=(const AutogradRecordingPause&) = delete;

 private:
  bool previous_;
};

template <typename Compute>
auto without_recording(Compute&& compute) {
  AutogradRecordingPause pause;
  return compute();
}

// Records the op when autograd wants it; `make` builds the record only then, so ops without
// gradients pay one branch.
template <typename MakeRecord>
void record_for_autograd(const std::vector<Tensor>& inputs, MakeRecord&& make) {
  AutogradHook* hook = autograd_hook();
  if (hook && !autograd_recording_paused() && hook->needs_graph(inputs)) hook->record(make());
}

// The check every in-place op makes before writing (see AutogradHook::check_in_place); nothing when
// autograd is not linked or the op runs inside another op's computation.
inline void check_in_place_for_autograd(OpId op, const std::vector<Tensor>& inputs) {
  AutogradHook* hook = autograd_hook();
  if (hook && !autograd_recording_paused()) hook->check_in_place(op, inputs);
}

// tensor.requires_grad() for ops that decide by it (false when autograd is not linked).
inline bool tensor_requires_grad(const Tensor& t) {
  AutogradHook* hook = autograd_hook();
  return hook && hook->requires_grad(t);
}

}  // namespace bytegrad
