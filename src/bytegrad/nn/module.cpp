#include "bytegrad/nn/module.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <typeinfo>
#include <unordered_set>

#include "bytegrad/autograd/accumulate_grad.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::nn {

std::string module_class_name(const Module& m) {
  const char* mangled = typeid(m).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string type = status == 0 && demangled ? demangled.get() : mangled;
  if (const auto colon = type.rfind("::"); colon != std::string::npos) type = type.substr(colon + 2);
  return type;
}

namespace {

template <typename Entries>
auto find_entry(Entries& entries, const std::string& name) {
  auto it = entries.begin();
  while (it != entries.end() && it->first != name) ++it;
  return it;
}

// "Linear 'blocks.0.fc'" or "Sequential (top level)": the class and the path, for messages.
std::string describe_module(const Module& m) {
  const std::string type = module_class_name(m);
  const std::string path = m.name();
  return path.empty() ? type + " (top level)" : fmt::format("{} '{}'", type, path);
}

// Whether `target` is `root` or inside root's subtree (children may be shared: each visited once).
bool subtree_contains(const Module& root, const Module* target, std::unordered_set<const Module*>& visited) {
  if (&root == target) return true;
  if (!visited.insert(&root).second) return false;
  for (const auto& [name, child] : root.named_children())
    if (subtree_contains(*child, target, visited)) return true;
  return false;
}

}  // namespace

Module::Module(const Module& other)
    : forward_hooks_(other.forward_hooks_),
      parameters_(other.parameters_),
      buffers_(other.buffers_),
      children_(other.children_),
      training_(other.training_) {
  refresh_memory_roles();
}

Module::Module(Module&& other) noexcept
    : forward_hooks_(std::move(other.forward_hooks_)),
      parameters_(std::move(other.parameters_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      memory_roles_(std::move(other.memory_roles_)),
      training_(other.training_) {
  for (auto& [name, child] : children_)
    if (child->parent_ == &other) child->parent_ = this;
}

Module& Module::operator=(const Module& other) {
  if (this != &other) {
    forward_hooks_ = other.forward_hooks_;
    parameters_ = other.parameters_;
    buffers_ = other.buffers_;
    children_ = other.children_;
    training_ = other.training_;
    refresh_memory_roles();
  }
  return *this;
}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    for (auto& [name, child] : children_)
      if (child->parent_ == this) child->parent_ = nullptr;
    forward_hooks_ = std::move(other.forward_hooks_);
    parameters_ = std::move(other.parameters_);
    buffers_ = std::move(other.buffers_);
    children_ = std::move(other.children_);
    memory_roles_ = std::move(other.memory_roles_);
    training_ = other.training_;
    for (auto& [name, child] : children_)
      if (child->parent_ == &other) child->parent_ = this;
  }
  return *this;
}

Module::~Module() {
  for (auto& [name, child] : children_)
    if (child && child->parent_ == this) child->parent_ = nullptr;
}

Tensor Module::call_forward(const Tensor& input) {
  if (parent_ == nullptr) return forward(input);
  ModuleScope scope(name());
  return forward(input);
}

Tensor Module::operator()(const Tensor& input) {
  if (!forward_hooks_ || (forward_hooks_->pre.empty() && forward_hooks_->post.empty())) return call_forward(input);
  // Copies of the lists: a hook may remove itself (or another) while they run.
  const std::shared_ptr<ForwardHooks> hooks = forward_hooks_;
  Tensor x = input;
  for (const auto& [id, hook] : std::vector(hooks->pre))
    if (std::optional<Tensor> replaced = hook(*this, x)) x = std::move(*replaced);
  Tensor out = call_forward(x);
  for (const auto& [id, hook] : std::vector(hooks->post))
    if (std::optional<Tensor> replaced = hook(*this, x, out)) out = std::move(*replaced);
  return out;
}

namespace {
template <typename Hook>
RemovableHandle add_hook(std::shared_ptr<ForwardHooks>& slot,
                         std::vector<std::pair<uint64_t, Hook>> ForwardHooks::*list, Hook hook) {
  if (!slot) slot = std::make_shared<ForwardHooks>();
  const uint64_t id = slot->next_id++;
  ((*slot).*list).emplace_back(id, std::move(hook));
  return RemovableHandle([weak = std::weak_ptr<ForwardHooks>(slot), list, id] {
    if (const std::shared_ptr<ForwardHooks> hooks = weak.lock())
      std::erase_if((*hooks).*list, [id](const auto& entry) { return entry.first == id; });
  });
}
}  // namespace

RemovableHandle Module::add_forward_pre_hook(ForwardPreHook hook) {
  return add_hook(forward_hooks_, &ForwardHooks::pre, std::move(hook));
}

RemovableHandle Module::add_forward_hook(ForwardHook hook) {
  return add_hook(forward_hooks_, &ForwardHooks::post, std::move(hook));
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix, bool include_self) {
  std::vector<std::pair<std::string, Module*>> out;
  std::unordered_set<const Module*> seen;
  const std::function<void(Module&, const std::string&, bool)> visit = [&](Module& m, const std::string& path,
                                                                           bool include) {
    if (!seen.insert(&m).second) return;
    if (include) out.emplace_back(path, &m);
    for (const auto& [child_name, child] : m.children_) {
      if (!child) continue;
      std::string child_path = path;
      if (!child_path.empty()) child_path += '.';
      visit(*child, child_path += child_name, true);
    }
  };
  visit(*this, prefix, include_self);
  return out;
}

std::vector<Module*> Module::modules(bool include_self) {
  std::vector<Module*> out;
  for (const auto& [path, m] : named_modules("", include_self)) out.push_back(m);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  std::unordered_set<const Module*> applied;  // a child registered twice is applied once, as children() lists it
  for (const auto& [child_name, child] : children_)
    if (child && applied.insert(child.get()).second) child->apply(fn);
  fn(*this);
  return *this;
}

std::string Module::name() const {
  if (!parent_) return "";
  std::string path = name_in_parent_;
  for (const Module* m = parent_; m->parent_; m = m->parent_) path.insert(0, m->name_in_parent_ + ".");
  return path;
}

void Module::check_new_name(const std::string& name, const char* kind) const {
  if (name.empty()) throw std::invalid_argument(fmt::format("{} name can't be empty string \"\"", kind));
  if (name.find('.') != std::string::npos)
    throw std::invalid_argument(fmt::format("{} name can't contain \".\", got: {}", kind, name));
  const std::string_view k(kind);
  const bool taken = (k != "parameter" && find_entry(parameters_, name) != parameters_.end()) ||
                     (k != "buffer" && find_entry(buffers_, name) != buffers_.end()) ||
                     (k != "module" && find_entry(children_, name) != children_.end());
  if (taken) throw std::invalid_argument(fmt::format("attribute '{}' already exists", name));
}

Tensor Module::register_parameter(std::string name, const Tensor& tensor) {
  check_new_name(name, "parameter");
  if (!tensor.defined())
    throw std::invalid_argument(fmt::format("register_parameter: '{}' is an undefined tensor", name));
  tensor.requires_grad_(true);
  auto it = find_entry(parameters_, name);
  if (it != parameters_.end()) it->second = tensor;
  else parameters_.emplace_back(std::move(name), tensor);
  refresh_memory_roles();
  return tensor;
}

Tensor Module::register_buffer(std::string name, const Tensor& tensor) {
  check_new_name(name, "buffer");
  if (!tensor.defined()) throw std::invalid_argument(fmt::format("register_buffer: '{}' is an undefined tensor", name));
  auto it = find_entry(buffers_, name);
  if (it != buffers_.end()) it->second = tensor;
  else buffers_.emplace_back(std::move(name), tensor);
  refresh_memory_roles();
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> child) {
  check_new_name(name, "module");
  if (!child) throw std::invalid_argument(fmt::format("register_module: '{}' is a null module", name));
  if (child.get() == this)
    throw std::invalid_argument(
        fmt::format("register_module: '{}' is the module itself ({}): a module can't be its own child", name,
                    describe_module(*this)));
  // A module inside its own subtree would make every walk of the tree (name(), parameters(), to()) endless.
  std::unordered_set<const Module*> visited;
  if (subtree_contains(*child, this, visited))
    throw std::invalid_argument(fmt::format(
        "register_module: registering {} as '{}' under {} would make a cycle: {} is already inside {}",
        describe_module(*child), name, describe_module(*this), describe_module(*this), describe_module(*child)));
  child->parent_ = this;
  child->name_in_parent_ = name;
  child->refresh_subtree_memory_roles();  // its parameters' paths now start with this module's
  auto it = find_entry(children_, name);
  if (it != children_.end()) {
    if (it->second != child && it->second->parent_ == this) it->second->parent_ = nullptr;
    it->second = std::move(child);
  } else {
    children_.emplace_back(std::move(name), std::move(child));
  }
}

void Module::refresh_memory_roles() {
  const std::string path = name();
  const std::string prefix = path.empty() ? "" : path + ".";
  std::vector<MemoryRole> roles;
  for (const auto& [entries, role] :
       {std::pair{&parameters_, MemoryCategory::parameter}, std::pair{&buffers_, MemoryCategory::buffer}})
    for (const auto& [name, t] : *entries) roles.emplace_back(t, role, prefix + name);
  memory_roles_ = std::move(roles);
}

void Module::refresh_subtree_memory_roles() {
  refresh_memory_roles();
  for (auto& [name, child] : children_) child->refresh_subtree_memory_roles();
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, buffers);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", all, false);
  // PyTorch's remove_duplicate: a parameter registered in two modules (weight tying) is listed once, under
  // the first name met.
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& entry : all)
    if (seen.insert(&entry.second.impl()).second) out.push_back(std::move(entry));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  // named_parameters' order and duplicates rule, without building the names (zero_grad calls this every step).
  std::vector<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  collect_tensors(out, seen);
  return out;
}

void Module::collect_tensors(std::vector<Tensor>& out, std::unordered_set<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : parameters_)
    if (seen.insert(&t.impl()).second) out.push_back(t);
  for (const auto& [name, child] : children_) child->collect_tensors(out, seen);
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers()) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

void Module::zero_grad(bool set_to_none) { zero_grads(parameters(), set_to_none); }

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::apply_to_tensors(const std::function<Tensor(const Tensor&)>& fn) {
  for (auto& [before, after] : apply_hooks_)
    if (before) before(*this);
  // `t.data = fn(t.data)`: the new tensor is made, then the handle's data replaced, which frees the old
  // block (when nothing else holds it) before the next tensor moves.
  auto replace = [&](const Tensor& t) {
    Tensor made = fn(t);
    if (made.storage() == t.storage()) return;
    TensorImpl& impl = t.impl();
    impl.storage = made.storage();
    impl.sizes = made.sizes();
    impl.strides = made.strides();
    impl.storage_offset = made.storage_offset();
  };
  for (auto& [name, child] : children_) child->apply_to_tensors(fn);
  for (auto& [name, t] : parameters_) {
    replace(t);
    if (Tensor grad = t.grad(); grad.defined()) {
      replace(grad);
      t.set_grad(grad);  // the new block takes the `gradient` role
    }
  }
  for (auto& [name, t] : buffers_) replace(t);
  refresh_memory_roles();  // the new blocks take the `parameter` / `buffer` roles
  for (auto& [before, after] : apply_hooks_)
    if (after) after(*this);
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  apply_to_tensors([&](const Tensor& t) { return t.device() == device ? t : t.to(device); });
  return *this;
}

Module& Module::to_empty(Device device) {
  NoGradGuard no_grad;
  apply_to_tensors([&](const Tensor& t) { return empty(t.sizes(), TensorOptions{t.dtype(), device}); });
  return *this;
}

void Module::add_apply_hooks(std::function<void(Module&)> before, std::function<void(Module&)> after) {
  apply_hooks_.emplace_back(std::move(before), std::move(after));
}

}  // namespace bytegrad::nn
