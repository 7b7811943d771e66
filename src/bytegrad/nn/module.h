// Module: a tree of parameters, buffers and child modules, like torch.nn.Module.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bytegrad/autograd/module_scope.h"
#include "bytegrad/tensor/memory_role.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::nn {

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
  // nodes made here say which module made them (saved_tensors()). Calling forward() directly skips
  // this, as calling Python's Module.forward skips __call__'s hooks.
  Tensor operator()(const Tensor& input) {
    if (parent_ == nullptr) return forward(input);
    ModuleScope scope(name());
    return forward(input);
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

 private:
  void add_child(std::string name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* kind) const;
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  void collect_tensors(std::vector<Tensor>& out, std::unordered_set<const TensorImpl*>& seen) const;
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

}  // namespace bytegrad::nn
