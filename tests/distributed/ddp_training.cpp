// What DistributedDataParallel computes, and how it refuses bad input: two ranks training on halves of a
// batch reach the parameters one rank reaches on the whole batch (gradients averaged across ranks equal
// the whole batch's mean gradient), in every bucket layout; unused parameters keep no gradient; ranks
// whose models differ, and an unused parameter without find_unused_parameters, fail with messages that
// name the problem, on every rank, without hanging.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/distributed/ddp.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/distributed/zero.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::error_of;
using bytegrad::testing::FreshRankDevices;

namespace {

class Net : public nn::Module {
 public:
  Net(int64_t hidden, bool with_unused) {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(8, hidden, kCpu));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(hidden, 4, kCpu));
    if (with_unused) register_module("unused", std::make_shared<nn::Linear>(3, 3, kCpu));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*fc1_)(x));
    return (*fc2_)(h);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

struct Data {
  TensorDict initial;  // the model's starting state, on the CPU
  Tensor x, y;         // the whole batch (8 rows), on the CPU
};

Data make_data(bool with_unused) {
  manual_seed(7);
  Net net(16, with_unused);
  Data d;
  for (const auto& [name, t] : net.state_dict()) d.initial.insert_or_assign(name, t.clone());
  d.x = randn({8, 8}, TensorOptions{}.with_device(kCpu));
  d.y = randint(0, 4, {8}, TensorOptions{ScalarType::int64, kCpu});
  return d;
}

constexpr int kSteps = 3;

// One rank on `device`, the rows [begin, begin + count) of the batch, optionally through DDP.
// With `zero`, a ZeroRedundancyOptimizer over the same SGD (each rank steps its partition).
std::vector<std::vector<double>> train(const Data& d, Device device, ProcessGroup* pg, const DDPOptions& options,
                                       int64_t begin, int64_t count, bool with_unused,
                                       std::optional<ZeroOptions> zero = std::nullopt) {
  auto net = std::make_shared<Net>(16, with_unused);
  net->load_state_dict(d.initial);
  net->to(device);
  std::unique_ptr<DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<DistributedDataParallel>(net, *pg, options);
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9};
  std::unique_ptr<optim::Optimizer> owned;
  if (zero) {
    owned = std::make_unique<ZeroRedundancyOptimizer>(
        net->parameters(), *pg,
        [&](std::vector<Tensor> mine) -> std::unique_ptr<optim::Optimizer> {
          if (mine.empty()) return nullptr;
          return std::make_unique<optim::SGD>(std::move(mine), sgd);
        },
        *zero);
  } else {
    owned = std::make_unique<optim::SGD>(net->parameters(), sgd);
  }
  optim::Optimizer& opt = *owned;
  const Tensor x = d.x.narrow(0, begin, count).to(device);
  const Tensor y = d.y.narrow(0, begin, count).to(device);
  for (int step = 0; step < kSteps; ++step) {
    Tensor out = ddp ? (*ddp)(x) : (*net)(x);
    cross_entropy(out, y).backward();
    opt.step();
    opt.zero_grad();
  }
  return testing::parameter_values(net->parameters());
}

double max_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k) worst = std::max(worst, std::abs(a[i][k] - b[i][k]));
  }
  return worst;
}

}  // namespace

TEST_CASE("two DDP ranks on half batches reach one rank's parameters on the whole batch, in every bucket layout") {
  const Data d = make_data(false);
  testing::FreshDevice one(kSim, testing::small_card());
  const auto whole = train(d, kSim, nullptr, {}, 0, 8, false);
  struct Layout {
    const char* name;
    DDPOptions options;
  };
  for (const Layout& layout : {Layout{"default (one bucket, then rebuilt)", {}},
                               Layout{"gradient_as_bucket_view", {.gradient_as_bucket_view = true}},
                               Layout{"a bucket per parameter (cap 1e-6 MB)", {.bucket_cap_mb = 1e-6}},
                               Layout{"static_graph", {.static_graph = true}},
                               Layout{"find_unused_parameters", {.find_unused_parameters = true}}}) {
    CAPTURE(layout.name);
    FreshRankDevices fresh(2, DeviceType::sim);
    std::vector<std::vector<std::vector<double>>> ranks(2);
    run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
      ranks[pg.rank()] = train(d, pg.device(), &pg, layout.options, pg.rank() * 4, 4, false);
    });
    CHECK(max_difference(ranks[0], ranks[1]) == 0.0);  // every rank applies the same averaged gradient
    CHECK(max_difference(ranks[0], whole) < 1e-6);
  }
}

TEST_CASE("find_unused_parameters: an unused layer keeps no gradient and the rest trains as one rank would") {
  const Data d = make_data(true);
  testing::FreshDevice one(kSim, testing::small_card());
  const auto whole = train(d, kSim, nullptr, {}, 0, 8, true);
  FreshRankDevices fresh(2, DeviceType::sim);
  std::vector<std::vector<std::vector<double>>> ranks(2);
  std::vector<int> unused_grad_defined(2, 1);  // not vector<bool>: its bits share a word between the rank threads
  run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
    ranks[pg.rank()] = train(d, pg.device(), &pg, {.find_unused_parameters = true}, pg.rank() * 4, 4, true);
    auto net = std::make_shared<Net>(16, true);
    net->to(pg.device());
    DistributedDataParallel ddp(net, pg, {.find_unused_parameters = true});
    Tensor x = zeros({2, 8}, TensorOptions{}.with_device(pg.device()));
    ddp(x).sum().backward();
    unused_grad_defined[pg.rank()] = net->named_parameters().back().second.grad().defined();
  });
  CHECK(max_difference(ranks[0], whole) < 1e-6);
  CHECK_FALSE(unused_grad_defined[0]);
  CHECK_FALSE(unused_grad_defined[1]);
}

TEST_CASE("DDP refuses ranks whose models differ, naming the parameter, and no rank hangs") {
  {
    FreshRankDevices fresh(2, DeviceType::sim);
    std::vector<std::string> errors(2);
    run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
      auto net = std::make_shared<Net>(pg.rank() == 0 ? 16 : 17, false);
      net->to(pg.device());
      errors[pg.rank()] = error_of([&] { DistributedDataParallel ddp(net, pg); });
    });
    // Rank 1's first layer has 17 outputs where rank 0's has 16: parameter 0 (fc1.weight) is [17, 8] there.
    CHECK_MESSAGE(errors[1].find("parameter 0 has sizes [17, 8]") != std::string::npos, errors[1]);
    CHECK_MESSAGE(errors[1].find("sizes [16, 8] and strides [8, 1] on rank 0") != std::string::npos, errors[1]);
    // Rank 0 matched its own shapes; its next collective finds rank 1 gone instead of waiting for it.
    CHECK_MESSAGE(errors[0].find("rank 1") != std::string::npos, errors[0]);
  }
  {
    FreshRankDevices fresh(2, DeviceType::sim);
    std::vector<std::string> errors(2);
    run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
      auto net = std::make_shared<Net>(16, pg.rank() == 1);
      net->to(pg.device());
      errors[pg.rank()] = error_of([&] { DistributedDataParallel ddp(net, pg); });
    });
    // Rank 1 has an extra Linear(3, 3): 6 parameters against 4; every rank sees it.
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK_MESSAGE(errors[r].find("the ranks' parameter counts differ (rank 0: 4, rank 1: 6)") != std::string::npos,
                    errors[r]);
    }
  }
}

TEST_CASE("an unused parameter without find_unused_parameters: the next forward says what to do") {
  FreshRankDevices fresh(2, DeviceType::sim);
  std::vector<std::string> errors(2);
  run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
    auto net = std::make_shared<Net>(16, true);
    net->to(pg.device());
    DistributedDataParallel ddp(net, pg);
    Tensor x = zeros({2, 8}, TensorOptions{}.with_device(pg.device()));
    ddp(x).sum().backward();  // `unused` gets no gradient: its bucket never fills
    errors[pg.rank()] = error_of([&] { ddp(x); });
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(errors[r].find("previous iteration's gradient reduction never finished") != std::string::npos);
    CHECK(errors[r].find("(indices 4, 5)") != std::string::npos);  // unused.weight and unused.bias
    CHECK(errors[r].find("find_unused_parameters = true") != std::string::npos);
  }
}

TEST_CASE("DDP refuses a module on another device than its group's") {
  FreshRankDevices fresh(2, DeviceType::sim);
  std::vector<std::string> errors(2);
  run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
    auto net = std::make_shared<Net>(16, false);  // left on the CPU
    errors[pg.rank()] = error_of([&] { DistributedDataParallel ddp(net, pg); });
  });
  CHECK_MESSAGE(
      errors[0].find(
          "parameter fc1.weight is on cpu, but this rank's process group uses sim: move the module there first") !=
          std::string::npos,
      errors[0]);
}

// ZeRO-1 with and without parameters_as_bucket_view: the same parameters as one rank on the whole batch.
// With bucket views every parameter reads its rank's bucket, packed in the partition's order, and the
// constructor frees each parameter's old block as the parameter moves into its bucket.
TEST_CASE("ZeroRedundancyOptimizer, with and without parameters_as_bucket_view, trains as one rank would") {
  const Data d = make_data(false);
  testing::FreshDevice one(kSim, testing::small_card());
  const auto whole = train(d, kSim, nullptr, {}, 0, 8, false);
  for (bool bucket_view : {false, true}) {
    CAPTURE(bucket_view);
    FreshRankDevices fresh(2, DeviceType::sim);
    std::vector<std::vector<std::vector<double>>> ranks(2);
    run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
      ranks[pg.rank()] = train(d, pg.device(), &pg, {}, pg.rank() * 4, 4, false,
                               ZeroOptions{.parameters_as_bucket_view = bucket_view});
    });
    CHECK(max_difference(ranks[0], ranks[1]) == 0.0);
    CHECK(max_difference(ranks[0], whole) < 1e-6);
  }
}

TEST_CASE("parameters_as_bucket_view: one flat bucket per rank, parameters re-pointed into it, old blocks freed") {
  FreshRankDevices fresh(2, DeviceType::sim);
  struct Seen {
    std::vector<int64_t> bucket_numel;
    int64_t allocated_before = 0, allocated_after = 0;
    bool views = true, values_kept = true;
  };
  std::vector<Seen> seen(2);
  run_ranks(2, DeviceType::sim, [&](ProcessGroup& pg) {
    Seen& s = seen[pg.rank()];
    // fc1 8x16 + 16, fc2 16x4 + 4: partition largest first to the least-loaded rank: fc1.weight (128) to
    // rank 0, fc2.weight (64) to rank 1, fc1.bias (16) to rank 1, fc2.bias (4) to rank 1.
    manual_seed(3);
    auto net = std::make_shared<Net>(16, false);
    net->to(pg.device());
    std::vector<std::vector<double>> before;
    for (const Tensor& p : net->parameters()) before.push_back(p.detach().cpu().tolist());
    s.allocated_before = memory_allocated(pg.device());
    ZeroRedundancyOptimizer opt(
        net->parameters(), pg,
        [](std::vector<Tensor> mine) { return std::make_unique<optim::SGD>(std::move(mine), optim::SGDOptions{}); },
        ZeroOptions{.parameters_as_bucket_view = true});
    s.allocated_after = memory_allocated(pg.device());
    for (const Tensor& b : opt.buckets()) s.bucket_numel.push_back(b.numel());
    for (size_t r = 0; r < opt.partition().size(); ++r) {
      int64_t offset = 0;
      for (const Tensor& p : opt.partition()[r]) {
        s.views = s.views && p.shares_storage_with(opt.buckets()[r]) && p.storage_offset() == offset;
        offset += p.numel();
      }
    }
    const auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      s.values_kept = s.values_kept && params[i].detach().cpu().tolist() == before[i];
  });
  for (const Seen& s : seen) {
    CHECK(s.bucket_numel == std::vector<int64_t>{128, 64 + 16 + 4});
    CHECK(s.views);
    CHECK(s.values_kept);
    // Before: blocks of 512 (128 floats), 512 (16), 512 (64 floats = 256 B), 512 (4) = 2048 B; after: the
    // buckets' 512 (128 floats) and 512 (84 floats = 336 B) = 1024 B.
    CHECK(s.allocated_before == 4 * 512);
    CHECK(s.allocated_after == 2 * 512);
  }
}
