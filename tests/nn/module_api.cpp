// The Module API a PyTorch user reaches for: public register_parameter / register_buffer /
// register_module, ModuleList and ModuleDict (names and parameter order as PyTorch's named_parameters),
// Linear(in, out, device), and Module::to in PyTorch's Module._apply order with each .grad moved.
// Memory figures are arithmetic: numel * 4 bytes rounded up to a multiple of 512.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/module_dict.h"
#include "bytegrad/nn/module_list.h"
#include "bytegrad/tensor/ops.h"
#include "nn_helpers.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// A module with nothing of its own: what an outside program builds by registering from outside.
class Bare : public nn::Module {
 public:
  Tensor forward(const Tensor& input) override { return input; }
};

std::vector<std::string> parameter_names(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
  return names;
}

// A child (Linear) registered before the module's own parameter and buffer, as in
//   class Model(nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.lin = nn.Linear(32, 32)
//           self.scale = nn.Parameter(torch.ones(300))
//           self.register_buffer("running", torch.zeros(600))
class Model : public nn::Module {
 public:
  explicit Model(Device on) {
    lin = register_module("lin", std::make_shared<nn::Linear>(32, 32, on));
    scale = register_parameter("scale", ones({300}, device(on)));
    running = register_buffer("running", zeros({600}, device(on)));
  }
  Tensor forward(const Tensor& input) override { return (*lin)(input)*2.0; }
  std::shared_ptr<nn::Linear> lin;
  Tensor scale, running;
};

}  // namespace

TEST_CASE("register_parameter / register_buffer / register_module are public, in registration order") {
  fresh_sim();
  Bare m;
  m.register_parameter("w", zeros({2, 3}, device(kSim)));
  m.register_buffer("mask", ones({3}, device(kSim)));
  auto child = m.register_module("child", std::make_shared<nn::Linear>(3, 2, kSim));
  m.register_parameter("b", zeros({2}, device(kSim)));
  // Own parameters first (w, b), then the child's, as PyTorch's named_parameters (recurse) lists them.
  CHECK(parameter_names(m) == std::vector<std::string>{"w", "b", "child.weight", "child.bias"});
  CHECK(m.named_buffers().size() == 1);
  CHECK(m.named_buffers()[0].first == "mask");
  CHECK(m.buffers().size() == 1);
  CHECK(m.parameters()[0].requires_grad());  // registered as a parameter: requires grad (nn.Parameter)
  CHECK_FALSE(m.buffers()[0].requires_grad());
  CHECK(m.children().size() == 1);
  CHECK(m.named_children()[0].first == "child");
  CHECK(child->name() == "child");
  CHECK(m.name() == "");

  // Registering a name again replaces it in place (self._parameters[name] = ...): position kept.
  const Tensor replacement = ones({2, 3}, device(kSim));
  m.register_parameter("w", replacement);
  CHECK(parameter_names(m) == std::vector<std::string>{"w", "b", "child.weight", "child.bias"});
  CHECK(m.parameters()[0].shares_storage_with(replacement));

  // PyTorch's KeyErrors: empty names, dotted names, a name another kind already uses.
  CHECK(contains(error_of([&] { m.register_parameter("", zeros({1}, device(kSim))); }), "can't be empty"));
  CHECK(contains(error_of([&] { m.register_buffer("a.b", zeros({1}, device(kSim))); }), "can't contain \".\""));
  CHECK(contains(error_of([&] { m.register_buffer("w", zeros({1}, device(kSim))); }), "attribute 'w' already exists"));
  CHECK(contains(error_of([&] { m.register_module("mask", std::make_shared<Bare>()); }),
                 "attribute 'mask' already exists"));
  CHECK(contains(error_of([&] { m.register_parameter("child", zeros({1}, device(kSim))); }),
                 "attribute 'child' already exists"));
}

TEST_CASE("ModuleList: children named 0, 1, ...; append, extend, indexing, iteration; no forward") {
  fresh_sim();
  manual_seed(0);
  nn::ModuleList list{std::make_shared<nn::Linear>(4, 8, kSim), std::make_shared<nn::ReLU>()};
  list.append(std::make_shared<nn::Linear>(8, 2, kSim));
  list.push_back(std::make_shared<nn::ReLU>());
  list.extend({std::make_shared<nn::Linear>(2, 1, false, device(kSim))});
  CHECK(list.size() == 5);
  // nn.ModuleList([Linear(4, 8), ReLU(), Linear(8, 2), ReLU(), Linear(2, 1, bias=False)]).named_parameters():
  CHECK(parameter_names(list) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight"});
  CHECK(list[0]->name() == "0");
  CHECK(list[-1] == list[4]);  // Python's negative index
  CHECK_THROWS_AS(list[5], std::out_of_range);
  CHECK_THROWS_AS(list[-6], std::out_of_range);
  CHECK(list.at<nn::Linear>(2)->weight().sizes() == Shape{2, 8});
  CHECK_THROWS_AS(list.at<nn::Linear>(1), std::invalid_argument);

  // Iterating runs the model; 8*4 + 8 + 2*8 + 2 + 2 = 60 floats of parameters: 5 blocks of 512.
  CHECK(allocated() == 5 * 512);
  Tensor x = randn({3, 4}, device(kSim));
  for (const auto& m : list) x = (*m)(x);
  CHECK(x.sizes() == Shape{3, 1});
  CHECK(contains(error_of([&] { list.forward(x); }), "missing the required \"forward\" function"));

  // Inside a model: registered under its attribute name, so "layers.0.weight", ... (PyTorch's names).
  Bare model;
  auto layers = model.register_module("layers", std::make_shared<nn::ModuleList>());
  layers->push_back(std::make_shared<nn::Linear>(2, 2, kSim));
  CHECK(parameter_names(model) == std::vector<std::string>{"layers.0.weight", "layers.0.bias"});
  CHECK((*layers)[0]->name() == "layers.0");
}

TEST_CASE("ModuleDict: children by key in insertion order; replacing keeps the position; lookups") {
  fresh_sim();
  nn::ModuleDict dict{{"encoder", std::make_shared<nn::Linear>(4, 8, kSim)}, {"act", std::make_shared<nn::ReLU>()}};
  dict.insert("decoder", std::make_shared<nn::Linear>(8, 4, kSim));
  CHECK(dict.size() == 3);
  CHECK(dict.keys() == std::vector<std::string>{"encoder", "act", "decoder"});
  CHECK(parameter_names(dict) ==
        std::vector<std::string>{"encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias"});
  CHECK(dict.contains("act"));
  CHECK_FALSE(dict.contains("missing"));
  CHECK(contains(error_of([&] { dict["missing"]; }), "'missing'"));
  CHECK(dict.at<nn::Linear>("decoder")->weight().sizes() == Shape{4, 8});
  CHECK(dict["decoder"]->name() == "decoder");

  // d["encoder"] = Linear(4, 2): an OrderedDict assignment keeps the key's position.
  auto old_encoder = dict["encoder"];
  dict.update({{"encoder", std::make_shared<nn::Linear>(4, 2, false, device(kSim))}});
  CHECK(dict.keys() == std::vector<std::string>{"encoder", "act", "decoder"});
  CHECK(parameter_names(dict) == std::vector<std::string>{"encoder.weight", "decoder.weight", "decoder.bias"});
  CHECK(old_encoder->name() == "");  // no longer registered anywhere

  std::vector<std::string> seen;
  for (const auto& [key, module] : dict) seen.push_back(key);
  CHECK(seen == dict.keys());
  CHECK(contains(error_of([&] { dict.forward(zeros({1}, device(kSim))); }), "missing the required \"forward\""));
}

TEST_CASE("Linear(in, out, device) and Linear(in, out, {.device = ...}) have a bias; the old form still works") {
  fresh_sim();
  nn::Linear a(4, 8, kSim);
  nn::Linear b(4, 8, {.device = kSim});
  nn::Linear c(4, 8, false, device(kSim));
  nn::Linear d(4, 8, device(kSim));
  for (nn::Linear* l : {&a, &b, &d}) {
    CHECK(l->bias().defined());
    CHECK(l->weight().device() == kSim);
    CHECK(l->bias().device() == kSim);
  }
  CHECK_FALSE(c.bias().defined());
  // weight 8*4*4 = 128 -> 512, bias 8*4 = 32 -> 512: three Linears with bias and one without.
  CHECK(allocated() == 3 * (512 + 512) + 512);
}

TEST_CASE("Module::to moves children first, then own parameters (each followed by its .grad), then buffers") {
  fresh_sim();
  manual_seed(0);
  Model model(kCpu);
  model.lin->weight().set_grad(ones({32, 32}, device(kCpu)));
  const Tensor weight = model.lin->weight();  // a handle held outside: stays valid, follows the move
  // PyTorch's _apply: lin's weight (32*32*4 = 4096) and its grad (4096), lin's bias (32*4 = 128); then the
  // model's own scale (300*4 = 1200), then its buffer running (600*4 = 2400). The module's own tensors came
  // first before this change, and grads were not moved.
  AllocationEvents events = allocation_events(kSim, [&] { model.to(kSim); });
  CHECK(events == AllocationEvents{{"alloc", 4096}, {"alloc", 4096}, {"alloc", 128}, {"alloc", 1200}, {"alloc", 2400}});
  CHECK(weight.device() == kSim);
  CHECK(weight.grad().device() == kSim);
  CHECK(model.scale.device() == kSim);
  CHECK(model.running.device() == kSim);
  // Blocks: 4096 + 4096 + 512 + 1536 + 2560 = 12800.
  CHECK(allocated() == 12800);
  CHECK(weight.grad().tolist() == std::vector<double>(32 * 32, 1.0));

  // Back to the host: each sim block is freed once its copy exists, in the same order.
  events = allocation_events(kSim, [&] { model.to(kCpu); });
  CHECK(events == AllocationEvents{{"free", 4096}, {"free", 4096}, {"free", 128}, {"free", 1200}, {"free", 2400}});
  CHECK(allocated() == 0);
  CHECK(weight.device() == kCpu);
  CHECK(weight.grad().device() == kCpu);
}

TEST_CASE("Module::to keeps the training step working on the new device") {
  fresh_sim();
  manual_seed(0);
  Model model(kCpu);
  model.to(kSim);
  Tensor loss = sum(model(randn({2, 32}, device(kSim))));
  loss.backward();
  CHECK(model.lin->weight().grad().device() == kSim);
  CHECK(model.lin->bias().grad().device() == kSim);
}

TEST_CASE("Module::to_empty re-makes every tensor on the device in to()'s order; reset_parameters redraws") {
  fresh_sim();
  const Device meta_build{DeviceType::meta, 7};  // a model built on meta: no values, nothing on sim
  manual_seed(0);
  Model model(meta_build);
  const Tensor weight = model.lin->weight();
  // The same order and sizes as Module::to: lin's weight (32*32*4 = 4096), bias (128), then scale (1200),
  // then running (2400); uninitialised, so nothing but the allocations.
  const AllocationEvents events = allocation_events(kSim, [&] { model.to_empty(kSim); });
  CHECK(events == AllocationEvents{{"alloc", 4096}, {"alloc", 128}, {"alloc", 1200}, {"alloc", 2400}});
  CHECK(weight.device() == kSim);
  CHECK(weight.requires_grad());
  CHECK(model.running.device() == kSim);
  CHECK_FALSE(model.running.requires_grad());
  // Redrawn from the same seed, Linear's parameters equal those its constructor draws.
  manual_seed(0);
  nn::Linear built(32, 32, kSim);
  manual_seed(0);
  const AllocationEvents none = allocation_events(kSim, [&] { model.lin->reset_parameters(); });
  CHECK(none.empty());
  CHECK(model.lin->weight().tolist() == built.weight().tolist());
  CHECK(model.lin->bias().tolist() == built.bias().tolist());
}
