// A rank that fails or stops in the middle of data-parallel training (issue 27): the other ranks fail with
// an error naming that rank and the collective they were in (DDP's gradient all_reduce in backward, its
// buffer broadcast, ZeRO's parameter broadcasts), at once when the rank throws or its group goes away,
// after the group's timeout when it merely stops coming; nothing hangs. Threads backend (run_ranks) and
// store backend (ranks meeting through the TCP store, as processes do), with short timeouts.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bytegrad/distributed/ddp.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/distributed/store.h"
#include "bytegrad/distributed/store_backend.h"
#include "bytegrad/distributed/zero.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::error_of;
using bytegrad::testing::FreshRankDevices;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Where the failing rank stops: before its first backward (the others are in backward's all_reduce) or
// before its optimizer step (the others are in ZeRO's broadcasts).
enum class Stop { before_backward, before_step };

// One DDP training step of a Linear(16, 4) with ZeRO-1 over Adam; rank `failing` throws (or sleeps for
// `stall`, when positive) at `where`.
void ddp_step(ProcessGroup& pg, int failing, Stop where, std::chrono::milliseconds stall) {
  const Device dev = pg.device();
  auto model = std::make_shared<nn::Linear>(16, 4, dev);
  DistributedDataParallel ddp(model, pg);
  ZeroRedundancyOptimizer opt(ddp.parameters(), pg, [](std::vector<Tensor> mine) -> std::unique_ptr<optim::Optimizer> {
    if (mine.empty()) return nullptr;  // a rank that owns no parameter
    return std::make_unique<optim::Adam>(std::move(mine), optim::AdamOptions{.lr = 1e-3});
  });
  auto stop_here = [&](Stop at) {
    if (pg.rank() != failing || at != where) return;
    if (stall.count() == 0) throw std::runtime_error("rank " + std::to_string(failing) + "'s data loader broke");
    std::this_thread::sleep_for(stall);
  };
  Tensor loss = ddp(ones({8, 16}, device(dev))).sum();
  stop_here(Stop::before_backward);
  loss.backward();
  stop_here(Stop::before_step);
  opt.step();
}

struct Outcome {
  std::vector<std::string> messages;  // what each rank threw
  std::string failure;                // what run_ranks threw (threads)
  double seconds = 0;
};

// The failing rank's exception leaves its function, as an uncaught one would (run_ranks aborts the group);
// the others' are kept.
Outcome on_threads(int world, ProcessGroupOptions options, int failing, Stop where, std::chrono::milliseconds stall) {
  FreshRankDevices fresh(world, DeviceType::sim);
  Outcome outcome;
  outcome.messages.resize(world);
  const auto start = Clock::now();
  outcome.failure = error_of([&] {
    run_ranks(
        world, DeviceType::sim,
        [&](ProcessGroup& pg) {
          if (pg.rank() == failing && stall.count() == 0) return ddp_step(pg, failing, where, stall);
          outcome.messages[pg.rank()] = error_of([&] { ddp_step(pg, failing, where, stall); });
        },
        options);
  });
  outcome.seconds = seconds_since(start);
  return outcome;
}

// The ranks as threads that meet only through a TCP store, each with its own group (as processes do); a
// rank that throws destroys its group while unwinding, as a process's does.
Outcome on_store(int world, std::chrono::milliseconds timeout, int failing, Stop where,
                 std::chrono::milliseconds stall) {
  FreshRankDevices fresh(world, DeviceType::sim);
  TcpStore server("127.0.0.1", 0, true, 5000ms);
  Outcome outcome;
  outcome.messages.resize(world);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      outcome.messages[r] = error_of([&] {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), false, 5000ms);
        auto pg = make_store_process_group(store, r, world, Device{DeviceType::sim, r},
                                           ProcessGroupOptions{.timeout = timeout});
        ddp_step(*pg, failing, where, stall);
      });
    });
  for (auto& t : threads) t.join();
  outcome.seconds = seconds_since(start);
  return outcome;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("threads: a rank that throws in DDP training fails the others at once, naming it and the collective") {
  // DDP's construction does 2 collectives here (the parameter-shape check, the state broadcast); the
  // Linear's two gradients fill one bucket, whose all_reduce is the third.
  const Outcome backward = on_threads(2, {.timeout = 20s}, 1, Stop::before_backward, 0ms);
  CHECK(backward.failure == "rank 1 of 2 failed: rank 1's data loader broke");
  CHECK_MESSAGE(has(backward.messages[0], "all_reduce #"), backward.messages[0]);
  CHECK_MESSAGE(has(backward.messages[0],
                    "on rank 0: the process group was aborted: rank 1 failed: rank 1's data "
                    "loader broke"),
                backward.messages[0]);
  CHECK(backward.seconds < 2);  // not the 20 s timeout

  // In ZeRO's step the others wait in the first broadcast from a parameter's owner.
  const Outcome step = on_threads(3, {.timeout = 20s}, 2, Stop::before_step, 0ms);
  for (int r : {0, 1}) {
    CAPTURE(step.messages[r]);
    CHECK(has(step.messages[r], "broadcast #"));
    CHECK(has(step.messages[r], "rank 2 failed: rank 2's data loader broke"));
  }
  CHECK(step.seconds < 2);
}

TEST_CASE("threads: a rank that stops in DDP training makes the others time out, naming it and the collective") {
  const Outcome outcome = on_threads(2, {.timeout = 150ms}, 1, Stop::before_backward, 600ms);
  CAPTURE(outcome.messages[0]);
  CHECK(has(outcome.messages[0], "all_reduce #"));
  CHECK(has(outcome.messages[0], "on rank 0 timed out after 150 ms waiting for rank 1 (arrived: rank 0)"));
  // The late rank finds the group aborted when it comes.
  CHECK(has(outcome.messages[1], "the process group was aborted"));
  CHECK(outcome.seconds < 2);
}

TEST_CASE("store: a rank that throws in DDP training fails the others at once, naming it and the collective") {
  const Outcome outcome = on_store(2, 20000ms, 1, Stop::before_backward, 0ms);
  CHECK(outcome.messages[1] == "rank 1's data loader broke");
  CAPTURE(outcome.messages[0]);
  CHECK(has(outcome.messages[0], "all_reduce #"));
  CHECK(has(outcome.messages[0], "on rank 0: rank 1 will never arrive: it shut down"));
  CHECK(outcome.seconds < 5);  // not the 20 s timeout
}

TEST_CASE("store: a rank that stops in ZeRO's step makes the others time out, naming it and the collective") {
  const Outcome outcome = on_store(3, 300ms, 0, Stop::before_step, 1500ms);
  for (int r : {1, 2}) {
    CAPTURE(outcome.messages[r]);
    // Rank 0 owns a parameter: the others wait for it in the step's broadcasts (or see the first's abort).
    CHECK(has(outcome.messages[r], "broadcast #"));
    CHECK(has(outcome.messages[r], "rank 0"));
  }
  CHECK(has(outcome.messages[0], "the process group was aborted"));
  CHECK(outcome.seconds < 5);
}
