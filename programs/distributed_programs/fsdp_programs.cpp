// tools/probes/fsdp_probe.py's mlp_program and gpt2_program, statement by statement.
#include "programs/fsdp_programs.h"

#include <memory>
#include <stdexcept>
#include <utility>

#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"
#include "programs/gpt2_programs.h"

namespace bytegrad::programs {

namespace {

using distributed::FullyShardOptions;
using distributed::ProcessGroup;
using Mark = std::function<void(const std::string&)>;
using AtEnd = std::function<void()>;

// in -> hidden1 -> hidden2 -> 10 with ReLUs: the probe's MLP (1024, 4096, 4096) and UnevenMLP (1000, 3001,
// 1001), whose first dimensions no world size of 2 or 4 divides.
class MLP : public nn::Module {
 public:
  MLP(int64_t in, int64_t hidden1, int64_t hidden2, Device on) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden1, on));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden1, hidden2, on));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden2, 10, on));
  }
  // One statement per layer, so each layer's output is freed as Python frees it.
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*fc1)(x));
    h = relu((*fc2)(h));
    return (*fc3)(h);
  }
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

constexpr int kIterations = 3;

Device build_device(const ProcessGroup& pg) {
  return pg.device().type == DeviceType::meta ? Device{DeviceType::meta, 100 + pg.rank()} : kCpu;
}

struct MLPVariant {
  FullyShardOptions shard;
  bool uneven = false;
};

// The probe's train(): forward, backward, step, zero_grad(set_to_none), then `del out, loss`.
template <typename Forward>
void train(const Mark& mark, optim::Optimizer& opt, Forward&& forward) {
  for (int i = 0; i < kIterations; ++i) {
    const std::string s = "s" + std::to_string(i);
    auto [out, loss] = forward();
    mark(s + "_forward");
    loss.backward();
    mark(s + "_backward");
    opt.step();
    mark(s + "_step");
    opt.zero_grad(/*set_to_none=*/true);
    out = Tensor();
    loss = Tensor();
    mark(s + "_zero_grad");
  }
}

void mlp_program(ProcessGroup& pg, const Mark& mark, const AtEnd& at_end, const MLPVariant& v) {
  const Device dev = pg.device();
  manual_seed(1337);
  const int64_t in = v.uneven ? 1000 : 1024;
  auto model = v.uneven ? std::make_shared<MLP>(1000, 3001, 1001, build_device(pg))
                        : std::make_shared<MLP>(1024, 4096, 4096, build_device(pg));
  model->to(dev);
  mark("model");
  for (const auto& layer : {model->fc1, model->fc2, model->fc3}) distributed::fully_shard(layer, pg, v.shard);
  distributed::fully_shard(model, pg, v.shard);
  mark("sharded");
  auto opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3, .foreach = true});
  manual_seed(100 + pg.rank());
  Tensor x = randn({64, in}, TensorOptions{}.with_device(dev));
  Tensor y = randint(0, 10, {64}, TensorOptions{ScalarType::int64, dev});
  mark("data");
  train(mark, *opt, [&] {
    Tensor out = (*model)(x);
    Tensor loss = cross_entropy(out, y);
    return std::make_pair(out, loss);
  });
  opt.reset();
  x = Tensor();
  y = Tensor();
  if (at_end) at_end();
}

void gpt2_program(ProcessGroup& pg, const Mark& mark, const AtEnd& at_end, const nn::GPTConfig& config, int64_t batch,
                  int64_t seq, const FullyShardOptions& shard) {
  const Device dev = pg.device();
  manual_seed(1337);
  auto model = std::make_shared<nn::GPT>(config, TensorOptions{}.with_device(build_device(pg)));
  model->to(dev);
  mark("model");
  for (const auto& [name, m] : model->named_modules()) {
    if (name.rfind("transformer.h.", 0) != 0 || name.find('.', 14) != std::string::npos) continue;
    for (const auto& child : model->named_modules())
      if (child.first == name) {
        // The blocks are owned by the model's ModuleList; fully_shard needs a shared handle to each.
        std::shared_ptr<nn::Module> block(model, child.second);
        distributed::fully_shard(block, pg, shard);
      }
  }
  distributed::FSDPModule root = distributed::fully_shard(model, pg, shard);
  mark("sharded");
  GPTTraining training{.config = config, .batch = batch, .seq = seq};
  auto opt = make_gpt_optimizer(*model, training);
  manual_seed(100 + pg.rank());
  const TensorOptions int64_on{ScalarType::int64, dev};
  Tensor x = randint(0, config.vocab_size, {batch, seq}, int64_on);
  Tensor y = randint(0, config.vocab_size, {batch, seq}, int64_on);
  mark("data");
  train(mark, *opt, [&] {
    nn::GPT::Output out = root.forward([&] { return model->forward(x, y); });
    return std::make_pair(out.logits, out.loss);
  });
  opt.reset();
  x = Tensor();
  y = Tensor();
  if (at_end) at_end();
}

struct Entry {
  std::string name;
  std::function<void(ProcessGroup&, const Mark&, const AtEnd&)> run;
};

const std::vector<Entry>& programs() {
  static const std::vector<Entry> all = [] {
    std::vector<Entry> p;
    auto mlp = [&](const std::string& name, MLPVariant v) {
      p.push_back({name, [v](ProcessGroup& pg, const Mark& m, const AtEnd& e) { mlp_program(pg, m, e, v); }});
    };
    const distributed::MixedPrecisionPolicy bf16{.param_dtype = ScalarType::bfloat16,
                                                 .reduce_dtype = ScalarType::float32};
    mlp("mlp_fsdp", {});
    mlp("mlp_fsdp_no_reshard", {.shard = {.reshard_after_forward = false}});
    mlp("mlp_fsdp_mixed", {.shard = {.mp_policy = bf16}});
    mlp("mlp_fsdp_uneven", {.uneven = true});
    auto gpt = [&](const std::string& name, nn::GPTConfig c, int64_t b, int64_t t, FullyShardOptions o) {
      p.push_back({name, [=](ProcessGroup& pg, const Mark& m, const AtEnd& e) { gpt2_program(pg, m, e, c, b, t, o); }});
    };
    gpt("gpt2_tiny_fsdp", gpt2_tiny_config(), 4, 64, {});
    gpt("gpt2_tiny_fsdp_no_reshard", gpt2_tiny_config(), 4, 64, {.reshard_after_forward = false});
    gpt("gpt2_tiny_fsdp_mixed", gpt2_tiny_config(), 4, 64, {.mp_policy = bf16});
    gpt("gpt2_small_fsdp", gpt2_small_config(), 4, 256, {});
    gpt("gpt2_small_fsdp_mixed", gpt2_small_config(), 4, 256, {.mp_policy = bf16});
    return p;
  }();
  return all;
}

}  // namespace

const std::vector<std::string>& fsdp_program_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Entry& e : programs()) n.push_back(e.name);
    return n;
  }();
  return names;
}

void run_fsdp_program(const std::string& name, ProcessGroup& pg, const Mark& mark, const AtEnd& at_end) {
  for (const Entry& e : programs()) {
    if (e.name != name) continue;
    const Mark synchronized_mark = [&](const std::string& label) {
      synchronize(pg.device());
      mark(label);
    };
    synchronized_mark("start");
    synchronized_mark("process_group");
    e.run(pg, synchronized_mark, at_end);
    return;
  }
  throw std::invalid_argument("run_fsdp_program: no program named '" + name + "'");
}

}  // namespace bytegrad::programs
