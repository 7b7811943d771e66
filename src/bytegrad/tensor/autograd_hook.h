// The tensor layer's one point of contact with autograd. Differentiable ops report what they did here;
// the autograd layer, when linked in, installs a hook that records graph nodes (which tensors each node
// saves decides what stays allocated until backward). Without a hook, ops only compute.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bytegrad/core/op_table.h"
#include "bytegrad/core/scoped_value.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

// What an op does, in the terms its derivative needs: its row in the op table, its tensors and its typed
// arguments. Build one with make_record<OpId::x>(...), which checks the arguments' type at compile time.
struct OpRecord {
  OpId op;
  bool in_place = false;       // add_, sqrt_, masked_fill_, ...: outputs[0] is the modified tensor
  std::vector<Tensor> inputs;  // tensor operands in signature order (undefined where optional and absent)
  // Every result of the kernel, in PyTorch's order (result0, result1, ...: native_layer_norm's output, mean,
  // rstd); for in-place ops the modified tensor. Empty while the op is begun (see OpRecording).
  std::vector<Tensor> outputs;
  OpArgs args;  // ArgsOf<op>

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

// An op's graph node between the two steps of its recording (see OpRecording): made, its inputs saved;
// finish() gives the outputs their history and saves the outputs the node keeps.
class OpInProgress {
 public:
  virtual ~OpInProgress() = default;
  virtual void finish(const std::vector<Tensor>& outputs) = 0;
};

class AutogradHook {
 public:
  virtual ~AutogradHook() = default;
  // Whether any of these operands needs a graph (grad mode on and one of them requires grad).
  // Spans, not vectors: asked on every op, recorded or not, and a braced list of operands then allocates
  // nothing.
  virtual bool needs_graph(std::span<const Tensor> inputs) const = 0;
  bool needs_graph(std::initializer_list<Tensor> inputs) const { return needs_graph(std::span(inputs)); }
  // tensor.requires_grad(), whatever the grad mode.
  virtual bool requires_grad(const Tensor& t) const = 0;
  // tensor.is_leaf(): no node made it.
  virtual bool is_leaf(const Tensor& t) const = 0;
  // Before the op's kernel runs (record.outputs empty): makes its node and saves the inputs it keeps.
  virtual std::unique_ptr<OpInProgress> begin(OpRecord record) = 0;
  // Both steps at once, after the kernel ran (record.outputs set): for ops that allocate nothing (views)
  // or save no inputs, and for in-place ops (which allocate no output, and save self only as modified).
  virtual void record(OpRecord record) = 0;
  // Called by an in-place op (inputs[0] is the tensor it modifies) before it writes anything: throws when
  // autograd would refuse to record it (a leaf that requires grad, a view of one, a row without a formula
  // while a graph is needed), so that a refused op leaves every tensor unchanged.
  virtual void check_in_place(OpId op, std::span<const Tensor> inputs) const = 0;
  // The name of the node that made t ("AddmmBackward0"), "" for leaves and tensors without history; for
  // printing (Tensor::str shows grad_fn=<...> as PyTorch's repr does).
  virtual std::string grad_fn_name(const Tensor& t) const = 0;
  // Whether saved-tensor hooks are installed on this thread: a tensor a node saves may then be read by
  // someone other than the node's backward (pack may copy it), so an op must write all of it.
  virtual bool saved_tensors_hooked() const { return false; }
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

 private:
  ScopedValue<bool> scope_;
};

template <typename Compute>
auto without_recording(Compute&& compute) {
  AutogradRecordingPause pause;
  return compute();
}

// An op records itself in PyTorch's two steps (its generated VariableType code), around its computation:
//
//   OpRecording recording = begin_recording<OpId::addmm>({bias, a, b}, {beta, alpha});
//   Tensor out = without_recording([&] { return addmm_compute(bias, a, b, beta, alpha); });
//   recording.finish({out});
//
// begin, before the kernel runs and allocates anything: the node is made and the inputs it keeps are saved
// (handed to saved-tensor hooks, if any, now); finish, after: the outputs get their history and the outputs
// the node keeps are saved. The order is what memory sees: an activation checkpoint's recomputation stops as
// soon as the last tensor the forward saved is saved again (PyTorch's early stop), so when that is an input
// (c_proj's addmm saving mat1 and mat2), the op's output is never allocated. Nothing happens when autograd is
// not linked, grad mode is off, no input requires grad, or the op runs inside another op's computation; a
// recording not finished (the kernel threw) is dropped with its node.
class OpRecording {
 public:
  OpRecording() = default;
  explicit OpRecording(std::unique_ptr<OpInProgress> node) : node_(std::move(node)) {}
  void finish(const std::vector<Tensor>& outputs) {
    if (!node_) return;
    std::unique_ptr<OpInProgress> node = std::move(node_);
    node->finish(outputs);
  }
  // A braced list of outputs becomes a vector only when the op is recorded.
  void finish(std::initializer_list<Tensor> outputs) {
    if (node_) finish(std::vector<Tensor>(outputs));
  }

 private:
  std::unique_ptr<OpInProgress> node_;
};

template <OpId id>
OpRecording begin_recording(std::vector<Tensor> inputs, ArgsOf<id> args = {}) {
  AutogradHook* hook = autograd_hook();
  if (!hook || autograd_recording_paused() || !hook->needs_graph(inputs)) return {};
  return OpRecording(hook->begin(OpRecord{id, false, std::move(inputs), {}, std::move(args)}));
}
// A braced list of inputs ({a, b}) becomes the record's vector only when the op is recorded: most ops run
// unrecorded (no grad mode, the optimizer), and a vector made for nothing is a heap allocation per op.
template <OpId id>
OpRecording begin_recording(std::initializer_list<Tensor> inputs, ArgsOf<id> args = {}) {
  AutogradHook* hook = autograd_hook();
  if (!hook || autograd_recording_paused() || !hook->needs_graph(inputs)) return {};
  return OpRecording(hook->begin(OpRecord{id, false, std::vector<Tensor>(inputs), {}, std::move(args)}));
}
// The arguments made only when the op is recorded (wrapped dims: an invalid one is then reported by the
// computation's own checks, in their order, when nothing is recorded).
template <OpId id, typename MakeArgs>
requires std::is_invocable_r_v<ArgsOf<id>, MakeArgs> OpRecording begin_recording(std::vector<Tensor> inputs,
                                                                                 MakeArgs&& make_args) {
  AutogradHook* hook = autograd_hook();
  if (!hook || autograd_recording_paused() || !hook->needs_graph(inputs)) return {};
  return OpRecording(hook->begin(OpRecord{id, false, std::move(inputs), {}, make_args()}));
}
template <OpId id, typename MakeArgs>
requires std::is_invocable_r_v<ArgsOf<id>, MakeArgs> OpRecording begin_recording(std::initializer_list<Tensor> inputs,
                                                                                 MakeArgs&& make_args) {
  AutogradHook* hook = autograd_hook();
  if (!hook || autograd_recording_paused() || !hook->needs_graph(inputs)) return {};
  return OpRecording(hook->begin(OpRecord{id, false, std::vector<Tensor>(inputs), {}, make_args()}));
}

// The two steps around a computation that makes one tensor:
//   return compute_recorded<OpId::mm>({a, b}, {}, [&] { return mm_compute(a, b); });
template <OpId id, typename Compute>
Tensor compute_recorded(std::vector<Tensor> inputs, ArgsOf<id> args, Compute&& compute) {
  OpRecording recording = begin_recording<id>(std::move(inputs), std::move(args));
  Tensor out = without_recording(std::forward<Compute>(compute));
  recording.finish({out});
  return out;
}
template <OpId id, typename Compute>
Tensor compute_recorded(std::initializer_list<Tensor> inputs, ArgsOf<id> args, Compute&& compute) {
  OpRecording recording = begin_recording<id>(inputs, std::move(args));
  Tensor out = without_recording(std::forward<Compute>(compute));
  recording.finish({out});
  return out;
}

// Both steps at once, after the op computed (AutogradHook::record): for views, ops whose node saves no
// input, and in-place ops. `make` builds the record only when autograd wants it, so ops without gradients
// pay one branch.
template <typename MakeRecord>
void record_for_autograd(std::span<const Tensor> inputs, MakeRecord&& make) {
  AutogradHook* hook = autograd_hook();
  if (hook && !autograd_recording_paused() && hook->needs_graph(inputs)) hook->record(make());
}
template <typename MakeRecord>
void record_for_autograd(std::initializer_list<Tensor> inputs, MakeRecord&& make) {
  record_for_autograd(std::span(inputs), std::forward<MakeRecord>(make));
}

// The check every in-place op makes before writing (see AutogradHook::check_in_place); nothing when
// autograd is not linked or the op runs inside another op's computation.
inline void check_in_place_for_autograd(OpId op, std::span<const Tensor> inputs) {
  AutogradHook* hook = autograd_hook();
  if (hook && !autograd_recording_paused()) hook->check_in_place(op, inputs);
}
inline void check_in_place_for_autograd(OpId op, std::initializer_list<Tensor> inputs) {
  check_in_place_for_autograd(op, std::span(inputs));
}

// tensor.requires_grad() for ops that decide by it (false when autograd is not linked).
inline bool tensor_requires_grad(const Tensor& t) {
  AutogradHook* hook = autograd_hook();
  return hook && hook->requires_grad(t);
}

}  // namespace bytegrad
