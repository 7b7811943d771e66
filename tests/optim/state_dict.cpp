// Optimizer state_dict / load_state_dict, optim::save / load, and the schedulers' state: resuming gives
// the parameters of an uninterrupted run bit for bit (sim and cpu), loading allocates what PyTorch's
// load_state_dict allocates (arithmetic beside each check), and bad state dicts are refused whole.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/nn/serialization.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/lr_scheduler.h"
#include "bytegrad/optim/serialization.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("bytegrad_optim_" + name + ".safetensors")).string();
}

// A 4 -> 8 -> ReLU -> 1 MLP; the same weights for a given seed on every device.
std::shared_ptr<nn::Sequential> make_model(Device d) {
  manual_seed(11);
  const TensorOptions opts{ScalarType::float32, d};
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8, true, opts), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 1, true, opts)});
}

// Full-batch steps on fixed data (drawn from seed 5, so the same for every run).
struct Task {
  Tensor x, y;
  explicit Task(Device d) {
    manual_seed(5);
    const TensorOptions opts{ScalarType::float32, d};
    x = randn({16, 4}, opts);
    y = randn({16, 1}, opts);
  }
  void steps(nn::Module& model, optim::Optimizer& opt, int n, optim::LRScheduler* sched = nullptr) const {
    for (int i = 0; i < n; ++i) {
      opt.zero_grad();
      mse_loss(model(x), y).backward();
      opt.step();
      if (sched) sched->step();
    }
  }
};

std::vector<std::vector<double>> values_of(const nn::Module& model) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.tolist());
  return out;
}

enum class Kind { adamw, adam_amsgrad, sgd_momentum };

std::unique_ptr<optim::Optimizer> make_optimizer(Kind kind, nn::Module& model) {
  switch (kind) {
    case Kind::adamw: return std::make_unique<optim::AdamW>(model.parameters(), 1e-2);
    case Kind::adam_amsgrad:
      return std::make_unique<optim::Adam>(model.parameters(), 1e-2, std::make_pair(0.9, 0.999), 1e-8, 1e-3, true);
    case Kind::sgd_momentum: return std::make_unique<optim::SGD>(model.parameters(), 0.05, 0.9, 0.0, 1e-4, true);
  }
  return nullptr;
}

}  // namespace

TEST_CASE("3 steps, save, load into fresh model and optimizer, 2 steps: the 5-step parameters bit for bit") {
  for (Device d : {kSim, kCpu}) {
    for (Kind kind : {Kind::adamw, Kind::adam_amsgrad, Kind::sgd_momentum}) {
      CAPTURE(d.str());
      CAPTURE(static_cast<int>(kind));
      if (d == kSim) fresh(d);
      const Task task(d);
      std::vector<std::vector<double>> uninterrupted;
      {
        auto model = make_model(d);
        auto opt = make_optimizer(kind, *model);
        optim::CosineAnnealingLR sched(*opt, 10);
        task.steps(*model, *opt, 5, &sched);
        uninterrupted = values_of(*model);
      }
      const std::string model_path = temp_path("model"), optim_path = temp_path("optim");
      {
        auto model = make_model(d);
        auto opt = make_optimizer(kind, *model);
        optim::CosineAnnealingLR sched(*opt, 10);
        task.steps(*model, *opt, 3, &sched);
        nn::save_model(*model, model_path);
        optim::save(*opt, optim_path, {{"scheduler", json::dump(sched.state_dict())}});
      }
      {
        auto model = make_model(d);
        // Other starting weights, so that only the file can make the runs agree.
        for (const Tensor& p : model->parameters()) {
          NoGradGuard no_grad;
          p.fill_(0.5);
        }
        auto opt = make_optimizer(kind, *model);
        optim::CosineAnnealingLR sched(*opt, 10);
        nn::load_model(*model, model_path);
        const safetensors::Metadata extra = optim::load(*opt, optim_path);
        REQUIRE(extra.size() == 1);
        sched.load_state_dict(json::parse(extra.at("scheduler")));
        CHECK(sched.last_epoch() == 3);
        task.steps(*model, *opt, 2, &sched);
        CHECK(values_of(*model) == uninterrupted);
      }
      std::remove(model_path.c_str());
      std::remove(optim_path.c_str());
    }
  }
}

TEST_CASE("state_dict: PyTorch's layout, handles on the optimizer's own tensors, nothing allocated") {
  fresh(kSim);
  auto model = make_model(kSim);
  optim::AdamW opt(model->parameters(), 1e-2);
  const Task task(kSim);
  task.steps(*model, opt, 2);
  MemoryProbe probe(kSim);
  const optim::OptimizerStateDict sd = opt.state_dict();
  CHECK(probe.allocated_delta_is(0));
  REQUIRE(sd.param_groups.size() == 1);
  CHECK(sd.param_groups[0].params == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(sd.param_groups[0].options["lr"].number() == 1e-2);
  CHECK(sd.param_groups[0].options["weight_decay"].number() == 1e-2);
  CHECK(sd.param_groups[0].options["betas"][1].number() == 0.999);
  REQUIRE(sd.state.size() == 4);
  CHECK(sd.state.at(0).step == 2);
  CHECK(sd.state.at(0).tensors.keys() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  CHECK(sd.state.at(3).tensors.at("exp_avg").storage() == opt.state(3).exp_avg.storage());
  // The metadata holds the JSON, the file the tensors.
  const optim::FlatStateDict flat = optim::flatten(sd);
  CHECK(flat.tensors.keys() == std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.1.exp_avg",
                                                        "state.1.exp_avg_sq", "state.2.exp_avg", "state.2.exp_avg_sq",
                                                        "state.3.exp_avg", "state.3.exp_avg_sq"});
  CHECK(flat.metadata.at("state") == R"({"0": {"step": 2}, "1": {"step": 2}, "2": {"step": 2}, "3": {"step": 2}})");
}

TEST_CASE("load_state_dict allocates as PyTorch's: shared when already in place, one block per tensor otherwise") {
  fresh(kSim);
  auto model = make_model(kSim);
  // Parameters 8x4, 8, 1x8, 1 float32: 128, 32, 32, 4 bytes, each one 512-byte block; Adam keeps two per
  // parameter: 8 * 512 = 4096 bytes of state.
  constexpr int64_t kState = 8 * 512;
  const Task task(kSim);
  optim::Adam source(model->parameters(), 1e-2);
  task.steps(*model, source, 1);
  {
    // Same device, same dtype: value.to(param.dtype, param.device) is the value itself.
    optim::Adam fresh_opt(model->parameters(), 1e-2);
    MemoryProbe probe(kSim);
    fresh_opt.load_state_dict(source.state_dict());
    CHECK(probe.allocated_delta_is(0));
    CHECK(probe.peak_allocated_delta_is(0));
    CHECK(fresh_opt.state(0).exp_avg.storage() == source.state(0).exp_avg.storage());
  }
  {
    // From the host: each state tensor becomes a new block on sim; the optimizer's old state is freed
    // after the new one exists, so the peak holds both.
    optim::OptimizerStateDict host = source.state_dict();
    for (auto& [index, entry] : host.state)
      for (const auto& [key, t] : optim::ParamState(entry).tensors) entry.tensors.insert_or_assign(key, t.cpu());
    optim::Adam target(model->parameters(), 1e-2);
    target.load_state_dict(source.state_dict());  // shares the source's state: nothing of its own yet
    optim::Adam own(model->parameters(), 1e-2);
    task.steps(*model, own, 1);  // `own` has its own 4096 bytes of state
    MemoryProbe probe(kSim);
    own.load_state_dict(host);
    CHECK(probe.allocated_delta_is(0));            // 4096 new, 4096 old freed
    CHECK(probe.peak_allocated_delta_is(kState));  // both alive before the swap
    CHECK(own.state(0).exp_avg.device() == kSim);
    CHECK(own.state(0).exp_avg.tolist() == source.state(0).exp_avg.tolist());
    // A float64 host source is converted on the host: still one float32 block per tensor on sim.
    for (auto& [index, entry] : host.state)
      for (const auto& [key, t] : optim::ParamState(entry).tensors)
        entry.tensors.insert_or_assign(key, t.to(ScalarType::float64));
    optim::Adam from_double(model->parameters(), 1e-2);
    MemoryProbe probe2(kSim);
    from_double.load_state_dict(host);
    CHECK(probe2.allocated_delta_is(kState));
    CHECK(probe2.peak_allocated_delta_is(kState));
    CHECK(from_double.state(2).exp_avg_sq.dtype() == ScalarType::float32);
  }
}

TEST_CASE("optim::load reads the file straight onto the parameters' device: one block per state tensor") {
  fresh(kSim);
  auto model = make_model(kSim);
  const Task task(kSim);
  optim::SGD sgd(model->parameters(), 0.05, 0.9);
  task.steps(*model, sgd, 1);
  const std::string path = temp_path("sgd");
  optim::save(sgd, path);
  optim::SGD fresh_opt(model->parameters(), 0.05, 0.9);
  MemoryProbe probe(kSim);
  optim::load(fresh_opt, path);
  // Four momentum buffers of 128, 32, 32 and 4 bytes: 4 blocks of 512.
  CHECK(probe.allocated_delta_is(4 * 512));
  CHECK(probe.peak_allocated_delta_is(4 * 512));
  CHECK(fresh_opt.momentum_buffer(0).tolist() == sgd.momentum_buffer(0).tolist());
  std::remove(path.c_str());
}

TEST_CASE("load_state_dict refuses a state dict that does not fit, naming the group, index and key, changing nothing") {
  fresh(kSim);
  auto model = make_model(kSim);
  const Task task(kSim);
  optim::Adam opt(model->parameters(), 1e-2);
  task.steps(*model, opt, 1);
  const optim::OptimizerStateDict good = opt.state_dict();
  auto refused = [&](const optim::OptimizerStateDict& sd, const std::string& text) {
    optim::Adam target(model->parameters(), 0.5);
    CHECK_THROWS_WITH_AS(target.load_state_dict(sd), doctest::Contains(text.c_str()), std::invalid_argument);
    CHECK(target.param_groups()[0].options.lr == 0.5);
    CHECK(!target.state(0).exp_avg.defined());
  };
  {
    optim::OptimizerStateDict sd = good;
    sd.param_groups.push_back(sd.param_groups[0]);
    refused(sd, "loaded state dict has a different number of parameter groups");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.param_groups[0].params.pop_back();
    refused(sd, "loaded state dict contains a parameter group that doesn't match the size of optimizer's group");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.state.at(2).tensors.insert_or_assign("exp_avg", zeros({3}, TensorOptions{ScalarType::float32, kSim}));
    refused(sd, "param group 0, parameter index 2: \"exp_avg\" has shape [3], the parameter's is [1, 8]");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.state.at(1).tensors.erase("exp_avg_sq");
    refused(sd, "param group 0, parameter index 1: the state has no \"exp_avg_sq\"");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.state.at(1).tensors.insert_or_assign("momentum_buffer", opt.state(1).exp_avg);
    refused(sd, "param group 0, parameter index 1: unexpected key \"momentum_buffer\"");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.state.at(0).tensors.insert_or_assign("exp_avg", zeros({8, 4}, TensorOptions{ScalarType::int64, kSim}));
    refused(sd, "\"exp_avg\" is int64, not a floating dtype");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.state.emplace(9, sd.state.at(0));
    refused(sd, "state for parameter index 9, which none of its param groups lists");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.state.at(0).step.reset();
    refused(sd, "the state has no \"step\"");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.param_groups[0].options = json::parse(R"({"lr": -1, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0})");
    refused(sd, "Invalid learning rate: -1");
  }
  {
    optim::OptimizerStateDict sd = good;
    sd.param_groups[0].options =
        json::parse(R"({"lr": 0.1, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0, "maximize": true})");
    refused(sd, "\"maximize\": true is not supported");
  }
  {
    optim::AdamW adamw(model->parameters(), 1e-2);
    CHECK_THROWS_WITH_AS(adamw.load_state_dict(good), doctest::Contains("this optimizer is AdamW"),
                         std::invalid_argument);
  }
  // The groups' options come from the dict, initial_lr included (a scheduler had set it).
  optim::Adam target(model->parameters(), 0.5);
  optim::OptimizerStateDict sd = good;
  sd.param_groups[0].options.add("initial_lr", optim::json_number(0.25));
  target.load_state_dict(sd);
  CHECK(target.param_groups()[0].options.lr == 1e-2);
  CHECK(target.param_groups()[0].initial_lr == 0.25);
}

TEST_CASE("optim::load refuses files that are not an optimizer's before reading a tensor") {
  fresh(kSim);
  auto model = make_model(kSim);
  const std::string path = temp_path("not_optim");
  nn::save_model(*model, path);
  optim::Adam opt(model->parameters());
  MemoryProbe probe(kSim);
  CHECK_THROWS_WITH_AS(optim::load(opt, path), doctest::Contains("not an optimizer's state"), safetensors::Error);
  CHECK(probe.peak_allocated_delta_is(0));
  CHECK_THROWS_WITH_AS(optim::save(opt, path, {{"state", "x"}}), doctest::Contains("\"state\" is the optimizer's own"),
                       std::invalid_argument);
  std::remove(path.c_str());
}

TEST_CASE("scheduler state_dict: PyTorch's keys; a wrong one is refused whole") {
  fresh(kSim);
  auto model = make_model(kSim);
  optim::SGD opt(model->parameters(), 0.1);
  optim::LinearLR warmup(opt, 0.1, 1.0, 5);
  optim::CosineAnnealingLR cosine(opt, 20);
  optim::SequentialLR schedule(opt, {warmup, cosine}, {5});
  for (int i = 0; i < 7; ++i) schedule.step();
  const json::Value state = schedule.state_dict();
  CHECK(state["last_epoch"].integer() == 7);
  CHECK(state["_schedulers"].size() == 2);
  CHECK(state["_schedulers"][1]["last_epoch"].integer() == 2);
  json::Value bad = state;
  bad.members.back().second.items.pop_back();  // one scheduler's state missing
  optim::SGD other(model->parameters(), 0.1);
  optim::LinearLR w2(other, 0.1, 1.0, 5);
  optim::CosineAnnealingLR c2(other, 20);
  optim::SequentialLR s2(other, {w2, c2}, {5});
  CHECK_THROWS_WITH_AS(s2.load_state_dict(bad), doctest::Contains("must list the states of 2 schedulers"),
                       std::invalid_argument);
  CHECK(s2.last_epoch() == 0);
  s2.load_state_dict(state);
  CHECK(s2.last_epoch() == 7);
  CHECK(c2.last_epoch() == 2);
}
