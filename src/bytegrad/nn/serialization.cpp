#include "bytegrad/nn/serialization.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace bytegrad::nn {

namespace {

// safetensors.torch's _remove_duplicate_names: the names of a state_dict that share memory, grouped by
// storage and then into runs of overlapping bytes; in each run of two or more names, the one kept is the
// first in sorted order among those covering the whole storage (among `preferred` ones first, when any
// is), and the others map to it. Returns kept name -> dropped names.
std::map<std::string, std::vector<std::string>> shared_names_to_drop(const TensorDict& state,
                                                                     const std::set<std::string>& preferred = {}) {
  struct Area {
    uint64_t begin, end;
    std::string name;
  };
  std::unordered_map<const StorageImpl*, std::vector<Area>> by_storage;
  for (const auto& [name, t] : state) {
    if (t.is_meta() || !t.storage() || t.storage()->nbytes() == 0) continue;
    const uint64_t width = t.element_size();
    const auto begin = static_cast<uint64_t>(t.storage_offset()) * width;
    uint64_t end = begin;
    if (t.numel() != 0) {
      int64_t last = 0;
      for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * std::max<int64_t>(t.stride(d), 0);
      end = begin + (static_cast<uint64_t>(last) + 1) * width;
    }
    by_storage[t.storage().get()].push_back({begin, end, name});
  }
  std::map<std::string, std::vector<std::string>> to_drop;
  for (auto& [storage, areas] : by_storage) {
    if (areas.size() < 2) continue;
    std::sort(areas.begin(), areas.end(), [](const Area& a, const Area& b) {
      return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    std::vector<std::vector<const Area*>> runs{{&areas[0]}};
    for (size_t i = 1; i < areas.size(); ++i) {
      if (areas[i].begin >= areas[i - 1].end) runs.emplace_back();
      runs.back().push_back(&areas[i]);
    }
    for (const auto& run : runs) {
      if (run.size() < 2) continue;
      std::set<std::string> complete, names;
      for (const Area* a : run) {
        names.insert(a->name);
        if (a->begin == 0 && state.at(a->name).nbytes() == storage->nbytes()) complete.insert(a->name);
      }
      if (complete.empty())
        throw std::invalid_argument(fmt::format(
            "save_model: {} share memory and none of them covers the whole storage, so no one of them can stand for "
            "the others in the file; save clones instead",
            fmt::join(names, ", ")));
      std::string keep = *complete.begin();
      for (const auto& name : complete)
        if (preferred.count(name)) {
          keep = name;
          break;
        }
      for (const auto& name : names)
        if (name != keep) to_drop[keep].push_back(name);
    }
  }
  return to_drop;
}

}  // namespace

void save_model(const Module& module, const std::string& path, safetensors::Metadata metadata) {
  TensorDict state = module.state_dict();
  for (const auto& [kept, dropped] : shared_names_to_drop(state)) {
    for (const auto& name : dropped) {
      metadata.emplace(name, kept);  // a key the caller set is left as it is
      state.erase(name);
    }
  }
  safetensors::save_file(state, path, metadata);
}

IncompatibleKeys load_model(Module& module, const std::string& path, bool strict) {
  const TensorDict loaded = safetensors::load_file(path, kCpu);
  const TensorDict current = module.state_dict();
  const std::vector<std::string> loaded_keys = loaded.keys();
  const auto to_drop = shared_names_to_drop(current, std::set<std::string>(loaded_keys.begin(), loaded_keys.end()));

  // The keys load_state_dict(strict = false) would report, worked out before it writes anything.
  std::set<std::string> missing;
  std::vector<std::string> unexpected;
  for (const auto& [key, t] : current)
    if (!loaded.contains(key)) missing.insert(key);
  for (const auto& key : loaded_keys)
    if (!current.contains(key)) unexpected.push_back(key);
  for (const auto& [kept, dropped] : to_drop)
    for (const auto& name : dropped)
      if (missing.erase(name) == 0) unexpected.push_back(name);  // the file has it under its own name too
  std::sort(unexpected.begin(), unexpected.end());
  if (strict && (!missing.empty() || !unexpected.empty())) {
    auto quoted = [](const auto& keys) {
      std::vector<std::string> out;
      out.reserve(keys.size());
      for (const auto& k : keys) out.push_back('"' + k + '"');
      return fmt::format("{}", fmt::join(out, ", "));
    };
    std::string message = fmt::format("Error(s) in loading '{}' into the module:", path);
    if (!missing.empty()) message += fmt::format("\n\tMissing key(s) in state_dict: {}.", quoted(missing));
    if (!unexpected.empty()) message += fmt::format("\n\tUnexpected key(s) in state_dict: {}.", quoted(unexpected));
    throw std::runtime_error(message);
  }
  module.load_state_dict(loaded, /*strict=*/false);
  return {std::vector<std::string>(missing.begin(), missing.end()), std::move(unexpected)};
}

}  // namespace bytegrad::nn
