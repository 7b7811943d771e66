// optim::save / load: an optimizer's state_dict as a safetensors file (serialization.h).
#include "bytegrad/optim/serialization.h"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

namespace bytegrad::optim {

namespace {

constexpr const char* kGroupsKey = "param_groups";
constexpr const char* kStateKey = "state";

// "state.12.exp_avg" -> (12, "exp_avg"); nullopt when the name is not of that form.
std::optional<std::pair<int64_t, std::string>> parse_state_name(const std::string& name) {
  if (!name.starts_with("state.")) return std::nullopt;
  const size_t begin = 6, dot = name.find('.', begin);
  if (dot == std::string::npos || dot == begin || dot + 1 == name.size()) return std::nullopt;
  int64_t index = 0;
  const auto [end, ec] = std::from_chars(name.data() + begin, name.data() + dot, index);
  if (ec != std::errc() || end != name.data() + dot || index < 0) return std::nullopt;
  return std::make_pair(index, name.substr(dot + 1));
}

}  // namespace

FlatStateDict flatten(const OptimizerStateDict& state_dict) {
  FlatStateDict out;
  json::Value groups = json::array();
  for (const ParamGroupState& group : state_dict.param_groups) {
    json::Value g = group.options;
    json::Value params = json::array();
    for (int64_t index : group.params) params.push_back(json::integer(index));
    g.add("params", params);
    groups.push_back(std::move(g));
  }
  json::Value state = json::object();
  for (const auto& [index, entry] : state_dict.state) {
    json::Value e = json::object();
    if (entry.step) e.add("step", json::integer(*entry.step));
    state.add(std::to_string(index), std::move(e));
    for (const auto& [key, tensor] : entry.tensors)
      out.tensors.insert_or_assign(fmt::format("state.{}.{}", index, key), tensor);
  }
  out.metadata[kGroupsKey] = json::dump(groups);
  out.metadata[kStateKey] = json::dump(state);
  return out;
}

OptimizerStateDict unflatten(const TensorDict& tensors, const safetensors::Metadata& metadata,
                             const std::string& where) {
  auto fail = [&](const std::string& what) -> safetensors::Error {
    return safetensors::Error(fmt::format("{}: {}", where, what));
  };
  const auto groups_text = metadata.find(kGroupsKey);
  const auto state_text = metadata.find(kStateKey);
  if (groups_text == metadata.end() || state_text == metadata.end())
    throw fail(
        "not an optimizer's state: the metadata has no \"param_groups\" and \"state\" (was it written by "
        "optim::save?)");
  OptimizerStateDict out;
  json::Value groups, state;
  try {
    groups = json::parse(groups_text->second);
    state = json::parse(state_text->second);
  } catch (const json::Error& e) {
    throw fail(fmt::format("the optimizer's metadata is not valid JSON: {}", e.what()));
  }
  if (groups.kind != json::Value::Kind::array) throw fail("\"param_groups\" is not a JSON array");
  if (state.kind != json::Value::Kind::object) throw fail("\"state\" is not a JSON object");
  try {
    for (size_t g = 0; g < groups.size(); ++g) {
      const json::Value& group = groups[g];
      if (group.kind != json::Value::Kind::object) throw fail(fmt::format("param group {} is not a JSON object", g));
      ParamGroupState parsed{json::object(), {}};
      for (const auto& [key, value] : group.members) {
        if (key != "params") {
          parsed.options.add(key, value);
          continue;
        }
        if (value.kind != json::Value::Kind::array)
          throw fail(fmt::format("param group {}: \"params\" is not a list", g));
        for (const json::Value& index : value.items) parsed.params.push_back(index.integer());
      }
      if (!group.has("params")) throw fail(fmt::format("param group {} has no \"params\"", g));
      out.param_groups.push_back(std::move(parsed));
    }
    for (const auto& [key, value] : state.members) {
      const auto parsed = parse_state_name("state." + key + ".x");
      if (!parsed) throw fail(fmt::format("\"state\" has the key \"{}\", not a parameter index", key));
      if (value.kind != json::Value::Kind::object)
        throw fail(fmt::format("the state of parameter {} is not a JSON object", key));
      ParamState entry;
      for (const auto& [name, v] : value.members) {
        if (name != "step")
          throw fail(fmt::format("the state of parameter {} has the unknown entry \"{}\"", key, name));
        entry.step = v.integer();
      }
      out.state.emplace(parsed->first, std::move(entry));
    }
  } catch (const json::Error& e) {
    throw fail(fmt::format("the optimizer's metadata has a value of the wrong kind: {}", e.what()));
  }
  for (const auto& [name, tensor] : tensors) {
    const auto parsed = parse_state_name(name);
    if (!parsed) throw fail(fmt::format("the tensor \"{}\" is not named state.<index>.<key>", name));
    const auto it = out.state.find(parsed->first);
    if (it == out.state.end())
      throw fail(
          fmt::format("the tensor \"{}\" belongs to parameter {}, which \"state\" does not list", name, parsed->first));
    it->second.tensors.insert_or_assign(parsed->second, tensor);
  }
  return out;
}

void save(const Optimizer& optimizer, const std::string& path, safetensors::Metadata metadata) {
  for (const char* key : {kGroupsKey, kStateKey})
    if (metadata.count(key))
      throw std::invalid_argument(
          fmt::format("optim::save: the metadata key \"{}\" is the optimizer's own; name yours otherwise", key));
  FlatStateDict flat = flatten(optimizer.state_dict());
  metadata.merge(flat.metadata);
  safetensors::save_file(flat.tensors, path, metadata);
}

safetensors::Metadata load(Optimizer& optimizer, const std::string& path) {
  safetensors::Metadata metadata = safetensors::load_metadata(path);
  // Checked before any tensor is read, so a file that is not an optimizer's allocates nothing.
  unflatten({}, metadata, path);
  Device device = optimizer.params().front().device();
  for (const Tensor& p : optimizer.params())
    if (p.device() != device) device = kCpu;
  if (device.type == DeviceType::meta) device = kCpu;  // a meta tensor has no values to load; cast from the host
  OptimizerStateDict state_dict;
  {
    const TensorDict tensors = safetensors::load_file(path, device);
    state_dict = unflatten(tensors, metadata, path);
  }
  optimizer.load_state_dict(state_dict);
  metadata.erase(kGroupsKey);
  metadata.erase(kStateKey);
  return metadata;
}

}  // namespace bytegrad::optim
