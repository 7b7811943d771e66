// tools/probes/ddp_probe.py's mlp_program and gpt2_program, statement by statement.
#include "programs/ddp_programs.h"

#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "bytegrad/distributed/ddp.h"
#include "bytegrad/distributed/zero.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"
#include "programs/distributed_programs/probe_models.h"
#include "programs/gpt2_programs.h"

namespace bytegrad::programs {

namespace {

using distributed::DDPOptions;
using distributed::DistributedDataParallel;
using distributed::ProcessGroup;
using Mark = std::function<void(const std::string&)>;

struct MLPVariant {
  DDPOptions ddp;
  bool no_sync = false;
  bool zero1 = false;
  distributed::ZeroOptions zero;
};

void mlp_program(ProcessGroup& pg, const Mark& mark, const MLPVariant& v) {
  const Device dev = pg.device();
  manual_seed(1337);
  auto model = std::make_shared<ProbeMLP>(1024, 4096, 4096, build_device(pg), v.ddp.find_unused_parameters);
  model->to(dev);
  mark("model");
  DistributedDataParallel ddp(model, pg, v.ddp);
  mark("wrapped");
  std::unique_ptr<optim::Optimizer> opt;
  const optim::AdamOptions adam{.lr = 1e-3, .foreach = true};
  if (v.zero1) {
    opt = std::make_unique<distributed::ZeroRedundancyOptimizer>(
        ddp.parameters(), pg,
        [&](std::vector<Tensor> mine) { return std::make_unique<optim::Adam>(std::move(mine), adam); }, v.zero);
  } else {
    opt = std::make_unique<optim::Adam>(ddp.parameters(), adam);
  }
  manual_seed(100 + pg.rank());
  Tensor x = randn({64, 1024}, TensorOptions{}.with_device(dev));
  Tensor y = randint(0, 10, {64}, TensorOptions{ScalarType::int64, dev});
  mark("data");
  for (int i = 0; i < kProbeIterations; ++i) {
    const std::string s = "s" + std::to_string(i);
    if (v.no_sync) {
      auto guard = ddp.no_sync();
      Tensor loss = cross_entropy(ddp(x), y);
      mark(s + "_no_sync_forward");
      loss.backward();
      loss = Tensor();
      mark(s + "_no_sync_backward");
    }
    Tensor loss = cross_entropy(ddp(x), y);
    mark(s + "_forward");
    loss.backward();
    mark(s + "_backward");
    opt->step();
    mark(s + "_step");
    opt->zero_grad(/*set_to_none=*/true);
    loss = Tensor();
    mark(s + "_zero_grad");
  }
}

// nanoGPT's loop (train_gpt) as this group's rank: the probe's gpt2_program is its data-parallel branch.
void gpt2_program(ProcessGroup& pg, const Mark& mark, const nn::GPTConfig& config, int64_t batch, int64_t seq,
                  const DDPOptions& options, bool zero1, distributed::ZeroOptions zero = {}) {
  GPTTraining training{.config = config, .batch = batch, .seq = seq, .steps = kProbeIterations};
  training.data_parallel = GPTDataParallel{.ddp = options, .zero1 = zero1, .zero = zero, .group = &pg};
  train_gpt(training, mark, pg.device());
}

struct Entry {
  std::string name;
  std::function<void(ProcessGroup&, const Mark&)> run;
};

const std::vector<Entry>& programs() {
  static const std::vector<Entry> all = [] {
    std::vector<Entry> p;
    auto mlp = [&](const std::string& name, MLPVariant v) {
      p.push_back({name, [v](ProcessGroup& pg, const Mark& m) { mlp_program(pg, m, v); }});
    };
    mlp("mlp_ddp", {});
    mlp("mlp_ddp_bucket_view", {.ddp = {.gradient_as_bucket_view = true}});
    mlp("mlp_ddp_cap1", {.ddp = {.bucket_cap_mb = 1}});
    mlp("mlp_ddp_unused", {.ddp = {.find_unused_parameters = true}});
    mlp("mlp_ddp_static", {.ddp = {.static_graph = true}});
    mlp("mlp_ddp_no_sync", {.no_sync = true});
    mlp("mlp_zero1", {.zero1 = true});
    mlp("mlp_zero1_bucket_view", {.zero1 = true, .zero = {.parameters_as_bucket_view = true}});
    auto gpt = [&](const std::string& name, nn::GPTConfig c, int64_t b, int64_t t, DDPOptions o, bool zero1,
                   distributed::ZeroOptions zero = {}) {
      p.push_back({name, [=](ProcessGroup& pg, const Mark& m) { gpt2_program(pg, m, c, b, t, o, zero1, zero); }});
    };
    gpt("gpt2_tiny_ddp", gpt2_tiny_config(), 4, 64, {}, false);
    gpt("gpt2_tiny_ddp_bucket_view", gpt2_tiny_config(), 4, 64, {.gradient_as_bucket_view = true}, false);
    gpt("gpt2_small_ddp", gpt2_small_config(), 4, 256, {}, false);
    gpt("gpt2_small_ddp_bucket_view", gpt2_small_config(), 4, 256, {.gradient_as_bucket_view = true}, false);
    gpt("gpt2_small_zero1", gpt2_small_config(), 4, 256, {}, true);
    gpt("gpt2_tiny_zero1_bucket_view", gpt2_tiny_config(), 4, 64, {}, true, {.parameters_as_bucket_view = true});
    return p;
  }();
  return all;
}

}  // namespace

const std::vector<std::string>& ddp_program_names() {
  static const std::vector<std::string> names = program_names(programs());
  return names;
}

void run_ddp_program(const std::string& name, ProcessGroup& pg, const Mark& mark) {
  for (const Entry& e : programs()) {
    if (e.name != name) continue;
    e.run(pg, start_probe_marks(pg, mark));
    return;
  }
  throw std::invalid_argument("run_ddp_program: no program named '" + name + "'");
}

}  // namespace bytegrad::programs
