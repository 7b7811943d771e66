// The optimizer base: the parameter list and zero_grad.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "bytegrad/autograd/accumulate_grad.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/optim/optimizer.h"
#include "bytegrad/tensor/memory_role.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  if (params_.empty()) throw std::invalid_argument("optimizer got an empty parameter list");
  for (const Tensor& p : params_) {
    if (!p.defined()) throw std::invalid_argument("optimizer: a parameter is an undefined tensor");
    if (!p.is_leaf())
      throw std::invalid_argument(
          fmt::format("optimizer can only optimize leaf tensors, got {} (grad_fn {})", describe(p), p.grad_fn_name()));
  }
}

void Optimizer::check_groups_disjoint(const std::vector<size_t>& group_ends) const {
  std::unordered_map<const TensorImpl*, size_t> group_of;
  size_t group = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    while (group < group_ends.size() && i >= group_ends[group]) ++group;
    const auto [it, inserted] = group_of.emplace(&params_[i].impl(), group);
    if (!inserted && it->second != group)
      throw std::invalid_argument(
          fmt::format("some parameters appear in more than one parameter group: {} is in groups {} and {}",
                      describe(params_[i]), it->second, group));
  }
}

void check_at_least_zero(const char* optimizer, const char* what, double value) {
  if (!(0.0 <= value)) throw std::invalid_argument(fmt::format("{}: Invalid {}: {}", optimizer, what, value));
}

void check_beta(const char* optimizer, int index, double beta) {
  if (!(0.0 <= beta && beta < 1.0))
    throw std::invalid_argument(fmt::format("{}: Invalid beta parameter at index {}: {}", optimizer, index, beta));
}

void check_not_nan(const char* optimizer, const char* what, double value) {
  if (std::isnan(value)) throw std::invalid_argument(fmt::format("{}: Invalid {}: {}", optimizer, what, value));
}

void Optimizer::zero_grad(bool set_to_none) { zero_grads(params_, set_to_none); }

void add_flag_options(json::Value& group, bool foreach, bool has_capturable) {
  group.add("maximize", json::boolean(false));
  group.add("foreach", json::boolean(foreach));
  if (has_capturable) group.add("capturable", json::boolean(false));
  group.add("differentiable", json::boolean(false));
  group.add("fused", json::null());
}

json::Value json_number(double value) {
  json::Value v;
  v.kind = json::Value::Kind::number;
  // fmt's shortest round-trip form, as Python's repr (1e-08, 0.001, 3.0 -> "3"): read back bit for bit.
  // JSON has no inf or nan; options never hold them (the range checks refuse NaN).
  v.text = fmt::format("{}", value);
  return v;
}

namespace {

const json::Value& option(const json::Value& options, size_t group, const char* key) {
  const json::Value* v = options.find(key);
  if (!v) throw std::invalid_argument(fmt::format("param group {}: the option \"{}\" is missing", group, key));
  return *v;
}

}  // namespace

double option_number(const json::Value& options, size_t group, const char* key) {
  const json::Value& v = option(options, group, key);
  if (!v.is_number())
    throw std::invalid_argument(
        fmt::format("param group {}: the option \"{}\" must be a number, got {}", group, key, json::dump(v)));
  return v.number();
}

bool option_bool(const json::Value& options, size_t group, const char* key, bool absent) {
  const json::Value* v = options.find(key);
  if (!v || v->kind == json::Value::Kind::null) return absent;
  if (v->kind != json::Value::Kind::boolean)
    throw std::invalid_argument(
        fmt::format("param group {}: the option \"{}\" must be true or false, got {}", group, key, json::dump(*v)));
  return v->boolean;
}

std::optional<double> option_initial_lr(const json::Value& options, size_t group) {
  if (!options.has("initial_lr")) return std::nullopt;
  return option_number(options, group, "initial_lr");
}

void refuse_true_option(const json::Value& options, size_t group, const char* key) {
  if (option_bool(options, group, key, false))
    throw std::invalid_argument(
        fmt::format("param group {}: \"{}\": true is not supported by bytegrad's optimizers", group, key));
}

OptimizerStateDict Optimizer::state_dict() const {
  OptimizerStateDict out;
  int64_t index = 0;
  const std::vector<size_t> sizes = group_sizes();
  for (size_t g = 0; g < sizes.size(); ++g) {
    ParamGroupState group{group_options(g), {}};
    for (size_t k = 0; k < sizes[g]; ++k) group.params.push_back(index++);
    out.param_groups.push_back(std::move(group));
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (std::optional<ParamState> s = param_state(i)) out.state.emplace(static_cast<int64_t>(i), std::move(*s));
  return out;
}

namespace {

// PyTorch's _process_value_according_to_param_policy for a state tensor: value.to(dtype=param.dtype,
// device=param.device) for a floating parameter, value.to(device=param.device) otherwise. A host source
// in another dtype is converted on the host first, as PyTorch's blocking host-to-device copy converts it.
Tensor cast_like_param(const Tensor& value, const Tensor& param) {
  const ScalarType dtype = is_floating_point(param.dtype()) ? param.dtype() : value.dtype();
  if (value.device() == param.device()) return value.to(dtype);
  if (value.device().type == DeviceType::cpu && value.dtype() != dtype) return value.to(dtype).to(param.device());
  Tensor out = empty(value.sizes(), TensorOptions{dtype, param.device()});
  out.copy_(value);
  return out;
}

}  // namespace

std::string Optimizer::state_name(size_t param_index, std::string_view key) const {
  std::string owner = memory_role_owner(params_.at(param_index));
  if (owner.empty()) owner = fmt::format("param{}", param_index);
  return fmt::format("{}.{}", owner, key);
}

void Optimizer::load_state_dict(const OptimizerStateDict& state_dict) {
  const std::vector<size_t> sizes = group_sizes();
  if (state_dict.param_groups.size() != sizes.size())
    throw std::invalid_argument(
        fmt::format("loaded state dict has a different number of parameter groups ({}; the optimizer has {})",
                    state_dict.param_groups.size(), sizes.size()));
  std::unordered_map<int64_t, std::pair<size_t, size_t>> place;  // saved index -> (group, parameter position)
  std::vector<json::Value> options;
  size_t position = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    const ParamGroupState& group = state_dict.param_groups[g];
    if (group.params.size() != sizes[g])
      throw std::invalid_argument(
          fmt::format("loaded state dict contains a parameter group that doesn't match the size of optimizer's group "
                      "(group {}: {} parameters in the state dict, {} in the optimizer)",
                      g, group.params.size(), sizes[g]));
    if (group.options.kind != json::Value::Kind::object)
      throw std::invalid_argument(fmt::format("param group {}: the options must be a JSON object", g));
    for (int64_t saved : group.params)
      if (!place.emplace(saved, std::make_pair(g, position++)).second)
        throw std::invalid_argument(fmt::format("param group {}: parameter index {} is listed twice", g, saved));
    options.push_back(group.options);
  }
  check_group_options(options);

  std::vector<std::optional<ParamState>> new_state(params_.size());
  {
    NoGradGuard no_grad;
    AllocationScope scope("Optimizer.load_state_dict");
    CategoryScope category(MemoryCategory::optimizer_state);
    for (const auto& [saved, entry] : state_dict.state) {
      const auto it = place.find(saved);
      if (it == place.end())
        throw std::invalid_argument(fmt::format(
            "the state dict has state for parameter index {}, which none of its param groups lists", saved));
      const auto [g, i] = it->second;
      const Tensor& param = params_[i];
      const std::string where = fmt::format("param group {}, parameter index {}", g, saved);
      const StateKeys expected = state_keys(options[g]);
      if (expected.step && !entry.step)
        throw std::invalid_argument(fmt::format("{}: the state has no \"step\"", where));
      if (!expected.step && entry.step)
        throw std::invalid_argument(fmt::format("{}: unexpected key \"step\" in the state", where));
      if (entry.step && *entry.step < 0)
        throw std::invalid_argument(fmt::format("{}: \"step\" is negative ({})", where, *entry.step));
      const std::vector<std::string>& keys = expected.tensors;
      for (const auto& [key, value] : entry.tensors)
        if (std::find(keys.begin(), keys.end(), key) == keys.end())
          throw std::invalid_argument(fmt::format("{}: unexpected key \"{}\" in the state", where, key));
      ParamState cast{entry.step, {}};
      for (const std::string& key : keys) {
        const Tensor* value = entry.tensors.find(key);
        if (!value) throw std::invalid_argument(fmt::format("{}: the state has no \"{}\"", where, key));
        if (!value->defined()) throw std::invalid_argument(fmt::format("{}: \"{}\" is undefined", where, key));
        if (value->sizes() != param.sizes())
          throw std::invalid_argument(fmt::format("{}: \"{}\" has shape {}, the parameter's is {}", where, key,
                                                  shape_str(value->sizes()), shape_str(param.sizes())));
        if (is_floating_point(param.dtype()) && !is_floating_point(value->dtype()))
          throw std::invalid_argument(fmt::format("{}: \"{}\" is {}, not a floating dtype as the parameter's {}", where,
                                                  key, scalar_type_name(value->dtype()),
                                                  scalar_type_name(param.dtype())));
        if (value->is_meta() && !param.is_meta())
          throw std::invalid_argument(fmt::format("{}: \"{}\" is a meta tensor: it has no values to load onto {}",
                                                  where, key, describe(param)));
      }
      for (const std::string& key : keys) {
        TensorNameScope name(state_name(i, key));  // a copy made here is this parameter's state
        cast.tensors.insert_or_assign(key, cast_like_param(entry.tensors.at(key), param));
      }
      new_state[i] = std::move(cast);
    }
  }
  replace_state(options, std::move(new_state));
}

}  // namespace bytegrad::optim
