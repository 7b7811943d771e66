// Threads on one sim device, for ThreadSanitizer (./test.sh --thread-sanitize runs this suite built with
// -fsanitize=thread; any report fails it) and for exact statistics afterwards:
//  - 8 threads allocating and freeing at once, through tensors and through the caching allocator directly,
//    with history recording on: after they join, everything is back to where it started, the allocation
//    counters moved by exactly what the threads did, and the snapshot is a well-formed tiling whose sums
//    equal every statistic (tests/support/allocator_invariants.h);
//  - two threads running forward and backward of their own MLP at once: gradients bit-for-bit those of the
//    same graphs run one after the other, and the same allocation counts and live bytes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocator_invariants.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct ThreadCounts {
  int64_t tensor_allocations = 0;
  int64_t raw_allocations = 0;
  int64_t requested_bytes = 0;  // the sum of every request made
};

// One thread's work: random tensors (kept, then dropped in random order, some of them added together) and
// raw blocks, tagged with this thread's allocation context.
ThreadCounts allocate_and_free(int thread_index, int steps, std::atomic<int>& ready) {
  ThreadCounts counts;
  std::mt19937 rng(1000 + thread_index);
  CachingAllocator& allocator = caching_allocator(kSim);
  AllocationScope scope(thread_index % 2 ? "odd thread" : "even thread");
  ready.fetch_add(1);
  while (ready.load() < 8) std::this_thread::yield();  // start together, to overlap as much as possible
  std::vector<Tensor> tensors;
  std::vector<void*> blocks;
  for (int step = 0; step < steps; ++step) {
    const int roll = static_cast<int>(rng() % 10);
    if (roll < 3) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % (rng() % 8 == 0 ? 600000 : 3000));
      tensors.push_back(empty({n}, TensorOptions{ScalarType::float32, kSim}));
      ++counts.tensor_allocations;
      counts.requested_bytes += n * 4;
    } else if (roll < 4) {
      const Tensor a = full({64}, 1.5, TensorOptions{ScalarType::float32, kSim});
      const Tensor b = a + a;  // a kernel on sim, allocating its output under this thread's tag
      CHECK(b.tolist()[63] == 3.0);
      counts.tensor_allocations += 2;
      counts.requested_bytes += 2 * 64 * 4;
    } else if (roll < 6) {
      const size_t n = 1 + rng() % (rng() % 8 == 0 ? 12 << 20 : 8192);
      blocks.push_back(allocator.malloc(n, rng() % 4 == 0 ? 1 : 0));
      ++counts.raw_allocations;
      counts.requested_bytes += static_cast<int64_t>(n);
    } else if (roll < 8 && !tensors.empty()) {
      std::swap(tensors[rng() % tensors.size()], tensors.back());
      tensors.pop_back();
    } else if (!blocks.empty()) {
      std::swap(blocks[rng() % blocks.size()], blocks.back());
      allocator.free(blocks.back());
      blocks.pop_back();
    } else if (roll == 9) {
      allocator.empty_cache();
    }
  }
  for (void* block : blocks) allocator.free(block);
  return counts;
}

std::shared_ptr<nn::Sequential> make_mlp() {
  const TensorOptions opts{ScalarType::float32, kSim};
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 64, true, opts), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, 64, true, opts), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, 1, true, opts)});
}

struct Task {
  std::shared_ptr<nn::Sequential> model;
  Tensor x, y;
};

void forward_backward(const Task& task) {
  for (int step = 0; step < 3; ++step) {  // gradients accumulate over three backwards
    Tensor loss = mse_loss((*task.model)(task.x), task.y);
    loss.backward();
  }
}

std::vector<std::vector<double>> gradients(const Task& task) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : task.model->parameters()) out.push_back(p.grad().tolist());
  return out;
}

struct Figures {
  int64_t allocations;  // allocation.all.allocated: every block ever handed out
  int64_t requested;    // requested_bytes.all.allocated
  int64_t allocated;    // allocated_bytes.all.current
};

Figures figures() {
  const DeviceStats s = caching_allocator(kSim).stats();
  return {s.allocation.all().allocated, s.requested_bytes.all().allocated, s.allocated_bytes.all().current};
}

}  // namespace

TEST_CASE("8 threads allocate and free on one sim device: exact statistics after they join") {
  fresh(kSim);
  CachingAllocator& allocator = caching_allocator(kSim);
  allocator.record_history(true);
  const DeviceStats start = allocator.stats();
  std::atomic<int> ready{0};
  std::array<ThreadCounts, 8> counts;
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { counts[i] = allocate_and_free(i, 1500, ready); });
  for (auto& thread : threads) thread.join();
  const DeviceStats end = allocator.stats();

  int64_t allocations = 0, requested = 0;
  for (const ThreadCounts& c : counts)
    allocations += c.tensor_allocations + c.raw_allocations, requested += c.requested_bytes;
  CHECK(allocations > 8 * 500);
  CHECK(end.allocated_bytes.all().current == start.allocated_bytes.all().current);
  CHECK(end.allocation.all().current == start.allocation.all().current);
  CHECK(end.requested_bytes.all().current == start.requested_bytes.all().current);
  CHECK(end.active_bytes.all().current == start.active_bytes.all().current);
  CHECK(end.allocation.all().allocated - start.allocation.all().allocated == allocations);
  CHECK(end.allocation.all().freed - start.allocation.all().freed == allocations);
  CHECK(end.requested_bytes.all().allocated - start.requested_bytes.all().allocated == requested);
  CHECK(end.num_ooms == 0);
  // The history saw every malloc, each tagged by the thread that made it (ops name their own outputs:
  // "full", "add"; raw blocks and empty() carry the thread's tag).
  const MemorySnapshot snap = allocator.snapshot();
  int64_t history_allocs = 0, thread_tagged = 0, untagged = 0;
  for (const TraceEntry& entry : snap.trace) {
    if (entry.action != TraceAction::alloc) continue;
    ++history_allocs;
    thread_tagged += entry.tag == "odd thread" || entry.tag == "even thread";
    untagged += entry.tag.empty();
  }
  int64_t raw_allocations = 0;
  for (const ThreadCounts& c : counts) raw_allocations += c.raw_allocations;
  CHECK(history_allocs == allocations);
  CHECK(thread_tagged >= raw_allocations);
  CHECK(untagged == 0);
  allocator.record_history(false);
  // The cache the threads left is a well-formed tiling whose sums equal every statistic.
  CheckedAllocator checked(allocator, simulated_capacity(kSim));
  CHECK(checked.ok());
  checked.free_all_and_flush();
  CHECK(checked.ok());
}

TEST_CASE("two threads run forward and backward at once: gradients and statistics as run one at a time") {
  fresh(kSim);
  manual_seed(11);
  const TensorOptions opts{ScalarType::float32, kSim};
  // Models and data are made here, on one thread: initialization draws from the global generator, whose
  // order would otherwise depend on the schedule.
  std::array<Task, 2> tasks;
  for (Task& task : tasks) {
    task.model = make_mlp();
    task.x = randn({32, 16}, opts);
    task.y = randn({32, 1}, opts);
  }
  auto run_alone = [&](const Task& task) { std::thread([&] { forward_backward(task); }).join(); };
  auto clear_grads = [&] {
    for (Task& task : tasks) task.model->zero_grad(/*set_to_none=*/true);
  };
  // A first run parks the workspaces that stay for the process (the autograd device thread's), so that
  // the measured runs below allocate alike.
  run_alone(tasks[0]);
  clear_grads();

  const Figures before_sequential = figures();
  run_alone(tasks[0]);
  run_alone(tasks[1]);
  const Figures after_sequential = figures();
  const std::array<std::vector<std::vector<double>>, 2> sequential = {gradients(tasks[0]), gradients(tasks[1])};
  clear_grads();

  const Figures before_concurrent = figures();
  CHECK(before_concurrent.allocated == before_sequential.allocated);
  std::thread first([&] { forward_backward(tasks[0]); });
  std::thread second([&] { forward_backward(tasks[1]); });
  first.join();
  second.join();
  const Figures after_concurrent = figures();

  for (size_t t = 0; t < tasks.size(); ++t) {
    const auto concurrent = gradients(tasks[t]);
    REQUIRE(concurrent.size() == sequential[t].size());
    for (size_t p = 0; p < concurrent.size(); ++p) CHECK(concurrent[p] == sequential[t][p]);
  }
  CHECK(after_concurrent.allocated == after_sequential.allocated);  // the gradients, live in both
  CHECK(after_concurrent.allocations - before_concurrent.allocations ==
        after_sequential.allocations - before_sequential.allocations);
  CHECK(after_concurrent.requested - before_concurrent.requested ==
        after_sequential.requested - before_sequential.requested);
  CHECK(caching_allocator(kSim).stats().num_ooms == 0);
}
