// Module: a tree of parameters, buffers and child modules, like torch.nn.Module.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bytegrad/autograd/module_scope.h"
#include "bytegrad/core/removable_handle.h"
#include "bytegrad/tensor/memory_role.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/tensor/tensor_dict.h"

namespace bytegrad::nn {

// What load_state_dict(..., strict = false) did not match, as PyTorch's _IncompatibleKeys: the module's
// keys the dict lacks (left as they were) and the dict's keys the module has no place for (ignored).
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

struct StateLoadPlan;  // load_state_dict's checks and copies, gathered before anything is written
class Module;

// Module hooks as torch.nn.Module's: a forward pre-hook sees (module, input) before forward and may return
// a replacement input; a forward hook sees (module, input, output) after it and may return a replacement
// output. nullopt (or an undefined Tensor) keeps what was there.
using ForwardPreHook = std::function<std::optional<Tensor>(Module&, const Tensor&)>;
using ForwardHook = std::function<std::optional<Tensor>(Module&, const Tensor&, const Tensor&)>;
struct ForwardHooks {
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, ForwardHook>> post;
  uint64_t next_id = 0;
};

namespace module_detail {
// A hook's result as an optional replacement: void and undefined tensors replace nothing.
template <typename Hook, typename... Args>
std::optional<Tensor> replacement(Hook& hook, Args&... args) {
  using Result = std::invoke_result_t<Hook&, Args&...>;
  if constexpr (std::is_void_v<Result>) {
    hook(args...);
    return std::nullopt;
  } else {
    std::optional<Tensor> result = hook(args...);
    if (result && !result->defined()) return std::nullopt;
    return result;
  }
}
}  // namespace module_detail

class Module {
 public:
  Module() = default;
  // A copy shares the original's parameters, buffers and children (handles, as a shallow copy); the
  // children keep naming the original as their parent. A move hands the children over.
  Module(const Module& other);
  Module(Module&& other) noexcept;
  Module& operator=(const Module& other);
  Module& operator=(Module&& other) noexcept;
  virtual ~Module();

  virtual Tensor forward(const Tensor& input) = 0;
  // Runs forward inside a ModuleScope naming this module by its path in the model (name()), so autograd
  // nodes made here say which module made them (saved_tensors()), with the forward pre-hooks before and the
  // forward hooks after (outside the scope: they are the caller's code). Calling forward() directly skips
  // all of this, as calling Python's Module.forward skips __call__'s hooks.
  Tensor operator()(const Tensor& input);
  // torch.nn.Module.register_forward_pre_hook / register_forward_hook: `hook(module, input)` and
  // `hook(module, input, output)`, returning void, a Tensor or std::optional<Tensor> (a defined result
  // replaces the input / output). Hooks run in registration order; the handle's remove() unregisters one.
  template <std::invocable<Module&, const Tensor&> Hook>
  RemovableHandle register_forward_pre_hook(Hook hook) {
    return add_forward_pre_hook([hook = std::move(hook)](Module& m, const Tensor& input) mutable {
      return module_detail::replacement(hook, m, input);
    });
  }
  template <std::invocable<Module&, const Tensor&, const Tensor&> Hook>
  RemovableHandle register_forward_hook(Hook hook) {
    return add_forward_hook([hook = std::move(hook)](Module& m, const Tensor& input, const Tensor& output) mutable {
      return module_detail::replacement(hook, m, input, output);
    });
  }
  // For a forward with other arguments: `auto scope = module_scope();` first names this module the same way.
  [[nodiscard]] ModuleScope module_scope() const { return ModuleScope(name()); }
  // This module's path from the top of its model, as named_modules() names it ("fc1", "blocks.0.attn");
  // "" for a module registered nowhere.
  std::string name() const;

  // Registration, public as in PyTorch (register_parameter, register_buffer, add_module/register_module).
  // A name is non-empty and has no "."; registering an existing name of the same kind replaces the entry
  // in place (its position kept), while a name already used by another kind is an error ("attribute 'x'
  // already exists"). Each returns what it registered (a handle sharing the tensor).
  Tensor register_parameter(std::string name, const Tensor& tensor);  // sets requires_grad, as nn.Parameter
  Tensor register_buffer(std::string name, const Tensor& tensor);
  template <typename M>
  // NOLINTNEXTLINE(performance-unnecessary-value-param): `name` is moved; clang-tidy 14 misses it in a template
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }

  // Depth first, in registration order (this module's own first), as PyTorch lists them; a parameter
  // registered in several modules (tied weights) once, under its first name.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> buffers() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Direct children, in registration order.
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // Every module of the tree, depth first in registration order, this one first (named `prefix`, "" by
  // default) unless include_self is false; a module registered in several places once, under its first path
  // ("fc1", "blocks.0.attn"), as torch.nn.Module.named_modules. The pointers are the tree's own modules.
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "", bool include_self = true);
  std::vector<Module*> modules(bool include_self = true);
  // torch.nn.Module.apply: fn on every child's subtree first, then on this module (PyTorch's order, which
  // the recorded programs follow; libtorch's C++ apply visits this module first). Returns *this.
  Module& apply(const std::function<void(Module&)>& fn);

  // set_to_none (PyTorch's default since 2.0) drops every .grad; otherwise zeroes them in place.
  void zero_grad(bool set_to_none = true);
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // PyTorch's Module._apply order: every child first (recursively), then this module's parameters in
  // registration order, each followed by its .grad when it has one, then its buffers. Every handle stays
  // valid: a tensor's data is replaced, as `param.data = param.data.to(device)` does, so each old block is
  // freed as soon as its replacement exists (when nothing else holds it). The allocation order is
  // PyTorch's, so the segments and peaks are too.
  Module& to(Device device);
  Module& cuda() { return to(Device{DeviceType::cuda, 0}); }
  // torch.nn.Module.to_empty(device=...): every parameter, gradient and buffer re-made uninitialised on
  // `device` with its sizes and dtype, in to()'s order, each handle kept (requires_grad with it). The way to
  // materialise a model built on meta; the values then come from reset_parameters() or a state dict.
  Module& to_empty(Device device);
  // Code run around this module's part of to() / to_empty() (PyTorch's Module._apply, which FSDP's module
  // overrides to reshard before and re-pad its shards after): `before` first, `after` once the children
  // and this module's own tensors are done. Either may be empty.
  void add_apply_hooks(std::function<void(Module&)> before, std::function<void(Module&)> after);

  // PyTorch's state_dict(): every parameter and buffer under its path ("fc1.weight"), in PyTorch's order
  // (each module's own parameters, then its own buffers, then its children, depth first). A tensor
  // registered in several places (tied weights) appears under each name. The values are detached handles
  // sharing the module's storage: nothing is copied or allocated.
  TensorDict state_dict() const;
  // PyTorch's load_state_dict: copies each entry into the existing tensor of that name, in place and under
  // no_grad (param.copy_(input)), converting the dtype as copy_ does; a host source is converted on the host
  // first, as PyTorch's blocking copy does, so the device gets nothing beyond the tensors it already has.
  // Everything is checked before anything is written; on any error nothing is modified and
  // std::runtime_error lists every problem: "Error(s) in loading state_dict for GPT:" then, with strict,
  // "Missing key(s) in state_dict: ..." and "Unexpected key(s) in state_dict: ...", and in either mode
  // "size mismatch for fc.weight: copying a param with shape [3, 4] from checkpoint, the shape in current
  // model is [2, 4]." Without strict, missing and unexpected keys are returned instead.
  IncompatibleKeys load_state_dict(const TensorDict& state_dict, bool strict = true);

 private:
  void add_child(std::string name, std::shared_ptr<Module> child);
  // Module._apply: `fn` gives each tensor's new data (or returns it unchanged), children first.
  void apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn);
  std::vector<std::pair<std::function<void(Module&)>, std::function<void(Module&)>>> apply_hooks_;
  Tensor call_forward(const Tensor& input);
  RemovableHandle add_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle add_forward_hook(ForwardHook hook);
  // Shared by shallow copies, as Python's copy.copy shares a module's hook dicts; null until a hook is added.
  std::shared_ptr<ForwardHooks> forward_hooks_;
  void check_new_name(const std::string& name, const char* kind) const;
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  void collect_tensors(std::vector<Tensor>& out, std::unordered_set<const TensorImpl*>& seen) const;
  void collect_state(const std::string& prefix, TensorDict& out) const;
  void plan_state_load(const std::string& prefix, const TensorDict& state_dict, StateLoadPlan& plan) const;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  // The `parameter` / `buffer` roles of this module's own tensors' blocks, named by their paths
  // ("fc1.weight"): remade when a tensor is registered or moved, or the module's path changes.
  std::vector<MemoryRole> memory_roles_;
  void refresh_memory_roles();
  void refresh_subtree_memory_roles();
  // Where this module was last registered (cleared when that parent goes), for name().
  const Module* parent_ = nullptr;
  std::string name_in_parent_;
  bool training_ = true;
};

// "GPT", "Linear": a module's class without its namespace, as PyTorch's messages name type(m).__name__.
std::string module_class_name(const Module& m);

}  // namespace bytegrad::nn
