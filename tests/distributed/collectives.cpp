// The collectives' results on the threads backend: 2 and 4 ranks on sim (values, every ReduceOp, several
// dtypes, bit-identical results in rank order), on cpu, and on meta (shapes and accounting only).
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <stdexcept>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/tensor/ops.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::FreshRankDevices;

namespace {

using Values = std::vector<double>;

// Runs `body` on every rank of a threads group and returns what each rank's body returned.
template <typename Body>
std::vector<Values> on_ranks(int world_size, DeviceType type, Body body) {
  std::vector<Values> results(world_size);
  run_ranks(world_size, type, [&](ProcessGroup& pg) { results[pg.rank()] = body(pg); });
  return results;
}

// Rank r's tensor for the reductions: [r+1, 10(r+1), -(r+1), 0.5(r+1)].
Tensor rank_values(const ProcessGroup& pg, ScalarType dtype = ScalarType::float32) {
  const double k = pg.rank() + 1;
  return from_vector({k, 10 * k, -k, 0.5 * k}, {4}, TensorOptions{dtype, pg.device()});
}

}  // namespace

TEST_CASE("all_reduce: every ReduceOp on 2 and 4 sim ranks, the same result on every rank") {
  struct Expected {
    ReduceOp op;
    Values two, four;
  };
  // Ranks hold k = r+1 times [1, 10, -1, 0.5]; k runs over 1..2 (two ranks) or 1..4 (four).
  const std::array<Expected, 5> table{{
      // sum: 1+2 = 3; 1+2+3+4 = 10
      {ReduceOp::sum, {3, 30, -3, 1.5}, {10, 100, -10, 5}},
      // avg: 3/2; 10/4
      {ReduceOp::avg, {1.5, 15, -1.5, 0.75}, {2.5, 25, -2.5, 1.25}},
      // product: 1*2 = 2, 10*20 = 200, (-1)(-2) = 2, 0.5*1 = 0.5; 4! = 24, 10*20*30*40 = 240000,
      // (-1)(-2)(-3)(-4) = 24, 0.5*1*1.5*2 = 1.5
      {ReduceOp::product, {2, 200, 2, 0.5}, {24, 240000, 24, 1.5}},
      {ReduceOp::min, {1, 10, -2, 0.5}, {1, 10, -4, 0.5}},
      {ReduceOp::max, {2, 20, -1, 1}, {4, 40, -1, 2}},
  }};
  FreshRankDevices fresh(4, DeviceType::sim);
  for (const Expected& row : table) {
    for (int world : {2, 4}) {
      CAPTURE(reduce_op_name(row.op));
      CAPTURE(world);
      const auto results = on_ranks(world, DeviceType::sim, [&](ProcessGroup& pg) {
        Tensor x = rank_values(pg);
        const bool returned_work = pg.all_reduce(x, row.op) != nullptr;
        Values seen = x.tolist();
        seen.push_back(returned_work ? 1 : 0);  // synchronous: no Work, as torch.distributed returns None
        return seen;
      });
      Values expected = world == 2 ? row.two : row.four;
      expected.push_back(0);
      for (const Values& r : results) CHECK(r == expected);
    }
  }
}

TEST_CASE("all_reduce sums in rank order, so every rank gets the same bits") {
  // float32 ranks hold 1e8, 1, -1e8, 1. In rank order ((1e8 + 1) - 1e8) + 1: 1e8 + 1 rounds back to 1e8
  // (float32's spacing there is 8), so the sum is 0 + 1 = 1, not the exact 2, on every rank.
  FreshRankDevices fresh(4, DeviceType::sim);
  const std::array<double, 4> held{1e8, 1, -1e8, 1};
  const auto results = on_ranks(4, DeviceType::sim, [&](ProcessGroup& pg) {
    Tensor x = full({3}, held[pg.rank()], device(pg.device()));
    pg.all_reduce(x);
    return x.tolist();
  });
  for (const Values& r : results) CHECK(r == Values{1, 1, 1});
}

TEST_CASE("all_reduce on int64, bool (sum is or, product is and) and bfloat16") {
  FreshRankDevices fresh(2, DeviceType::sim);
  const auto ints = on_ranks(2, DeviceType::sim, [](ProcessGroup& pg) {
    Tensor x = rank_values(pg, ScalarType::int64);  // [1, 10, -1, 0] and [2, 20, -2, 1] (0.5k truncated)
    pg.all_reduce(x);
    return x.tolist();
  });
  for (const Values& r : ints) CHECK(r == Values{3, 30, -3, 1});

  const auto bools = on_ranks(2, DeviceType::sim, [](ProcessGroup& pg) {
    const Values mine = pg.rank() == 0 ? Values{1, 0, 0, 1} : Values{0, 0, 1, 1};
    Tensor any = from_vector(mine, {4}, TensorOptions{ScalarType::bool_, pg.device()});
    Tensor all = from_vector(mine, {4}, TensorOptions{ScalarType::bool_, pg.device()});
    pg.all_reduce(any, ReduceOp::sum);
    pg.all_reduce(all, ReduceOp::product);
    Values both = any.tolist();
    for (double v : all.tolist()) both.push_back(v);
    return both;
  });
  for (const Values& r : bools) CHECK(r == Values{1, 0, 1, 1, /*and:*/ 0, 0, 0, 1});

  const auto halves = on_ranks(2, DeviceType::sim, [](ProcessGroup& pg) {
    Tensor x = rank_values(pg, ScalarType::bfloat16);
    pg.all_reduce(x, ReduceOp::avg);
    return x.tolist();
  });
  for (const Values& r : halves) CHECK(r == Values{1.5, 15, -1.5, 0.75});  // all exact in bfloat16
}

TEST_CASE("broadcast, all_gather_into_tensor and reduce_scatter_tensor on 2 and 4 sim ranks") {
  FreshRankDevices fresh(4, DeviceType::sim);
  for (int world : {2, 4}) {
    CAPTURE(world);
    const int src = world - 1;
    const auto broadcast = on_ranks(world, DeviceType::sim, [&](ProcessGroup& pg) {
      Tensor x = rank_values(pg);
      pg.broadcast(x, src);
      return x.tolist();
    });
    const double k = src + 1;
    for (const Values& r : broadcast) CHECK(r == Values{k, 10 * k, -k, 0.5 * k});

    // Rank r gives [r+1, r+1, r+1]; the output is every rank's in rank order, here shaped [world, 3].
    Values gathered;
    for (int r = 0; r < world; ++r) gathered.insert(gathered.end(), 3, r + 1);
    const auto gather = on_ranks(world, DeviceType::sim, [&](ProcessGroup& pg) {
      Tensor out = empty({world, 3}, device(pg.device()));
      pg.all_gather_into_tensor(out, full({3}, pg.rank() + 1, device(pg.device())));
      return out.tolist();
    });
    for (const Values& r : gather) CHECK(r == gathered);
    // In place, as FSDP does it: the input is this rank's slice of the output.
    const auto in_place = on_ranks(world, DeviceType::sim, [&](ProcessGroup& pg) {
      Tensor out = zeros({world * 3}, device(pg.device()));
      Tensor mine = out.narrow(0, pg.rank() * 3, 3);
      mine.fill_(pg.rank() + 1);
      pg.all_gather_into_tensor(out, mine);
      return out.tolist();
    });
    for (const Values& r : in_place) CHECK(r == gathered);

    // Rank r gives (r+1) * [0, 1, ..., 2*world-1]; the sum over ranks is (1+...+world) * [0, 1, ...], and
    // rank r keeps elements 2r and 2r+1 of it.
    const double factor = world * (world + 1) / 2.0;  // 3 for two ranks, 10 for four
    const auto scatter = on_ranks(world, DeviceType::sim, [&](ProcessGroup& pg) {
      Tensor in = arange(2.0 * world, device(pg.device())).mul(pg.rank() + 1.0);
      Tensor out = empty({2}, device(pg.device()));
      pg.reduce_scatter_tensor(out, in);
      return out.tolist();
    });
    for (int r = 0; r < world; ++r) CHECK(scatter[r] == Values{2 * r * factor, (2 * r + 1) * factor});
  }
}

TEST_CASE("async collectives give the same values, once waited for") {
  FreshRankDevices fresh(4, DeviceType::sim);
  const auto results = on_ranks(4, DeviceType::sim, [](ProcessGroup& pg) {
    Tensor x = rank_values(pg);
    auto work = pg.all_reduce(x, ReduceOp::sum, /*async_op=*/true);
    if (!work) throw std::logic_error("an async all_reduce returned no Work");
    work->wait();
    Values seen = x.tolist();
    seen.push_back(work->result().at(0).shares_storage_with(x) ? 1 : 0);  // result() is the tensor reduced
    auto barrier = pg.barrier(/*async_op=*/true);
    barrier->wait();
    return seen;
  });
  for (const Values& r : results) CHECK(r == Values{10, 100, -10, 5, 1});
}

TEST_CASE("collectives on cpu ranks and on meta ranks") {
  const auto cpu = on_ranks(2, DeviceType::cpu, [](ProcessGroup& pg) {
    Tensor x = rank_values(pg);
    auto work = pg.all_reduce(x, ReduceOp::max, /*async_op=*/true);
    Values seen = x.tolist();
    seen.push_back(work->is_completed() ? 1 : 0);  // no streams on cpu: done when the call returns
    seen.push_back(pg.device() == kCpu ? 1 : 0);
    pg.barrier();
    return seen;
  });
  for (const Values& r : cpu) CHECK(r == Values{2, 20, -1, 1, 1, 1});

  // meta has no values: the collectives check the ranks' calls and account, nothing more.
  FreshRankDevices fresh(4, DeviceType::meta);
  const auto meta = on_ranks(4, DeviceType::meta, [](ProcessGroup& pg) {
    Tensor x = empty({1024}, device(pg.device()));
    Tensor gathered = empty({4 * 1024}, device(pg.device()));
    pg.all_reduce(x);
    pg.broadcast(x, 0);
    pg.all_gather_into_tensor(gathered, x);
    pg.reduce_scatter_tensor(x, gathered);
    pg.barrier();
    return Values{static_cast<double>(memory_allocated(pg.device())), static_cast<double>(pg.collectives_issued()),
                  static_cast<double>(pg.device().index)};
  });
  // 1024 * 4 = 4096 B and 4 * 4096 = 16384 B, both small blocks (<= 1 MiB): 20480 B live; 5 collectives.
  for (int r = 0; r < 4; ++r) CHECK(meta[r] == Values{20480, 5, static_cast<double>(r)});  // on meta:r
}

TEST_CASE("rank threads start with fresh per-thread state") {
  // Grad mode and the current stream are per thread: a rank thread starts with grad mode on and the
  // default stream current, whatever the launching thread set.
  FreshRankDevices fresh(2, DeviceType::sim);
  NoGradGuard no_grad;
  StreamGuard side(get_stream_from_pool(Device{DeviceType::sim, 0}));
  const auto results = on_ranks(2, DeviceType::sim, [](ProcessGroup& pg) {
    return Values{grad_mode_enabled() ? 1.0 : 0.0, current_stream(pg.device()).is_default() ? 1.0 : 0.0};
  });
  for (const Values& r : results) CHECK(r == Values{1, 1});
  CHECK_FALSE(grad_mode_enabled());
}

// new_group / split_group (torch.distributed's names): collectives on a subgroup move data among its ranks
// only; ranks numbered by their place among the group's sorted ranks; a rank may hold several subgroups.
Values subgroup_collectives(ProcessGroup& pg) {
  const Device d = pg.device();
  auto pair = pg.split_group({{0, 1}, {2, 3}});
  Tensor x = full({2}, pg.rank() + 1, device(d));
  pair->all_reduce(x);  // ranks 0, 1: 1 + 2; ranks 2, 3: 3 + 4
  Tensor g = empty({4}, device(d));
  pair->all_gather_into_tensor(g, full({2}, 10.0 * pg.rank(), device(d)));
  Values out = x.tolist();
  for (double v : g.tolist()) out.push_back(v);
  out.push_back(pair->rank());
  out.push_back(pair->size());
  if (pg.rank() == 1 || pg.rank() == 3) {  // made by its members only; the others need not call
    auto odd = pg.new_group({3, 1});
    Tensor y = full({1}, pg.rank(), device(d));
    odd->broadcast(y, 1);  // the group's rank 1: world rank 3
    out.push_back(y.tolist().at(0));
    out.push_back(odd->rank());
  }
  pg.all_reduce(x);  // the world group still works after its subgroups' collectives
  out.push_back(x.tolist().at(0));
  return out;
}

TEST_CASE("new_group and split_group: collectives on a subgroup move data among its ranks only") {
  for (DeviceType type : {DeviceType::sim, DeviceType::cpu}) {
    FreshRankDevices fresh(4, type);
    const auto got = on_ranks(4, type, subgroup_collectives);
    // The world all_reduce of the pairs' sums: 3 + 3 + 7 + 7.
    CHECK(got[0] == Values{3, 3, 0, 0, 10, 10, 0, 2, 20});
    CHECK(got[1] == Values{3, 3, 0, 0, 10, 10, 1, 2, 3, 0, 20});
    CHECK(got[2] == Values{7, 7, 20, 20, 30, 30, 0, 2, 20});
    CHECK(got[3] == Values{7, 7, 20, 20, 30, 30, 1, 2, 3, 1, 20});
  }
}

// The same on four GPUs with NCCL (ctest distributed_subgroups_cuda, label multigpu): each subgroup is a
// communicator of its own, made from a unique id its rank 0 draws.
TEST_CASE("new_group and split_group on four GPUs with NCCL: the same values as on sim") {
  if (cuda_device_count() < 4) {
    MESSAGE("skipped: needs 4 GPUs, found " << cuda_device_count());
    return;
  }
  const auto got = on_ranks(4, DeviceType::cuda, subgroup_collectives);
  CHECK(got[0] == Values{3, 3, 0, 0, 10, 10, 0, 2, 20});
  CHECK(got[1] == Values{3, 3, 0, 0, 10, 10, 1, 2, 3, 0, 20});
  CHECK(got[2] == Values{7, 7, 20, 20, 30, 30, 0, 2, 20});
  CHECK(got[3] == Values{7, 7, 20, 20, 30, 30, 1, 2, 3, 1, 20});
}

TEST_CASE("new_group refuses a rank not in the group, a rank listed twice, one out of range, no ranks") {
  auto error_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  auto pg = make_fake_process_group(0, 4, Device{DeviceType::meta, 0});
  CHECK(error_of([&] { pg->new_group({1, 3}); }).find("rank 0 is not a member of the new group") != std::string::npos);
  CHECK(error_of([&] { pg->new_group({0, 1, 1}); }).find("rank 1 is listed twice") != std::string::npos);
  CHECK(error_of([&] {
          pg->new_group({0, 4});
        }).find("rank 4 is not in this group (ranks 0 to 3)") != std::string::npos);
  CHECK(error_of([&] { pg->new_group({}); }).find("no ranks") != std::string::npos);
  CHECK(error_of([&] {
          pg->split_group({{1, 2}, {3}});
        }).find("this rank is in none of the 2 groups") != std::string::npos);
  CHECK(error_of([&] { pg->split_group({{0, 1}, {1, 2}}); }).find("rank 1 is in more than one") != std::string::npos);
}

TEST_CASE("fake backend: a subgroup is its rank alone at the subgroup's size, checking sizes by it") {
  auto pg = make_fake_process_group(3, 4, Device{DeviceType::meta, 0});
  auto pair = pg->split_group({{0, 1}, {2, 3}});
  CHECK(pair->rank() == 1);
  CHECK(pair->size() == 2);
  CHECK(pair->device() == pg->device());
  CHECK(pair->backend_name() == "fake");
  const TensorOptions on{ScalarType::float32, pg->device()};
  CHECK_NOTHROW(pair->all_gather_into_tensor(empty({8}, on), empty({4}, on)));
  CHECK_THROWS_AS(pair->all_gather_into_tensor(empty({16}, on), empty({4}, on)), std::invalid_argument);
}

TEST_CASE("a threads subgroup whose member fails makes the others fail at once, not time out") {
  FreshRankDevices fresh(4, DeviceType::sim);
  std::vector<std::string> errors(4);
  CHECK_THROWS_AS(run_ranks(4, DeviceType::sim,
                            [&](ProcessGroup& pg) {
                              auto pair = pg.split_group({{0, 1}, {2, 3}});
                              if (pg.rank() == 1) throw std::runtime_error("rank 1 stops");
                              Tensor x = zeros({1}, device(pg.device()));
                              try {
                                pair->all_reduce(x);
                              } catch (const CollectiveError& e) {
                                errors[static_cast<size_t>(pg.rank())] = e.what();
                                throw;
                              }
                            }),
                  RankFailure);
  CHECK(!errors[0].empty());  // rank 1 aborted (or will never arrive), at once
  CHECK(errors[2].empty());
  CHECK(errors[3].empty());
}
