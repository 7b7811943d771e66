// tools/probes/fsdp_probe.py's mlp_program and gpt2_program, statement by statement.
#include "programs/fsdp_programs.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "bytegrad/distributed/fsdp.h"
#include "bytegrad/memory/host_work.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/clip_grad.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"
#include "programs/distributed_programs/probe_models.h"
#include "programs/gpt2_programs.h"

namespace bytegrad::programs {

namespace {

using distributed::FullyShardOptions;
using distributed::ProcessGroup;
using Mark = std::function<void(const std::string&)>;
using AtEnd = std::function<void()>;

struct MLPVariant {
  FullyShardOptions shard;
  bool uneven = false;
  bool meta = false;                   // built on meta, sharded there, then to_empty on the device and reset_parameters
  bool reshard_to_half_world = false;  // the probe's reshard_after_forward=max(1, world // 2), an int
};

// The probe's train(): forward, backward, (clip_grad_norm_ to 1, its result dropped,) step,
// zero_grad(set_to_none), then `del out, loss`.
template <typename Forward>
void train(const Mark& mark, optim::Optimizer& opt, Forward&& forward, const nn::Module* clip = nullptr) {
  for (int i = 0; i < kProbeIterations; ++i) {
    const std::string s = "s" + std::to_string(i);
    auto [out, loss] = forward();
    mark(s + "_forward");
    loss.backward();
    mark(s + "_backward");
    if (clip) {
      (void)nn::utils::clip_grad_norm_(clip->parameters(), 1.0);
      mark(s + "_clip");
    }
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
  // PyTorch's meta device holds no memory: a meta device of bytegrad's other than the group's stands in.
  const Device build = v.meta ? Device{DeviceType::meta, kHostStandInMetaIndex + pg.rank()} : build_device(pg);
  auto model = v.uneven ? std::make_shared<ProbeMLP>(1000, 3001, 1001, build)
                        : std::make_shared<ProbeMLP>(1024, 4096, 4096, build);
  if (!v.meta) model->to(dev);
  mark("model");
  FullyShardOptions shard = v.shard;
  if (v.reshard_to_half_world) shard.reshard_after_forward = std::max(1, pg.size() / 2);
  for (const auto& layer : {model->fc1, model->fc2, model->fc3}) distributed::fully_shard(layer, pg, shard);
  distributed::fully_shard(model, pg, shard);
  mark("sharded");
  if (v.meta) {
    model->to_empty(dev);
    mark("to_empty");
    for (nn::Module* m : model->modules())
      if (auto* linear = dynamic_cast<nn::Linear*>(m)) linear->reset_parameters();
    mark("initialised");
  }
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

// The probe's gpt2_program variants beyond the sharding options: clip the gradients, run the forward under
// autocast, checkpoint every block.
struct GPTVariant {
  bool clip = false;
  std::optional<ScalarType> amp;
  bool checkpoint = false;
};

void gpt2_program(ProcessGroup& pg, const Mark& mark, const AtEnd& at_end, nn::GPTConfig config, int64_t batch,
                  int64_t seq, const FullyShardOptions& shard, const GPTVariant& variant) {
  config.checkpoint_blocks = variant.checkpoint;
  const Device dev = pg.device();
  manual_seed(1337);
  auto model = std::make_shared<nn::GPT>(config, TensorOptions{}.with_device(build_device(pg)));
  model->to(dev);
  mark("model");
  distributed::FSDPModule root = fully_shard_gpt(model, pg, shard);
  mark("sharded");
  GPTTraining training{.config = config, .batch = batch, .seq = seq};
  auto opt = make_gpt_optimizer(*model, training);
  manual_seed(100 + pg.rank());
  const TensorOptions int64_on{ScalarType::int64, dev};
  Tensor x = randint(0, config.vocab_size, {batch, seq}, int64_on);
  Tensor y = randint(0, config.vocab_size, {batch, seq}, int64_on);
  mark("data");
  train(
      mark, *opt,
      [&] {
        std::optional<AutocastGuard> autocast;  // with torch.autocast(device_type="cuda", dtype=amp):
        if (variant.amp) autocast.emplace(dev.type, *variant.amp);
        nn::GPT::Output out = root.forward([&] { return model->forward(x, y); });
        return std::make_pair(out.logits, out.loss);
      },
      variant.clip ? model.get() : nullptr);
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
    // 1 at two ranks, which PyTorch reads as false.
    mlp("mlp_fsdp_reshard_int", {.reshard_to_half_world = true});
    mlp("mlp_fsdp_mixed", {.shard = {.mp_policy = bf16}});
    mlp("mlp_fsdp_uneven", {.uneven = true});
    mlp("mlp_fsdp_meta", {.meta = true});
    auto gpt = [&](const std::string& name, nn::GPTConfig c, int64_t b, int64_t t, FullyShardOptions o,
                   GPTVariant v = {}) {
      p.push_back(
          {name, [=](ProcessGroup& pg, const Mark& m, const AtEnd& e) { gpt2_program(pg, m, e, c, b, t, o, v); }});
    };
    gpt("gpt2_tiny_fsdp", gpt2_tiny_config(), 4, 64, {});
    gpt("gpt2_tiny_fsdp_no_reshard", gpt2_tiny_config(), 4, 64, {.reshard_after_forward = false});
    gpt("gpt2_tiny_fsdp_mixed", gpt2_tiny_config(), 4, 64, {.mp_policy = bf16});
    gpt("gpt2_tiny_fsdp_clip", gpt2_tiny_config(), 4, 64, {}, {.clip = true});
    gpt("gpt2_tiny_fsdp_amp", gpt2_tiny_config(), 4, 64, {}, {.amp = ScalarType::bfloat16});
    gpt("gpt2_tiny_fsdp_checkpoint", gpt2_tiny_config(), 4, 64, {}, {.checkpoint = true});
    gpt("gpt2_small_fsdp", gpt2_small_config(), 4, 256, {});
    gpt("gpt2_small_fsdp_mixed", gpt2_small_config(), 4, 256, {.mp_policy = bf16});
    return p;
  }();
  return all;
}

}  // namespace

distributed::FSDPModule fully_shard_gpt(const std::shared_ptr<nn::GPT>& model, ProcessGroup& pg,
                                        const FullyShardOptions& options) {
  for (const auto& [name, m] : model->named_modules()) {
    if (name.rfind("transformer.h.", 0) != 0 || name.find('.', 14) != std::string::npos) continue;
    // The blocks are owned by the model's ModuleList; fully_shard needs a shared handle to each.
    std::shared_ptr<nn::Module> block(model, m);
    distributed::fully_shard(block, pg, options);
  }
  return distributed::fully_shard(model, pg, options);
}

const std::vector<std::string>& fsdp_program_names() {
  static const std::vector<std::string> names = program_names(programs());
  return names;
}

void run_fsdp_program(const std::string& name, ProcessGroup& pg, const Mark& mark, const AtEnd& at_end) {
  for (const Entry& e : programs()) {
    if (e.name != name) continue;
    e.run(pg, start_probe_marks(pg, mark), at_end);
    return;
  }
  throw std::invalid_argument("run_fsdp_program: no program named '" + name + "'");
}

}  // namespace bytegrad::programs
