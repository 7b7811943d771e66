// The nccl backend on 2 GPUs (ctest `nccl`, label multigpu): every collective's values through run_ranks on
// cuda, sync and async; the caching allocator's figures against process_group.h's rules (nothing allocated
// by all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor; barrier's one 512 B block); what
// cudaMemGetInfo shows NCCL taking outside the allocator (printed, for docs/distributed.md); and a rank
// that never comes making the other fail after the timeout. Exits 77 (skipped) with fewer than 2 GPUs.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/distributed/launcher.h"
#include "bytegrad/distributed/nccl.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::error_of;
using bytegrad::testing::MemoryProbe;

namespace {

using Values = std::vector<double>;

Values host_values(const Tensor& t) { return t.to(kCpu).tolist(); }

int64_t allocations(const MemoryProbe& probe) {
  int64_t count = 0;
  for (const auto& event : probe.events()) count += event.kind == bytegrad::testing::MemoryEvent::Kind::alloc;
  return count;
}

// Rank r holds (r+1) * [1, 10, -1, 0.5]; with 2 ranks: sum 3, product 2 (per element as below).
Values collectives_on_rank(ProcessGroup& pg, bool async) {
  const Device d = pg.device();
  const double k = pg.rank() + 1;
  Values out;
  auto finish = [&](const std::shared_ptr<Work>& work, const Tensor& t) {
    // doctest's checks stay on the test's thread: a rank thread throws, and run_ranks names it.
    if ((work != nullptr) != async) throw std::runtime_error("a Work must come back exactly for async_op");
    if (work) work->wait();
    synchronize(d);
    const Values v = host_values(t);
    out.insert(out.end(), v.begin(), v.end());
  };
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::product, ReduceOp::min, ReduceOp::max}) {
    Tensor x = from_vector({k, 10 * k, -k, 0.5 * k}, {4}, device(d));
    finish(pg.all_reduce(x, op, async), x);
  }
  for (ScalarType dtype :
       {ScalarType::bfloat16, ScalarType::float16, ScalarType::int64, ScalarType::int32, ScalarType::uint8}) {
    Tensor x = full({2}, k, TensorOptions{dtype, d});
    finish(pg.all_reduce(x, ReduceOp::sum, async), x);
  }
  Tensor flags = from_vector({pg.rank() == 0 ? 1.0 : 0.0, 1, 0}, {3}, TensorOptions{ScalarType::bool_, d});
  finish(pg.all_reduce(flags, ReduceOp::sum, async), flags);  // or
  Tensor both = from_vector({pg.rank() == 0 ? 1.0 : 0.0, 1, 0}, {3}, TensorOptions{ScalarType::bool_, d});
  finish(pg.all_reduce(both, ReduceOp::product, async), both);  // and
  Tensor b = full({3}, 100 + pg.rank(), device(d));
  finish(pg.broadcast(b, 1, async), b);
  Tensor g = empty({4}, device(d));
  finish(pg.all_gather_into_tensor(g, from_vector({k, -k}, {2}, device(d)), async), g);
  Tensor input = from_vector({0, k, 2 * k, 3 * k}, {4}, device(d));
  Tensor slice = empty({2}, device(d));
  finish(pg.reduce_scatter_tensor(slice, input, ReduceOp::sum, async), slice);
  pg.barrier(async);
  return out;
}

Values expected_values(int rank) {
  Values e = {3,   30,  -3,   1.5,                     // sum: 1 + 2 = 3
              1.5, 15,  -1.5, 0.75,                    // avg: 3 / 2
              2,   200, 2,    0.5,                     // product: 1*2, 10*20, (-1)(-2), 0.5*1
              1,   10,  -2,   0.5,                     // min
              2,   20,  -1,   1,                       // max
              3,   3,   3,    3,    3, 3, 3, 3, 3, 3,  // bfloat16, float16, int64, int32, uint8: 1 + 2
              1,   1,   0,                             // bool sum is or
              0,   1,   0,                             // bool product is and
              101, 101, 101,                           // broadcast from rank 1
              1,   -1,  2,    -2};                     // all_gather: rank 0's then rank 1's
  // reduce_scatter: (1+2) * [0, 1, 2, 3] = [0, 3, 6, 9]; rank r gets slice r.
  const Values slice = rank == 0 ? Values{0, 3} : Values{6, 9};
  e.insert(e.end(), slice.begin(), slice.end());
  return e;
}

}  // namespace

TEST_CASE("nccl: every collective on 2 GPUs, sync and async, gives the expected values on both ranks") {
  for (bool async : {false, true}) {
    CAPTURE(async);
    std::vector<Values> got(2);
    run_ranks(2, DeviceType::cuda, [&](ProcessGroup& pg) {
      if (pg.backend_name() != "nccl" || pg.device() != Device{DeviceType::cuda, pg.rank()})
        throw std::runtime_error("rank " + std::to_string(pg.rank()) + " is not an nccl rank on cuda:rank");
      got[pg.rank()] = collectives_on_rank(pg, async);
    });
    CHECK(got[0] == expected_values(0));
    CHECK(got[1] == expected_values(1));
  }
}

TEST_CASE("nccl: collectives allocate nothing through the allocator; barrier one 512 B block; NCCL's memory") {
  struct Findings {
    int64_t collectives_allocations = -1, collectives_allocated = -1, collectives_reserved = -1;
    int64_t barrier_allocations = -1, barrier_peak = -1, barrier_allocated = -1;
    int64_t reserved_across_communicator = -1;
    NcclMemoryFigures figures;
  };
  std::vector<Findings> found(2);
  run_ranks(2, DeviceType::cuda, [&](ProcessGroup& pg) {
    Findings& f = found[pg.rank()];
    const Device d = pg.device();
    Tensor x = ones({1024}, device(d));
    Tensor g = empty({2048}, device(d));
    Tensor s = empty({512}, device(d));
    synchronize(d);
    const int64_t reserved_before = memory_reserved(d);
    pg.all_reduce(x);  // makes the communicator
    synchronize(d);
    f.reserved_across_communicator = memory_reserved(d) - reserved_before;
    {
      MemoryProbe probe(d);
      for (bool async : {false, true}) {
        auto works = {pg.all_reduce(x, ReduceOp::sum, async), pg.broadcast(x, 0, async),
                      pg.all_gather_into_tensor(g, x, async), pg.reduce_scatter_tensor(s, x, ReduceOp::sum, async)};
        for (const auto& w : works)
          if (w) w->wait();
      }
      synchronize(d);
      f.collectives_allocations = allocations(probe);
      f.collectives_allocated = probe.allocated_delta();
      f.collectives_reserved = probe.reserved_delta();
    }
    {
      MemoryProbe probe(d);
      pg.barrier();
      f.barrier_allocations = allocations(probe);
      f.barrier_peak = probe.peak_allocated_delta();
      f.barrier_allocated = probe.allocated_delta();
    }
    f.figures = *nccl_memory_figures(pg);
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const Findings& f = found[r];
    CHECK(f.reserved_across_communicator == 0);  // NCCL's buffers are not the allocator's
    CHECK(f.collectives_allocations == 0);       // §2.3: in place on the caller's tensors
    CHECK(f.collectives_allocated == 0);
    CHECK(f.collectives_reserved == 0);
    CHECK(f.barrier_allocations == 1);  // zeros({1}) float32
    CHECK(f.barrier_peak == 512);       // 4 B rounded up to the 512 B minimum block
    CHECK(f.barrier_allocated == 0);    // freed on return
    int64_t first_uses = 0;
    std::string text = "rank " + std::to_string(r) + " (NCCL " + nccl_version() + "): outside the allocator " +
                       std::to_string(f.figures.before_communicator) + " B before the communicator; communicator +" +
                       std::to_string(f.figures.communicator_bytes) + " B";
    for (const auto& [kind, bytes] : f.figures.first_use_bytes) {
      text += ", first " + std::string(collective_name(kind)) + " +" + std::to_string(bytes) + " B";
      first_uses += bytes;
    }
    MESSAGE(text);
    std::printf("%s\n", text.c_str());
    CHECK(f.figures.communicator_bytes + first_uses > 0);  // NCCL's buffers show only in cudaMemGetInfo
  }
}

// The model (process_group.h) adds the ring's buffers at a group's first collective other than a broadcast,
// as PyTorch on four H200s showed for a new subgroup whose first collective was an all_gather
// (docs/evidence/nccl_outside/): here a new group's first all_gather grows NCCL's memory beyond the
// communicator, and its reduce_scatter and all_reduce after it add nothing.
TEST_CASE("nccl: a new group's first all_gather brings the ring's buffers; later collectives add nothing") {
  std::vector<NcclMemoryFigures> found(2);
  run_ranks(2, DeviceType::cuda, [&](ProcessGroup& pg) {
    const Device d = pg.device();
    auto group = pg.new_group({0, 1});
    Tensor x = ones({1024}, device(d));
    Tensor g = empty({2048}, device(d));
    Tensor s = empty({1024}, device(d));
    group->all_gather_into_tensor(g, x);
    synchronize(d);
    group->reduce_scatter_tensor(s, g);
    group->all_reduce(x);
    synchronize(d);
    found[pg.rank()] = *nccl_memory_figures(*group);
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const NcclMemoryFigures& f = found[r];
    std::string text =
        "rank " + std::to_string(r) + " new group: communicator +" + std::to_string(f.communicator_bytes) + " B";
    int64_t all_gather = 0, others = 0;
    for (const auto& [kind, bytes] : f.first_use_bytes) {
      text += ", first " + std::string(collective_name(kind)) + " +" + std::to_string(bytes) + " B";
      (kind == CollectiveKind::all_gather_into_tensor ? all_gather : others) += bytes;
    }
    MESSAGE(text);
    std::printf("%s\n", text.c_str());
    CHECK(all_gather > 0);
    CHECK(others == 0);
  }
}

TEST_CASE("nccl: a rank that never makes its communicator makes the other time out naming the wait") {
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  const std::string error = error_of([&] {
    run_ranks(
        2, DeviceType::cuda,
        [](ProcessGroup& pg) {
          if (pg.rank() == 1) return;  // never calls a collective
          Tensor x = ones({4}, device(pg.device()));
          pg.all_reduce(x);
        },
        options);
  });
  CHECK(error.find("rank 0 of 2 failed") != std::string::npos);
  CHECK(error.find("timed out after 2000 ms") != std::string::npos);
}

TEST_CASE("nccl: a collective the other rank never joins is aborted by the watchdog after the timeout") {
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] {
    run_ranks(
        2, DeviceType::cuda,
        [](ProcessGroup& pg) {
          Tensor x = ones({4}, device(pg.device()));
          pg.all_reduce(x);  // both make the communicator
          synchronize(pg.device());
          if (pg.rank() == 1) return;
          pg.all_reduce(x);          // rank 1 never joins
          synchronize(pg.device());  // returns once the watchdog aborted the communicator
          pg.all_reduce(x);          // throws the watchdog's error
        },
        options);
  });
  CHECK(error.find("did not complete within 2000 ms") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_CASE("nccl: run_ranks refuses more ranks than GPUs") {
  const int gpus = cuda_device_count();
  const std::string error = error_of([&] { run_ranks(gpus + 1, DeviceType::cuda, [](ProcessGroup&) {}); });
  CHECK(error.find("ranks need " + std::to_string(gpus + 1) + " GPUs") != std::string::npos);
}

int main(int argc, char** argv) {
  if (!nccl_available() || cuda_device_count() < 2) {
    std::printf("skipped: the nccl tests need NCCL and 2 GPUs; this process sees %d GPU(s)%s\n", cuda_device_count(),
                nccl_available() ? "" : ", and this build has no NCCL");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
