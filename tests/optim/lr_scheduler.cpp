// The schedulers of optim/lr_scheduler.h against PyTorch 2.11's values, bit for bit: 100 steps of each
// schedule on an optimizer with two param groups (lr 0.1 and 0.02), recorded by
// tools/probes/training_loop_probe.py in tests/data/pytorch_probes/lr_schedulers.json (floats as Python's
// repr, which read back exactly).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/lr_scheduler.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;
using namespace bytegrad::optim;

namespace {

const json::Value& recorded_schedules() {
  static const json::Value all = [] {
    std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/lr_schedulers.json");
    REQUIRE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
  }();
  return all["schedules"];
}

// The probe's optimizer: Adam with two groups, lr 0.1 and 0.02, on cpu parameters.
std::unique_ptr<Adam> make_optimizer() {
  auto a = zeros({3}, device(kCpu)).requires_grad_();
  auto b = zeros({2}, device(kCpu)).requires_grad_();
  AdamOptions first, second;
  first.lr = 0.1;
  second.lr = 0.02;
  return std::make_unique<Adam>(std::vector<AdamParamGroup>{{{a}, first, std::nullopt}, {{b}, second, std::nullopt}});
}

// Holds a schedule's schedulers alive (SequentialLR keeps references to the ones inside it).
struct Schedule {
  std::vector<std::unique_ptr<LRScheduler>> parts;
  LRScheduler& last() { return *parts.back(); }
};

using Maker = std::function<Schedule(Optimizer&)>;

std::vector<std::unique_ptr<LRScheduler>> vec(std::unique_ptr<LRScheduler> one) {
  std::vector<std::unique_ptr<LRScheduler>> out;
  out.push_back(std::move(one));
  return out;
}

template <typename S, typename... Args>
std::unique_ptr<LRScheduler> make(Args&&... args) {
  return std::make_unique<S>(std::forward<Args>(args)...);
}

const std::map<std::string, Maker>& schedules() {
  static const std::map<std::string, Maker> all = {
      {"StepLR(7, 0.5)", [](Optimizer& o) { return Schedule{vec(make<StepLR>(o, 7, 0.5))}; }},
      {"MultiStepLR([10, 30, 30, 80], 0.3)",
       [](Optimizer& o) { return Schedule{vec(make<MultiStepLR>(o, std::vector<int64_t>{10, 30, 30, 80}, 0.3))}; }},
      {"ExponentialLR(0.97)", [](Optimizer& o) { return Schedule{vec(make<ExponentialLR>(o, 0.97))}; }},
      {"CosineAnnealingLR(30, 0.001)", [](Optimizer& o) { return Schedule{vec(make<CosineAnnealingLR>(o, 30, 0.001))}; }},
      {"CosineAnnealingLR(100)", [](Optimizer& o) { return Schedule{vec(make<CosineAnnealingLR>(o, 100))}; }},
      {"LambdaLR(0.95 ** e)",
       [](Optimizer& o) {
         return Schedule{vec(make<LambdaLR>(o, [](int64_t e) { return std::pow(0.95, static_cast<double>(e)); }))};
       }},
      {"LambdaLR([1 / (e + 1), 0.5 + e / 200])",
       [](Optimizer& o) {
         std::vector<LambdaLR::Lambda> lambdas{[](int64_t e) { return 1.0 / static_cast<double>(e + 1); },
                                               [](int64_t e) { return 0.5 + static_cast<double>(e) / 200.0; }};
         return Schedule{vec(make<LambdaLR>(o, lambdas))};
       }},
      {"LinearLR(0.25, 1.0, 10)", [](Optimizer& o) { return Schedule{vec(make<LinearLR>(o, 0.25, 1.0, 10))}; }},
      {"LinearLR()", [](Optimizer& o) { return Schedule{vec(make<LinearLR>(o))}; }},
      {"LinearLR(1.0, 0.1, 50)", [](Optimizer& o) { return Schedule{vec(make<LinearLR>(o, 1.0, 0.1, 50))}; }},
      {"SequentialLR([LinearLR(0.1, 1.0, 5), CosineAnnealingLR(95)], [5])",
       [](Optimizer& o) {
         Schedule s;
         s.parts.push_back(make<LinearLR>(o, 0.1, 1.0, 5));
         s.parts.push_back(make<CosineAnnealingLR>(o, 95));
         s.parts.push_back(std::make_unique<SequentialLR>(
             o, std::vector<std::reference_wrapper<LRScheduler>>{*s.parts[0], *s.parts[1]}, std::vector<int64_t>{5}));
         return s;
       }},
      {"SequentialLR([ExponentialLR(0.9), StepLR(10, 0.5), LinearLR(0.5, 1.0, 20)], [20, 60])",
       [](Optimizer& o) {
         Schedule s;
         s.parts.push_back(make<ExponentialLR>(o, 0.9));
         s.parts.push_back(make<StepLR>(o, 10, 0.5));
         s.parts.push_back(make<LinearLR>(o, 0.5, 1.0, 20));
         s.parts.push_back(std::make_unique<SequentialLR>(
             o, std::vector<std::reference_wrapper<LRScheduler>>{*s.parts[0], *s.parts[1], *s.parts[2]},
             std::vector<int64_t>{20, 60}));
         return s;
       }},
  };
  return all;
}

std::string show(const std::vector<double>& lrs) {
  std::ostringstream out;
  out.precision(17);
  for (double lr : lrs) out << lr << " ";
  return out.str();
}

std::vector<double> row(const json::Value& values) {
  std::vector<double> out;
  for (const json::Value& v : values.items) out.push_back(v.number());
  return out;
}

}  // namespace

TEST_CASE("schedulers equal PyTorch's learning rates bit for bit for 100 steps") {
  const json::Value& recorded = recorded_schedules();
  for (const auto& [name, maker] : schedules()) {
    CAPTURE(name);
    const json::Value& expected = recorded[name];
    auto opt = make_optimizer();
    Schedule schedule = maker(*opt);
    REQUIRE(expected.size() == 101);
    CHECK(show(schedule.last().get_last_lr()) == show(row(expected[0])));
    for (size_t step = 1; step < expected.size(); ++step) {
      CAPTURE(step);
      opt->step();
      schedule.last().step();
      const std::vector<double> want = row(expected[step]);
      CHECK(show(schedule.last().get_last_lr()) == show(want));
      CHECK(opt->lr(0) == want[0]);  // get_last_lr is the groups' lr
      CHECK(opt->lr(1) == want[1]);
    }
  }
}

TEST_CASE("two schedulers on one optimizer chain their factors as PyTorch's do") {
  const json::Value& expected = recorded_schedules()["StepLR(5, 0.5) then ExponentialLR(0.99), chained"];
  auto opt = make_optimizer();
  StepLR a(*opt, 5, 0.5);
  ExponentialLR b(*opt, 0.99);
  CHECK(show({opt->lr(0), opt->lr(1)}) == show(row(expected[0])));
  for (size_t step = 1; step < expected.size(); ++step) {
    CAPTURE(step);
    opt->step();
    a.step();
    b.step();
    CHECK(show({opt->lr(0), opt->lr(1)}) == show(row(expected[step])));
  }
}

TEST_CASE("a scheduler's first lr reaches the optimizer's step; the user may set lr between steps") {
  // SGD with lr 1 on a parameter whose grad is 1: each step moves it by -lr, so the parameter tells the lr used.
  auto p = zeros({1}, device(kCpu)).requires_grad_();
  SGD opt({p}, 1.0);
  LinearLR warmup(opt, 0.5, 1.0, 2);  // lr 0.5 now, 0.75, then 1.0
  CHECK(opt.param_groups()[0].initial_lr == 1.0);
  p.set_grad(ones({1}, device(kCpu)));
  opt.step();
  CHECK(p.item() == -0.5);
  warmup.step();
  opt.step();
  CHECK(p.item() == -1.25);  // -0.5 - 0.75
  opt.param_groups()[0].options.lr = 0.25;
  opt.step();
  CHECK(p.item() == -1.5);
}

TEST_CASE("schedulers and param groups refuse bad input with PyTorch's messages") {
  auto opt = make_optimizer();
  CHECK_THROWS_WITH_AS(LinearLR(*opt, 0.0), doctest::Contains("Starting multiplicative factor"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(LinearLR(*opt, 0.5, 1.5), doctest::Contains("Ending multiplicative factor"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(LambdaLR(*opt, std::vector<LambdaLR::Lambda>{[](int64_t) { return 1.0; }}),
                       doctest::Contains("Expected 2 lr_lambdas, but got 1"), std::invalid_argument);
  StepLR step(*opt, 3);
  CHECK_THROWS_WITH_AS(SequentialLR(*opt, {step}, {5}), doctest::Contains("one more than the number of milestone"),
                       std::invalid_argument);
  auto other = make_optimizer();
  StepLR elsewhere(*other, 3);
  CHECK_THROWS_WITH_AS(SequentialLR(*opt, {step, elsewhere}, {5}), doctest::Contains("same optimizer"),
                       std::invalid_argument);
  opt->param_groups()[1].options.lr = -1.0;  // checked at the next step, as the constructor checks it
  CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains("Invalid learning rate: -1"), std::invalid_argument);
  opt->param_groups()[1].options.lr = 0.02;
  opt->param_groups()[0].params.push_back(zeros({1}, device(kCpu)).requires_grad_());
  CHECK_THROWS_WITH_AS(opt->step(), doctest::Contains("were changed"), std::logic_error);
}
