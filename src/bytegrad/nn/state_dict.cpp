// Module::state_dict and load_state_dict (declared in module.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <utility>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/module.h"

namespace bytegrad::nn {

struct StateLoadPlan {
  std::vector<std::string> missing, unexpected, errors;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (the module's tensor, the dict's tensor)
};

namespace {

std::string quoted_list(const std::vector<std::string>& keys) {
  std::vector<std::string> quoted;
  quoted.reserve(keys.size());
  for (const auto& k : keys) quoted.push_back('"' + k + '"');
  return fmt::format("{}", fmt::join(quoted, ", "));
}

}  // namespace

void Module::collect_state(const std::string& prefix, TensorDict& out) const {
  for (const auto& [name, t] : parameters_) out.insert_or_assign(prefix + name, t.detach());
  for (const auto& [name, t] : buffers_) out.insert_or_assign(prefix + name, t.detach());
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

TensorDict Module::state_dict() const {
  TensorDict out;
  collect_state("", out);
  return out;
}

// PyTorch's _load_from_state_dict for one module, then its children with their prefixes: this module's
// own tensors are matched by key, and a key under this prefix is unexpected when it names neither one of
// them nor (through its first component) a child.
void Module::plan_state_load(const std::string& prefix, const TensorDict& state_dict, StateLoadPlan& plan) const {
  auto is_local = [&](const std::string& name) {
    for (const auto* entries : {&parameters_, &buffers_})
      for (const auto& entry : *entries)
        if (entry.first == name) return true;
    return false;
  };
  for (const auto* entries : {&parameters_, &buffers_}) {
    for (const auto& [name, target] : *entries) {
      const std::string key = prefix + name;
      const Tensor* source = state_dict.find(key);
      if (!source) {
        plan.missing.push_back(key);
      } else if (!source->defined()) {
        plan.errors.push_back(fmt::format("the checkpoint's {} is an undefined tensor", key));
      } else if (source->sizes() != target.sizes()) {
        plan.errors.push_back(fmt::format(
            "size mismatch for {}: copying a param with shape {} from checkpoint, the shape in current model is {}.",
            key, shape_str(source->sizes()), shape_str(target.sizes())));
      } else if (source->is_meta() && !target.is_meta()) {
        plan.errors.push_back(fmt::format("the checkpoint's {} is a meta tensor: it has no values to copy into {}", key,
                                          describe(target)));
      } else {
        plan.copies.emplace_back(target, *source);
      }
    }
  }
  for (const auto& [key, value] : state_dict) {
    if (!key.starts_with(prefix)) continue;
    const std::string rest = key.substr(prefix.size());
    const auto dot = rest.find('.');
    const bool known = dot == std::string::npos
                           ? is_local(rest)
                           : std::any_of(children_.begin(), children_.end(),
                                         [&](const auto& child) { return child.first == rest.substr(0, dot); });
    if (!known) plan.unexpected.push_back(key);
  }
  for (const auto& [name, child] : children_) child->plan_state_load(prefix + name + ".", state_dict, plan);
}

IncompatibleKeys Module::load_state_dict(const TensorDict& state_dict, bool strict) {
  StateLoadPlan plan;
  plan_state_load("", state_dict, plan);
  std::vector<std::string> messages;
  if (strict && !plan.missing.empty())
    messages.push_back(fmt::format("Missing key(s) in state_dict: {}.", quoted_list(plan.missing)));
  if (strict && !plan.unexpected.empty())
    messages.push_back(fmt::format("Unexpected key(s) in state_dict: {}.", quoted_list(plan.unexpected)));
  messages.insert(messages.end(), plan.errors.begin(), plan.errors.end());
  if (!messages.empty())
    throw std::runtime_error(fmt::format("Error(s) in loading state_dict for {}:\n\t{}", module_class_name(*this),
                                         fmt::join(messages, "\n\t")));

  NoGradGuard no_grad;
  for (auto& [target, source] : plan.copies) {
    Tensor from = source;
    // PyTorch's blocking copy from the host to a device converts the dtype on the host (Copy.cu), so no
    // device temporary is made; bytegrad's copy_ would stage one in the source's dtype on the device.
    if (from.device().type == DeviceType::cpu && target.device().type != DeviceType::cpu && !target.is_meta() &&
        from.dtype() != target.dtype())
      from = from.to(target.dtype());
    target.copy_(from);
  }
  return {std::move(plan.missing), std::move(plan.unexpected)};
}

}  // namespace bytegrad::nn
