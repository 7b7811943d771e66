#include "tests/programs/gpt2_probes.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "programs/checks.h"
#include "programs/scenario.h"

using namespace bytegrad::programs;

namespace bytegrad::testing {

const nn::GPTConfig& gpt2_mid_config() {
  static const nn::GPTConfig mid{.n_layer = 4, .n_head = 4, .n_embd = 256, .vocab_size = 8000, .block_size = 512};
  return mid;
}

namespace {

nn::GPTConfig with(nn::GPTConfig config, nn::AttentionKind attention, bool checkpoint = false) {
  config.attention = attention;
  config.checkpoint_blocks = checkpoint;
  return config;
}

constexpr auto kSlow = nn::AttentionKind::slow;
constexpr auto kSdpa = nn::AttentionKind::sdpa;
constexpr auto kBf16 = ScalarType::bfloat16;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("GPT-2 probe " + path + ": " + what);
}

// The "steps" of a probe file or of one of its trials; a run that failed before its first mark may have none.
std::vector<GoldenStep> read_steps(const json::Value& document, const std::string& path) {
  const json::Value* steps = document.find("steps");
  if (!steps || (steps->kind == json::Value::Kind::array && steps->items.empty())) return {};
  return golden_steps(document, path);
}

int64_t integer_of(const json::Value& config, const char* key, const std::string& path) {
  const json::Value* v = config.find(key);
  if (!v || !v->is_integer()) fail(path, std::string("config has no integer \"") + key + "\"");
  return v->integer();
}

bool boolean_of(const json::Value& config, const char* key, bool otherwise) {
  const json::Value* v = config.find(key);
  return v && v->kind == json::Value::Kind::boolean ? v->boolean : otherwise;
}

std::string string_of(const json::Value& config, const char* key, const std::string& otherwise) {
  const json::Value* v = config.find(key);
  return v && v->kind == json::Value::Kind::string ? v->text : otherwise;
}

// gpt2_sweep.py's "config": bytegrad-estimate's options ("steps": 2 when absent).
GPTTraining training_from_config(const json::Value& c, const std::string& path) {
  GPTTraining t;
  t.config.n_layer = integer_of(c, "n_layer", path);
  t.config.n_head = integer_of(c, "n_head", path);
  t.config.n_embd = integer_of(c, "n_embd", path);
  t.config.vocab_size = integer_of(c, "vocab", path);
  t.config.block_size = integer_of(c, "block", path);
  t.batch = integer_of(c, "batch", path);
  t.seq = integer_of(c, "seq", path);
  const std::string optimizer = string_of(c, "optimizer", "adamw");
  if (optimizer == "adamw") t.optimizer = GPTOptimizer::adamw;
  else if (optimizer == "adam") t.optimizer = GPTOptimizer::adam;
  else if (optimizer == "sgd") t.optimizer = GPTOptimizer::sgd;
  else fail(path, "unknown optimizer '" + optimizer + "'");
  t.foreach = boolean_of(c, "foreach", true);
  const std::string amp = string_of(c, "amp", "");
  if (amp == "bf16") t.amp = ScalarType::bfloat16;
  else if (amp == "fp16") t.amp = ScalarType::float16;
  else if (!amp.empty()) fail(path, "unknown amp '" + amp + "'");
  const std::string attention = string_of(c, "attention", "slow");
  if (attention == "sdpa") t.config.attention = kSdpa;
  else if (attention != "slow") fail(path, "unknown attention '" + attention + "'");
  t.config.checkpoint_blocks = boolean_of(c, "checkpoint", false);
  if (const json::Value* steps = c.find("steps"); steps && steps->is_integer()) {
    if (steps->integer() < 1 || steps->integer() > 1000) fail(path, "config \"steps\" is not between 1 and 1000");
    t.steps = static_cast<int>(steps->integer());
  }
  return t;
}

}  // namespace

std::optional<GPTTraining> held_out_training(const std::string& name) {
  const nn::GPTConfig tiny = gpt2_tiny_config(), small = gpt2_small_config(), mid = gpt2_mid_config();
  static const std::map<std::string, GPTTraining> cases = {
      // gpt2_heldout.py
      {"tiny_single", {.config = tiny, .batch = 4, .seq = 64, .foreach = false}},
      {"small_single", {.config = small, .batch = 4, .seq = 256, .foreach = false}},
      {"small_4x1024", {.config = small, .batch = 4, .seq = 1024}},
      {"mid_8x512", {.config = mid, .batch = 8, .seq = 512}},
      {"mid_single_8x512", {.config = mid, .batch = 8, .seq = 512, .foreach = false}},
      // gpt2_heldout_amp.py
      {"tiny_bf16_single", {.config = tiny, .batch = 4, .seq = 64, .foreach = false, .amp = kBf16}},
      {"mid_bf16_8x512", {.config = mid, .batch = 8, .seq = 512, .amp = kBf16}},
      {"mid_bf16_sdpa_8x512", {.config = with(mid, kSdpa), .batch = 8, .seq = 512, .amp = kBf16}},
      {"tiny_fp32_sdpa", {.config = with(tiny, kSdpa), .batch = 4, .seq = 64}},
      {"mid_fp32_sdpa_8x512", {.config = with(mid, kSdpa), .batch = 8, .seq = 512}},
      {"tiny_bf16_sdpa", {.config = with(tiny, kSdpa), .batch = 4, .seq = 64, .amp = kBf16}},
      {"tiny_fp32_checkpoint", {.config = with(tiny, kSlow, true), .batch = 4, .seq = 64}},
      {"tiny_bf16_checkpoint", {.config = with(tiny, kSlow, true), .batch = 4, .seq = 64, .amp = kBf16}},
      {"small_fp32_checkpoint", {.config = with(small, kSlow, true), .batch = 4, .seq = 256}},
      {"small_bf16_checkpoint", {.config = with(small, kSlow, true), .batch = 4, .seq = 256, .amp = kBf16}},
  };
  const auto it = cases.find(name);
  if (it == cases.end()) return std::nullopt;
  return it->second;
}

std::string gpt_probe_path(const std::string& dir, const std::string& name, bool default_workspace) {
  return std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/gpt2/" + dir + "/" +
         (default_workspace ? "xd/" : "x0/") + name + ".json";
}

GPTProbe read_gpt_probe(const std::string& path) {
  const json::Value document = read_json_file(path, "GPT-2 probe");
  GPTProbe p;
  const std::filesystem::path file(path);
  p.name = file.stem().string();
  const std::string folder = file.parent_path().filename().string();
  if (folder != "x0" && folder != "xd") fail(path, "not in an x0/ or xd/ folder");
  p.default_workspace = folder == "xd";
  if (const json::Value* config = document.find("config"); config && config->kind == json::Value::Kind::object) {
    p.training = training_from_config(*config, path);
    if (const json::Value* limit = config->find("limit"); limit && limit->is_integer()) p.limit = limit->integer();
  } else if (std::optional<GPTTraining> t = held_out_training(p.name)) {
    p.training = *t;
  } else {
    fail(path, "no \"config\" and not a known held-out case");
  }
  if (const json::Value* error = document.find("error"); error && error->kind == json::Value::Kind::string)
    p.error = error->text;
  p.steps = read_steps(document, path);
  if (const json::Value* trials = document.find("trials"); trials && trials->kind == json::Value::Kind::array) {
    p.max_batch_case = true;
    if (const json::Value* m = document.find("max_batch"); m && m->is_integer()) p.max_batch = m->integer();
    for (const json::Value& t : trials->items) {
      GPTProbe::Trial trial;
      trial.batch = integer_of(t, "batch", path);
      if (const json::Value* fits = t.find("fits"); fits && fits->kind == json::Value::Kind::boolean)
        trial.fits = fits->boolean;
      trial.steps = read_steps(t, path);
      p.trials.push_back(std::move(trial));
    }
  }
  return p;
}

Device sweep_device() {
  const char* name = std::getenv("BYTEGRAD_GPT2_SWEEP_DEVICE");
  if (!name || !*name) return kMeta;
  const Device device = Device::parse(name);
  if (device.type == DeviceType::cpu) throw std::invalid_argument("BYTEGRAD_GPT2_SWEEP_DEVICE: cpu has no allocator");
  return device;
}

GPTMarks run_gpt_marks(const GPTTraining& training, bool default_workspace, int64_t limit) {
  if (const Device on = sweep_device(); on.type != DeviceType::meta && limit == 0) {
    // As the walkthrough runs a golden program: PyTorch's conditions on a freshly reset device.
    GoldenConditions conditions(on, default_workspace ? Workspaces::pytorch_default : Workspaces::none);
    ScenarioRecorder r("gpt2", on);
    train_gpt(training, &r, on);
    return {r.steps(), false};
  }
  ScenarioRecorder r("gpt2", kMeta);
  const TrainingPeak peak = estimate_gpt_training(training, default_workspace, limit, &r);
  return {r.steps(), peak.out_of_memory};
}

std::optional<std::string> first_mark_difference(const std::vector<GoldenStep>& got,
                                                 const std::vector<GoldenStep>& want,
                                                 const std::vector<std::string>& skip_fields) {
  const size_t n = std::min(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) {
    if (got[i].label != want[i].label)
      return "mark " + std::to_string(i) + ": bytegrad " + got[i].label + ", PyTorch " + want[i].label;
    for (const StepField& f : golden_step_fields()) {
      if (std::find(skip_fields.begin(), skip_fields.end(), f.name) != skip_fields.end()) continue;
      const int64_t g = got[i].*f.member, w = want[i].*f.member;
      if (g != w)
        return want[i].label + " " + f.name + ": bytegrad " + std::to_string(g) + ", PyTorch " + std::to_string(w) +
               " (" + (g > w ? "+" : "") + std::to_string(g - w) + ")";
    }
  }
  if (got.size() != want.size())
    return "marks: bytegrad " + std::to_string(got.size()) + " (last " + (got.empty() ? "none" : got.back().label) +
           "), PyTorch " + std::to_string(want.size()) + " (last " + (want.empty() ? "none" : want.back().label) + ")";
  return std::nullopt;
}

}  // namespace bytegrad::testing
