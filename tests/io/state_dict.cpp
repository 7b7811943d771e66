// Module::state_dict / load_state_dict and nn::save_model / load_model: PyTorch's names and order, its
// errors, nothing modified on an error, and device memory (state_dict allocates nothing; loading makes no
// block on the module's device).
#include <cstdlib>
#include <memory>
#include <fstream>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/nn/serialization.h"
#include "bytegrad/testing/memory_probe.h"
#include "io_helpers.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// A module with a buffer before a child, to pin PyTorch's order: own parameters, own buffers, children.
class Net : public nn::Module {
 public:
  explicit Net(TensorOptions options = {}) {
    fc = register_module("fc", std::make_shared<nn::Linear>(3, 2, true, options));
    scale = register_parameter("scale", ones({2}, options));
    running = register_buffer("running", zeros({2}, options));
    head = register_module("head", std::make_shared<nn::Linear>(2, 1, false, options));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*fc)(x)*scale); }
  std::shared_ptr<nn::Linear> fc, head;
  Tensor scale, running;
};

std::string load_error(nn::Module& m, const TensorDict& d, bool strict = true) {
  try {
    m.load_state_dict(d, strict);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::vector<double>> values_of(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(t.tolist());
  return out;
}

}  // namespace

TEST_CASE("state_dict: PyTorch's keys and order, detached handles sharing the module's storage") {
  manual_seed(0);
  Net net;
  const TensorDict state = net.state_dict();
  // PyTorch: the module's own parameters (scale), its own buffers (running), then each child.
  CHECK(state.keys() == std::vector<std::string>{"scale", "running", "fc.weight", "fc.bias", "head.weight"});
  CHECK(state.at("fc.weight").shares_storage_with(net.fc->weight()));
  CHECK(state.at("fc.weight").data_ptr() == net.fc->weight().data_ptr());
  CHECK_FALSE(state.at("fc.weight").requires_grad());  // detached, as keep_vars=False
  CHECK(net.fc->weight().requires_grad());
}

TEST_CASE("state_dict allocates nothing on the device") {
  fresh_sim();
  manual_seed(0);
  nn::GPT gpt(nn::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 16, .block_size = 8}, device(kSim));
  MemoryProbe probe(kSim);
  const TensorDict state = gpt.state_dict();
  CHECK(probe.allocated_delta_is(0));
  CHECK(probe.events().empty());
}

TEST_CASE("GPT's state_dict keys are nanoGPT's in PyTorch") {
  // PyTorch 2.11's list for nanoGPT's tiny model (shared/golden/gpt2/gpt2_scenarios.py, the slow-attention
  // model), written by tools/probes/safetensors_interop.py on the GPU machine: each module's own parameters,
  // then its own buffers (attn.bias, the causal mask), then its children; the tied lm_head.weight under both
  // names.
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/safetensors/pytorch_gpt_tiny_state_dict_keys.txt");
  REQUIRE(in.good());
  std::vector<std::string> expected;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) expected.push_back(line);
  REQUIRE(expected.size() == 31);  // 2 embeddings + 2 blocks of 13 + ln_f's 2 + lm_head
  manual_seed(0);
  nn::GPT gpt(nn::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 16, .block_size = 8});
  const TensorDict state = gpt.state_dict();
  CHECK(state.keys() == expected);
  CHECK(state.at("lm_head.weight").shares_storage_with(state.at("transformer.wte.weight")));
}

TEST_CASE("load_state_dict copies in place under no_grad, converting the dtype as copy_ does") {
  manual_seed(0);
  Net source, target;
  const Tensor weight_before = target.fc->weight();
  const nn::IncompatibleKeys result = target.load_state_dict(source.state_dict());
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  CHECK(values_of(target) == values_of(source));
  CHECK(target.fc->weight().impl_ptr() == weight_before.impl_ptr());  // the same tensor, written in place
  CHECK(target.fc->weight().requires_grad());
  CHECK(target.fc->weight().grad_fn_name().empty());  // still a leaf: the copy was not recorded

  // float64 values into float32 parameters.
  TensorDict doubles;
  for (const auto& [name, t] : source.state_dict()) doubles.insert_or_assign(name, t.to(ScalarType::float64).mul(2.0));
  target.load_state_dict(doubles);
  CHECK(target.fc->weight().dtype() == ScalarType::float32);
  CHECK(target.fc->weight().tolist() == source.fc->weight().mul(2.0).tolist());
}

TEST_CASE("load_state_dict's errors: all missing and unexpected keys, size mismatches, nothing modified") {
  manual_seed(0);
  Net net;
  const auto before = values_of(net);
  TensorDict d = Net().state_dict();  // other values
  d.erase("fc.bias");
  d.erase("running");
  d.insert_or_assign("fc.extra", ones({1}));
  d.insert_or_assign("nothing.weight", ones({1}));
  d.insert_or_assign("head.weight", ones({3, 2}));  // the model's is (1, 2)
  const std::string message = load_error(net, d);
  CHECK(message ==
        "Error(s) in loading state_dict for Net:\n"
        "\tMissing key(s) in state_dict: \"running\", \"fc.bias\".\n"
        "\tUnexpected key(s) in state_dict: \"nothing.weight\", \"fc.extra\".\n"
        "\tsize mismatch for head.weight: copying a param with shape [3, 2] from checkpoint, the shape in current "
        "model is [1, 2].");
  CHECK(values_of(net) == before);  // scale and fc.weight matched, but nothing was written

  // Without strict, a size mismatch is still an error and still nothing is written.
  const std::string lenient = load_error(net, d, false);
  CHECK(lenient ==
        "Error(s) in loading state_dict for Net:\n"
        "\tsize mismatch for head.weight: copying a param with shape [3, 2] from checkpoint, the shape in current "
        "model is [1, 2].");
  CHECK(values_of(net) == before);

  // Without the mismatch, strict=false loads what matches and returns the rest.
  d.insert_or_assign("head.weight", full({1, 2}, 7.0));
  const nn::IncompatibleKeys keys = net.load_state_dict(d, false);
  CHECK(keys.missing_keys == std::vector<std::string>{"running", "fc.bias"});
  CHECK(keys.unexpected_keys == std::vector<std::string>{"nothing.weight", "fc.extra"});
  CHECK(net.head->weight().tolist() == std::vector<double>{7, 7});
  CHECK(net.fc->weight().tolist() == d.at("fc.weight").tolist());
}

TEST_CASE("load_state_dict memory: nothing new on the module's device, from the device or from the host") {
  fresh_sim();
  manual_seed(0);
  Net net(device(kSim));
  const TensorDict on_device = Net(device(kSim)).state_dict();
  TensorDict on_host, on_host_f64;
  for (const auto& [name, t] : on_device) {
    on_host.insert_or_assign(name, t.cpu());
    on_host_f64.insert_or_assign(name, t.cpu().to(ScalarType::float64));
  }
  for (const TensorDict* source : std::vector<const TensorDict*>{&on_device, &on_host, &on_host_f64}) {
    MemoryProbe probe(kSim);
    net.load_state_dict(*source);
    CHECK(probe.events().empty());  // no block made, not even a temporary
  }
  CHECK(net.fc->weight().tolist() == on_device.at("fc.weight").tolist());
}

TEST_CASE("save_model / load_model: a GPT round trip through a file, tied weights stored once") {
  ScratchDir dir;
  const std::string path = dir.path("gpt.safetensors");
  const nn::GPTConfig config{.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 16, .block_size = 8};
  manual_seed(1);
  nn::GPT saved(config, device(kSim));
  nn::save_model(saved, path);
  // safetensors.torch.save_model keeps the first sorted name of the tied pair and notes the other.
  CHECK(safetensors::load_metadata(path) == safetensors::Metadata{{"transformer.wte.weight", "lm_head.weight"}});
  const TensorDict file = safetensors::load_file(path);
  CHECK(file.size() == saved.state_dict().size() - 1);
  CHECK_FALSE(file.contains("transformer.wte.weight"));

  manual_seed(2);
  nn::GPT loaded(config, device(kSim));
  MemoryProbe probe(kSim);
  const nn::IncompatibleKeys keys = nn::load_model(loaded, path);
  CHECK(probe.events().empty());
  CHECK(keys.missing_keys.empty());
  CHECK(keys.unexpected_keys.empty());
  CHECK(values_of(loaded) == values_of(saved));
  Tensor idx = from_vector({3, 1, 4, 1, 5, 9, 2, 6}, {1, 8}, TensorOptions{ScalarType::int64, kSim});
  CHECK(loaded(idx).tolist() == saved(idx).tolist());

  // A model with another shape: load_model refuses before writing.
  nn::GPT other(nn::GPTConfig{.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 16, .block_size = 8});
  const auto before = values_of(other);
  try {
    nn::load_model(other, path);
    FAIL("expected an error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("Unexpected key(s) in state_dict: \"transformer.h.1.attn.bias\"") !=
          std::string::npos);
  }
  CHECK(values_of(other) == before);
}

// For tools/probes/safetensors_interop.py (see the interop test in safetensors_files.cpp): nanoGPT's TINY
// model (gpt2_scenarios.py: 2 layers, 2 heads, 64 wide, vocabulary 512, block 64) saved by nn::save_model,
// each parameter set to a pattern the probe regenerates: element i of the k-th parameter in
// named_parameters() order (the tied weight once) is ((7 i + 13 k) mod 64 - 32) / 64, exact in float32.
TEST_CASE("interop files for PyTorch: nanoGPT's tiny model (written when BYTEGRAD_SAFETENSORS_INTEROP_DIR is set)") {
  const char* out_dir = std::getenv("BYTEGRAD_SAFETENSORS_INTEROP_DIR");
  if (out_dir == nullptr) return;
  nn::GPT gpt(nn::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 64, .vocab_size = 512, .block_size = 64});
  int64_t k = 0;
  for (const auto& [name, p] : gpt.named_parameters()) {
    std::vector<double> values(static_cast<size_t>(p.numel()));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<double>((7 * static_cast<int64_t>(i) + 13 * k) % 64 - 32) / 64.0;
    NoGradGuard no_grad;
    fill_from_host(p, values);
    ++k;
  }
  nn::save_model(gpt, std::string(out_dir) + "/bytegrad_gpt_tiny.safetensors");
  MESSAGE("wrote " << out_dir << "/bytegrad_gpt_tiny.safetensors");
}
