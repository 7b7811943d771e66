// Bad input never hangs: calls that differ across ranks fail on every rank with every rank's call named; a
// rank that throws, leaves or never arrives makes the others fail (at once, or after the group's timeout)
// naming it and the collective; arguments a rank gets wrong are refused before anything is queued. Each
// case finishes in well under a second.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/distributed/nccl.h"
#include "bytegrad/distributed/threads.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/ops.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::error_of;
using bytegrad::testing::FreshRankDevices;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

const ProcessGroupOptions kShortTimeout{.timeout = 100ms};
const ProcessGroupOptions kLongTimeout{.timeout = 20s};  // a case that finishes fast did not wait for it

struct Outcome {
  std::vector<std::string> messages;  // what each rank's collective threw
  std::string failure;                // what run_ranks threw ("" if nothing)
  int failed_rank = -1;
  double seconds = 0;
};

// Runs `body` on every rank, each rank's exception caught and kept (so the ranks end normally).
template <typename Body>
Outcome caught_on_ranks(int world_size, ProcessGroupOptions options, Body body) {
  FreshRankDevices fresh(world_size, DeviceType::sim);
  Outcome outcome;
  outcome.messages.resize(world_size);
  const auto start = Clock::now();
  run_ranks(
      world_size, DeviceType::sim, [&](ProcessGroup& pg) { outcome.messages[pg.rank()] = error_of([&] { body(pg); }); },
      options);
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

// Runs `body` on every rank, uncaught: run_ranks's own exception is the outcome.
template <typename Body>
Outcome failing_ranks(int world_size, ProcessGroupOptions options, Body body) {
  FreshRankDevices fresh(world_size, DeviceType::sim);
  Outcome outcome;
  const auto start = Clock::now();
  try {
    run_ranks(world_size, DeviceType::sim, body, options);
  } catch (const RankFailure& e) {
    outcome.failure = e.what();
    outcome.failed_rank = e.rank();
  }
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

Tensor floats(const ProcessGroup& pg, int64_t n) { return zeros({n}, device(pg.device())); }

}  // namespace

TEST_CASE("calls that differ across ranks fail on every rank, naming each rank's call") {
  const Outcome sizes = caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    pg.all_reduce(pg.rank() == 0 ? zeros({2, 2}, device(pg.device())) : floats(pg, 8));
  });
  for (const std::string& m : sizes.messages)
    CHECK(m ==
          "collective #1: the ranks' calls differ: rank 0: all_reduce(float32 [2, 2], sum); rank 1: "
          "all_reduce(float32 [8], sum)");
  CHECK(sizes.seconds < 0.5);

  const Outcome dtypes = caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    pg.broadcast(zeros({4}, TensorOptions{pg.rank() == 0 ? ScalarType::float32 : ScalarType::int64, pg.device()}), 0);
  });
  for (const std::string& m : dtypes.messages)
    CHECK(m ==
          "collective #1: the ranks' calls differ: rank 0: broadcast(float32 [4], src 0); rank 1: "
          "broadcast(int64 [4], src 0)");

  const Outcome ops = caught_on_ranks(4, kLongTimeout, [](ProcessGroup& pg) {
    Tensor x = floats(pg, 4);
    pg.all_reduce(x);  // collective #1 agrees
    pg.all_reduce(x, pg.rank() == 2 ? ReduceOp::max : ReduceOp::sum);
  });
  for (const std::string& m : ops.messages)
    CHECK(m ==
          "collective #2: the ranks' calls differ: rank 0: all_reduce(float32 [4], sum); rank 1: all_reduce(float32 "
          "[4], sum); rank 2: all_reduce(float32 [4], max); rank 3: all_reduce(float32 [4], sum)");

  const Outcome kinds = caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    Tensor x = floats(pg, 4);
    if (pg.rank() == 0) pg.broadcast(x, 1);
    else pg.barrier();
  });
  for (const std::string& m : kinds.messages)
    CHECK(m == "collective #1: the ranks' calls differ: rank 0: broadcast(float32 [4], src 1); rank 1: barrier()");

  const Outcome roots =
      caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) { pg.broadcast(floats(pg, 4), pg.rank()); });
  for (const std::string& m : roots.messages)
    CHECK(m.find("rank 0: broadcast(float32 [4], src 0); rank 1: broadcast(float32 [4], src 1)") != std::string::npos);

  const Outcome gathers = caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    const int64_t n = pg.rank() == 0 ? 2 : 3;
    pg.all_gather_into_tensor(floats(pg, 2 * n), floats(pg, n));
  });
  for (const std::string& m : gathers.messages)
    CHECK(m.find("rank 0: all_gather_into_tensor(float32 [2] -> [4]); rank 1: all_gather_into_tensor(float32 [3] -> "
                 "[6])") != std::string::npos);
  // After an error every rank counts the same: the next collective agrees again.
  const Outcome recovered = caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    std::string ignored = error_of([&] { pg.all_reduce(floats(pg, pg.rank() + 1)); });
    pg.all_reduce(floats(pg, 4));
  });
  for (const std::string& m : recovered.messages) CHECK_MESSAGE(m.empty(), m);
}

TEST_CASE("a rank that throws makes the others fail at once, and run_ranks names it") {
  const Outcome outcome = failing_ranks(4, kLongTimeout, [](ProcessGroup& pg) {
    if (pg.rank() == 1) throw std::runtime_error("boom");
    Tensor x = floats(pg, 4);
    pg.all_reduce(x);
  });
  CHECK(outcome.failed_rank == 1);
  CHECK(outcome.failure == "rank 1 of 4 failed: boom");
  CHECK(outcome.seconds < 0.5);  // not the 20 s timeout

  const Outcome peers = caught_on_ranks(3, kLongTimeout, [](ProcessGroup& pg) {
    if (pg.rank() == 2) {
      pg.abort("rank 2 failed: its data loader broke");
      return;
    }
    pg.all_reduce(floats(pg, 4));
  });
  for (int r : {0, 1})
    CHECK(peers.messages[r] == "all_reduce #1 (float32 [4], sum) on rank " + std::to_string(r) +
                                   ": the process group was aborted: rank 2 failed: its data loader broke");
  CHECK(peers.seconds < 0.5);
}

TEST_CASE("a rank that never arrives makes the others time out, naming it and the collective") {
  const Outcome outcome = caught_on_ranks(2, kShortTimeout, [](ProcessGroup& pg) {
    if (pg.rank() == 1) std::this_thread::sleep_for(300ms);  // late: the group is aborted when it comes
    Tensor x = floats(pg, 4);
    pg.all_reduce(x);
  });
  CHECK(outcome.messages[0] ==
        "all_reduce #1 (float32 [4], sum) on rank 0 timed out after 100 ms waiting for rank 1 (arrived: rank 0)");
  CHECK(outcome.messages[1] ==
        "all_reduce #1 (float32 [4], sum) on rank 1: the process group was aborted: all_reduce #1 (float32 [4], sum) "
        "on rank 0 timed out after 100 ms waiting for rank 1 (arrived: rank 0)");
  CHECK(outcome.seconds < 0.6);

  // Four ranks, rank 3 missing: run_ranks rethrows the first timeout.
  const Outcome four = failing_ranks(4, kShortTimeout, [](ProcessGroup& pg) {
    if (pg.rank() == 3) std::this_thread::sleep_for(250ms);
    pg.barrier();
  });
  CHECK(four.failed_rank >= 0);
  CHECK(four.failed_rank <= 2);
  // Which of ranks 0-2 timed out, which had arrived by then, and whether run_ranks reports the rank that
  // timed out or one that saw the abort first ("...: the process group was aborted: <the timeout>") depend
  // on thread timing (under a sanitizer one of them can still be starting): the message must hold the
  // timeout of one of ranks 0-2 and name rank 3 among those it waited for.
  const std::string timed_out = " timed out after 100 ms waiting for ";
  const auto at = four.failure.find(timed_out);
  REQUIRE_MESSAGE(at != std::string::npos, four.failure);
  const std::string before = four.failure.substr(0, at);
  const bool named = before.ends_with("barrier #1 on rank 0") || before.ends_with("barrier #1 on rank 1") ||
                     before.ends_with("barrier #1 on rank 2");
  CHECK_MESSAGE(named, four.failure);
  const auto waited_end = four.failure.find(" (arrived: ", at);
  REQUIRE_MESSAGE(waited_end != std::string::npos, four.failure);
  const std::string waited = four.failure.substr(at + timed_out.size(), waited_end - at - timed_out.size());
  CHECK_MESSAGE(waited.size() >= 1, four.failure);
  CHECK_MESSAGE(waited.back() == '3', four.failure);  // "rank 3", or "ranks 2, 3"
  CHECK(four.seconds < 0.6);
}

TEST_CASE("a rank that finishes without the collective makes the others fail at once") {
  const Outcome outcome = caught_on_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    if (pg.rank() == 1) return;
    Tensor x = floats(pg, 4);
    pg.all_reduce(x);
  });
  CHECK(outcome.messages[0] ==
        "all_reduce #1 (float32 [4], sum) on rank 0: rank 1 will never arrive: it shut down (its function returned) "
        "before calling this collective");
  CHECK(outcome.seconds < 0.5);
}

TEST_CASE("arguments a rank gets wrong are refused with PyTorch's messages") {
  bytegrad::testing::FreshDevice fresh_sim0(kSim, bytegrad::testing::small_card());
  bytegrad::testing::FreshDevice fresh(Device{DeviceType::sim, 1}, bytegrad::testing::small_card());
  auto pg = make_fake_process_group(1, 4, Device{DeviceType::sim, 1});
  const TensorOptions here = device(pg->device());
  Tensor x = zeros({4}, here);

  CHECK_THROWS_WITH_AS(pg->all_reduce(zeros({4}, device(kSim))),
                       "all_reduce on rank 1: the input tensor is on sim, but rank 1 of this fake process group uses "
                       "sim:1",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->all_reduce(Tensor()), "all_reduce on rank 1: the input tensor is undefined",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->all_reduce(zeros({4, 4}, here).t()),
                       "all_reduce on rank 1: Tensors must be contiguous (the input)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->broadcast(x, 4), "broadcast on rank 1: invalid root rank: 4 (this group's ranks are 0 to 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->broadcast(x, -1),
                       "broadcast on rank 1: invalid root rank: -1 (this group's ranks are 0 to 3)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->all_gather_into_tensor(zeros({12}, here), x),
                       "all_gather_into_tensor on rank 1: output tensor size must be equal to world_size times input "
                       "tensor size (12 elements, expected 4 * 4)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->all_gather_into_tensor(zeros({16}, TensorOptions{ScalarType::float64, pg->device()}), x),
                       "all_gather_into_tensor on rank 1: output tensor must have the same type as input tensor "
                       "(float64 vs float32)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->reduce_scatter_tensor(x, zeros({15}, here)),
                       "reduce_scatter_tensor on rank 1: input tensor must be the same size as output size times "
                       "world size (15 elements, expected 4 * 4)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg->all_reduce(zeros({4}, TensorOptions{ScalarType::bool_, pg->device()}), ReduceOp::avg),
                       "all_reduce on rank 1: Cannot use ReduceOp.AVG with boolean inputs", std::invalid_argument);
  CHECK(pg->collectives_issued() == 0);  // nothing was counted or queued
  CHECK_FALSE(pg->collective_stream());

  CHECK_THROWS_WITH_AS(make_fake_process_group(4, 4, kSim),
                       "process group: rank 4 is not in a group of 4 (ranks 0 to 3)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_fake_process_group(0, 2, kSim, ProcessGroupOptions{.timeout = 0ms}),
                       "process group: the timeout must be positive, got 0 ms", std::invalid_argument);
  CHECK_THROWS_WITH_AS(run_ranks(0, DeviceType::sim, [](ProcessGroup&) {}),
                       "threads process group: world size must be at least 1, got 0", std::invalid_argument);
  CHECK_THROWS_WITH_AS(make_threads_process_groups(2, DeviceType::cuda),
                       doctest::Contains("the threads backend runs ranks on sim, meta or cpu, not cuda"),
                       std::invalid_argument);
  // run_ranks on cuda is NCCL's, one GPU per rank: refused before any thread starts when GPUs are missing.
  if (cuda_device_count() < 64) {
    const char* why = nccl_available() ? "run_ranks on cuda: 64 ranks need 64 GPUs (one per rank), this process sees"
                                       : "the nccl backend is not in this build of bytegrad";
    CHECK_THROWS_WITH_AS(run_ranks(64, DeviceType::cuda, [](ProcessGroup&) {}), doctest::Contains(why),
                         std::runtime_error);
  }
}

TEST_CASE("a wrong argument on one rank of a threads group fails that rank and frees the others") {
  const Outcome outcome = failing_ranks(2, kLongTimeout, [](ProcessGroup& pg) {
    const Device wrong = pg.rank() == 1 ? Device{DeviceType::sim, 0} : pg.device();
    Tensor x = zeros({4}, device(wrong));
    pg.all_reduce(x);
  });
  CHECK(outcome.failed_rank == 1);
  CHECK(outcome.failure ==
        "rank 1 of 2 failed: all_reduce on rank 1: the input tensor is on sim, but rank 1 of this threads process "
        "group uses sim:1");
  CHECK(outcome.seconds < 0.5);
}
