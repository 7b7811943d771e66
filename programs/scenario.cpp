#include "programs/scenario.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/device_allocators.h"

namespace bytegrad::programs {

const std::vector<StepField>& golden_step_fields() {
  static const std::vector<StepField> fields = {
      {"allocated", &GoldenStep::allocated},         {"reserved", &GoldenStep::reserved},
      {"max_allocated", &GoldenStep::max_allocated}, {"max_reserved", &GoldenStep::max_reserved},
      {"segments", &GoldenStep::segments},           {"blocks", &GoldenStep::blocks},
      {"requested", &GoldenStep::requested},         {"inactive_split", &GoldenStep::inactive_split},
  };
  return fields;
}

std::vector<std::string> step_differences(const GoldenStep& got, const GoldenStep& want) {
  std::vector<std::string> out;
  for (const StepField& f : golden_step_fields())
    if (got.*f.member != want.*f.member)
      out.push_back(std::string(f.name) + ": got " + std::to_string(got.*f.member) + ", want " +
                    std::to_string(want.*f.member));
  return out;
}

// ------------------------------------------------------------------------------------ golden reader

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("golden scenario " + path + ": " + what);
}

// A step object: its label, the eight figures as integers, and an optional message; other fields (notes,
// "param_bytes", "loops") are skipped.
GoldenStep read_step(const json::Value& object, const std::string& path) {
  GoldenStep s;
  const json::Value* label = object.find("label");
  if (!label || label->kind != json::Value::Kind::string) fail(path, "a step without a \"label\"");
  s.label = label->text;
  if (const json::Value* message = object.find("message"); message && message->kind == json::Value::Kind::string)
    s.message = message->text;
  for (const StepField& f : golden_step_fields()) {
    const json::Value* value = object.find(f.name);
    if (!value || !value->is_integer()) fail(path, "step \"" + s.label + "\" has no integer \"" + f.name + "\"");
    s.*f.member = value->integer();
  }
  return s;
}

}  // namespace

json::Value read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(what + " " + path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::Error& e) {
    throw std::runtime_error(what + " " + path + ": " + e.what());
  }
}

std::vector<GoldenStep> read_golden_scenario(const std::string& path) {
  return golden_steps(read_json_file(path, "golden scenario"), path);
}

std::vector<GoldenStep> golden_steps(const json::Value& document, const std::string& where) {
  const json::Value* steps = document.find("steps");
  if (!steps || steps->kind != json::Value::Kind::array) fail(where, "no \"steps\" array");
  std::vector<GoldenStep> out;
  for (const json::Value& step : steps->items) out.push_back(read_step(step, where));
  return out;
}

namespace {

// Where golden/ is: the copy `cmake --install` put beside the program (<prefix>/share/bytegrad for
// <prefix>/bin/bytegrad-walkthrough), else the checkout's shared/ it was built from.
std::string shared_dir() {
  std::error_code error;
  const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path installed = program.parent_path().parent_path() / "share" / "bytegrad";
    if (std::filesystem::is_directory(installed / "golden", error)) return installed.string();
  }
  return BYTEGRAD_SHARED_DIR;
}

}  // namespace

std::string golden_scenario_path(const std::string& name, bool default_workspace, bool expandable_segments) {
  if (default_workspace && expandable_segments)
    throw std::invalid_argument("no golden set has both PyTorch's default workspaces and expandable segments");
  const char* folder = expandable_segments ? "scenarios-expandable/"
                       : default_workspace ? "scenarios-default-workspace/"
                                           : "scenarios/";
  // The golden sets: the seed programs' (golden/) and nanoGPT's GPT-2 (golden/gpt2/), each with the same
  // three folders; a name is found in the first set that has it.
  const std::string shared = shared_dir();
  const std::string seed_path = shared + "/golden/" + folder + name + ".json";
  const std::string gpt2_path = shared + "/golden/gpt2/" + folder + name + ".json";
  return !std::filesystem::exists(seed_path) && std::filesystem::exists(gpt2_path) ? gpt2_path : seed_path;
}

// ------------------------------------------------------------------------------------------ recorder

ScenarioRecorder::ScenarioRecorder(std::string name, Device device) : name_(std::move(name)), device_(device) {}

void ScenarioRecorder::mark(const std::string& label, const std::string& message, const std::string& explanation) {
  // The keys scenarios.py reads through torch.cuda.memory_allocated() etc. and memory_stats().
  GoldenStep s;
  static_cast<MemoryFigures&>(s) = memory_figures(caching_allocator(device_));
  s.label = label;
  s.message = message;
  s.explanation = explanation;
  s.ledger = caching_allocator(device_).category_bytes();
  steps_.push_back(s);
  if (listener_) listener_(steps_.back());
}

std::string ScenarioRecorder::to_json() const {
  json::Value steps = json::array();
  for (const GoldenStep& s : steps_) {
    json::Value step = json::object();
    step.add("label", json::string(s.label));
    for (const StepField& f : golden_step_fields()) step.add(f.name, json::integer(s.*f.member));
    if (!s.message.empty()) step.add("message", json::string(s.message));
    steps.push_back(std::move(step));
  }
  json::Value document = json::object();
  document.add("name", json::string(name_)).add("device", json::string(device_.str())).add("steps", std::move(steps));
  return json::dump(document, 1) + "\n";
}

}  // namespace bytegrad::programs
