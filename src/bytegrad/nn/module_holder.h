// libtorch's module holders: a shared handle to a module that reads like the module itself, so a libtorch
// program's `model(x)`, `model->forward(x)` and `Sequential(Linear(...), ReLU(), ...)` compile.
//
//   nn::ModuleHolder<nn::Linear> fc(4, 3);            // made in place, as torch::nn::Linear fc(4, 3)
//   Tensor y = fc(x);                                  // operator(): hooks and module scope, as model(x)
//   fc->weight();                                      // the module's members
//   nn::ModuleHolder<nn::Module> model = std::make_shared<Net>();   // any module behind a shared_ptr
//
// A plain std::shared_ptr<Module> cannot be called (`model(x)` needs a class with operator()); hold it in a
// ModuleHolder, or write (*model)(x). BYTEGRAD_MODULE(Net) makes `Net` the holder of a class `NetImpl`, as
// libtorch's TORCH_MODULE.
#pragma once

#include <concepts>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

template <typename M>
class ModuleHolder {
  static_assert(std::is_base_of_v<Module, M>, "ModuleHolder holds an nn::Module");

 public:
  using ContainedType = M;

  // The module made from these arguments (none: its default constructor), as libtorch's holders.
  template <typename... Args>
  explicit ModuleHolder(Args&&... args) requires std::constructible_from<M, Args...>
      : module_(std::make_shared<M>(std::forward<Args>(args)...)) {}
  // An existing module (shared, not copied).
  template <std::derived_from<M> Derived>
  ModuleHolder(std::shared_ptr<Derived> module)  // NOLINT(google-explicit-constructor): a handle, as libtorch's
      : module_(std::move(module)) {
    if (!module_) throw std::invalid_argument("ModuleHolder: the module is null");
  }
  template <std::derived_from<M> Derived>
  ModuleHolder(const ModuleHolder<Derived>& other)  // NOLINT(google-explicit-constructor): as shared_ptr's
      : module_(other.ptr()) {}

  M* operator->() const { return module_.get(); }
  M& operator*() const { return *module_; }
  M* get() const { return module_.get(); }
  const std::shared_ptr<M>& ptr() const { return module_; }
  // Usable wherever libtorch code passes the shared_ptr (to M or to a base of M).
  template <typename Base>
  operator std::shared_ptr<Base>() const requires std::derived_from<M, Base> {  // NOLINT(google-explicit-constructor)
    return module_;
  }

  // The module called as a function: Module::operator() for one tensor (hooks, module scope), otherwise
  // the module's own forward with these arguments.
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    if constexpr (requires { (*module_)(std::forward<Args>(args)...); }) return (*module_)(std::forward<Args>(args)...);
    else return module_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> module_;
};

// A module given the way libtorch code passes one (a module value, a shared_ptr, a holder) as the
// shared_ptr a container registers: a value is moved (or, from an lvalue, shallow-copied) into a new one.
template <typename T>
concept ModuleArgument = std::is_base_of_v<Module, std::remove_cvref_t<T>> || requires(const T& m) {
  { std::shared_ptr<Module>(m) } -> std::same_as<std::shared_ptr<Module>>;
};

template <ModuleArgument T>
std::shared_ptr<Module> as_module_ptr(T&& module) {
  using Plain = std::remove_cvref_t<T>;
  if constexpr (std::is_base_of_v<Module, Plain>) return std::make_shared<Plain>(std::forward<T>(module));
  else return std::shared_ptr<Module>(module);
}

}  // namespace bytegrad::nn

// Makes `Name` a holder of the module class `NameImpl` (libtorch's TORCH_MODULE): `Name net(args...)`
// constructs NameImpl(args...) behind a shared_ptr; net(x), net->forward(x).
// NOLINTBEGIN(bugprone-macro-parentheses): Name is a class name that declares
#define BYTEGRAD_MODULE(Name)                                     \
  class Name : public ::bytegrad::nn::ModuleHolder<Name##Impl> {  \
   public:                                                        \
    using ::bytegrad::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
// NOLINTEND(bugprone-macro-parentheses)
