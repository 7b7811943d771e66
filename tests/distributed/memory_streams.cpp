// What collectives allocate, on which stream they run and how long they hold their tensors, against
// PyTorch 2.11's ProcessGroupNCCL as shared/reference/pytorch-distributed-memory.md reads it:
//  §2.1 async_op=false runs on the current stream; async_op=true on the group's own stream, which first
//       waits for the current stream;
//  §2.2 async tensors are stashed on the Work until wait() (no record_stream), and its result() holds the
//       outputs while the Work lives; a Work dropped without wait() gives them back once it has
//       completed, at the next collective issued on the group;
//  §2.3 nothing is allocated by all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor;
//       barrier() allocates a float32 zeros({1}) and synchronizes the current stream.
// Every program runs on 2 threads ranks on sim and on meta, and the fake backend gives the same figures.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "bytegrad/distributed/fake.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using bytegrad::testing::FreshDevice;
using bytegrad::testing::FreshRankDevices;
using bytegrad::testing::MemoryProbe;

namespace {

constexpr int64_t kTensorBytes = 1024 * 4;          // empty({1024}) float32: 4096 B, a small-pool block
constexpr int64_t kFlagBytes = 512;                 // barrier's zeros({1}) float32: 4 B, rounded up to 512 B
constexpr int64_t kSmallSegment = 2 * 1024 * 1024;  // the first small block reserves a 2 MiB segment

uintptr_t address(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

// Runs `program` on every rank of a 2-rank threads group of `type` (fresh devices) and returns each
// rank's findings.
template <typename Findings, typename Program>
std::vector<Findings> on_two_ranks(DeviceType type, Program program) {
  FreshRankDevices fresh(2, type);
  std::vector<Findings> found(2);
  run_ranks(2, type, [&](ProcessGroup& pg) { found[pg.rank()] = program(pg); });
  return found;
}

struct SyncFindings {
  bool returned_work = true;
  int64_t allocated = -1, peak = -1, reserved = -1, after_free = 0;
  bool current_busy = false, group_stream_idle = false, block_reused = false;
};

SyncFindings sync_all_reduce(ProcessGroup& pg) {
  SyncFindings f;
  const Device d = pg.device();
  Tensor x = empty({1024}, device(d));
  synchronize(d);
  MemoryProbe probe(d);
  f.returned_work = pg.all_reduce(x) != nullptr;
  f.allocated = probe.allocated_delta();
  f.peak = probe.peak_allocated_delta();
  f.reserved = probe.reserved_delta();
  f.current_busy = !current_stream(d).query();            // the collective is queued on the current stream
  f.group_stream_idle = pg.collective_stream()->query();  // and nothing on the group's own
  const uintptr_t old_address = address(x);
  x = Tensor();
  f.after_free = probe.allocated_delta();
  Tensor y = empty({1024}, device(d));
  f.block_reused = address(y) == old_address;  // no record_stream: the block is free for its stream at once
  return f;
}

struct AsyncFindings {
  bool current_idle = false, group_stream_busy = false, completed_before_wait = true;
  int64_t held_by_stash = -1, held_by_result = -1, after_drop = 0;
  bool current_waits = false, completed_after_sync = false, block_reused = false;
};

AsyncFindings async_all_reduce(ProcessGroup& pg) {
  AsyncFindings f;
  const Device d = pg.device();
  Tensor x = empty({1024}, device(d));
  synchronize(d);
  MemoryProbe probe(d);
  auto work = pg.all_reduce(x, ReduceOp::sum, /*async_op=*/true);
  f.current_idle = current_stream(d).query();              // only an event was recorded on it
  f.group_stream_busy = !pg.collective_stream()->query();  // the wait and the collective
  f.completed_before_wait = work->is_completed();
  const uintptr_t old_address = address(x);
  x = Tensor();
  f.held_by_stash = probe.allocated_delta();
  work->wait();
  f.held_by_result = probe.allocated_delta();    // unstashed, but the Work's result() still holds x
  f.current_waits = !current_stream(d).query();  // the current stream now waits for the collective's end
  synchronize(d);
  f.completed_after_sync = work->is_completed();
  work.reset();
  f.after_drop = probe.allocated_delta();
  Tensor y = empty({1024}, device(d));
  f.block_reused = address(y) == old_address;  // allocated on the current stream, freed there: reused
  return f;
}

struct DroppedFindings {
  int64_t held = -1, held_after_next = -1, held_after_sync = -1, released = 0;
};

DroppedFindings dropped_work(ProcessGroup& pg) {
  DroppedFindings f;
  const Device d = pg.device();
  Tensor small = empty({1}, device(d));
  Tensor x = empty({1024}, device(d));
  synchronize(d);
  MemoryProbe probe(d);
  pg.all_reduce(x, ReduceOp::sum, /*async_op=*/true);  // the Work is dropped at once, never waited for
  x = Tensor();
  f.held = probe.allocated_delta();
  pg.all_reduce(small);  // the first has not completed (nothing waited for it): its shelf stays
  f.held_after_next = probe.allocated_delta();
  synchronize(d);  // now it has, but only a collective issued later hands the shelf back
  f.held_after_sync = probe.allocated_delta();
  pg.all_reduce(small);
  f.released = probe.allocated_delta();
  return f;
}

struct BarrierFindings {
  bool returned_work = true;
  int64_t peak = -1, allocated = -1, reserved = -1;
  bool current_idle = false;
  int64_t async_held = -1;
  bool idle_after_wait = false;
  int64_t held_by_result = -1, after_drop = -1;
};

BarrierFindings barriers(ProcessGroup& pg) {
  BarrierFindings f;
  const Device d = pg.device();
  MemoryProbe probe(d);
  f.returned_work = pg.barrier() != nullptr;
  f.peak = probe.peak_allocated_delta();
  f.allocated = probe.allocated_delta();
  f.reserved = probe.reserved_delta();
  f.current_idle = current_stream(d).query();  // a synchronous barrier synchronizes the current stream
  auto work = pg.barrier(/*async_op=*/true);
  f.async_held = probe.allocated_delta();
  work->wait();
  f.idle_after_wait = current_stream(d).query();  // so does a barrier's wait()
  f.held_by_result = probe.allocated_delta();     // the Work's result() still holds the flag
  work.reset();
  f.after_drop = probe.allocated_delta();
  return f;
}

struct GatherScatterFindings {
  int64_t peak_sync = -1, peak_async = -1;
};

GatherScatterFindings gather_scatter(ProcessGroup& pg) {
  GatherScatterFindings f;
  const Device d = pg.device();
  Tensor shard = empty({1024}, device(d));
  Tensor full_size = empty({2 * 1024}, device(d));
  MemoryProbe probe(d);
  pg.all_gather_into_tensor(full_size, shard);
  pg.reduce_scatter_tensor(shard, full_size);
  pg.broadcast(full_size, 1);
  f.peak_sync = probe.peak_allocated_delta();
  pg.all_gather_into_tensor(full_size, shard, true)->wait();
  pg.reduce_scatter_tensor(shard, full_size, ReduceOp::avg, true)->wait();
  pg.broadcast(full_size, 0, true)->wait();
  f.peak_async = probe.peak_allocated_delta();
  return f;
}

}  // namespace

TEST_CASE("a synchronous collective runs on the current stream, allocates and holds nothing") {
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    CAPTURE(device_type_name(type));
    for (const SyncFindings& f : on_two_ranks<SyncFindings>(type, sync_all_reduce)) {
      CHECK_FALSE(f.returned_work);
      CHECK(f.allocated == 0);
      CHECK(f.peak == 0);
      CHECK(f.reserved == 0);
      CHECK(f.current_busy);
      CHECK(f.group_stream_idle);
      CHECK(f.after_free == -kTensorBytes);  // freed the moment x goes
      if (type == DeviceType::sim) CHECK(f.block_reused);
    }
  }
}

TEST_CASE("an async collective runs on the group's stream and its tensors are stashed until wait()") {
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    CAPTURE(device_type_name(type));
    for (const AsyncFindings& f : on_two_ranks<AsyncFindings>(type, async_all_reduce)) {
      CHECK(f.current_idle);
      CHECK(f.group_stream_busy);
      CHECK_FALSE(f.completed_before_wait);
      CHECK(f.held_by_stash == 0);  // x was dropped, but its 4096 B stay allocated on the Work's shelf
      CHECK(f.held_by_result == 0);
      CHECK(f.after_drop == -kTensorBytes);
      CHECK(f.current_waits);
      CHECK(f.completed_after_sync);
      if (type == DeviceType::sim) CHECK(f.block_reused);
    }
  }
}

TEST_CASE("an async Work never waited for gives its tensors back at the next collective after completing") {
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    CAPTURE(device_type_name(type));
    for (const DroppedFindings& f : on_two_ranks<DroppedFindings>(type, dropped_work)) {
      CHECK(f.held == 0);
      CHECK(f.held_after_next == 0);
      CHECK(f.held_after_sync == 0);
      CHECK(f.released == -kTensorBytes);
    }
  }
}

TEST_CASE("barrier allocates one float for its duration and synchronizes the current stream") {
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    CAPTURE(device_type_name(type));
    for (const BarrierFindings& f : on_two_ranks<BarrierFindings>(type, barriers)) {
      CHECK_FALSE(f.returned_work);
      CHECK(f.peak == kFlagBytes);
      CHECK(f.allocated == 0);
      CHECK(f.reserved == kSmallSegment);  // a fresh device: the flag's block makes the first small segment
      CHECK(f.current_idle);
      CHECK(f.async_held == kFlagBytes);  // the async barrier's flag reuses the cached block, held by the Work
      CHECK(f.idle_after_wait);
      CHECK(f.held_by_result == kFlagBytes);
      CHECK(f.after_drop == 0);
    }
  }
}

TEST_CASE("broadcast, all_gather_into_tensor and reduce_scatter_tensor allocate nothing, sync or async") {
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    CAPTURE(device_type_name(type));
    for (const GatherScatterFindings& f : on_two_ranks<GatherScatterFindings>(type, gather_scatter)) {
      CHECK(f.peak_sync == 0);
      CHECK(f.peak_async == 0);
    }
  }
}

TEST_CASE("the group's stream comes from the pool at its first collective") {
  FreshDevice fresh(kSim, bytegrad::testing::small_card());  // the pool's round robin restarts
  auto pg = make_fake_process_group(0, 2, kSim);
  CHECK_FALSE(pg->collective_stream());
  Tensor x = empty({4}, device(kSim));
  pg->all_reduce(x);  // synchronous, yet it makes the communicator, which takes its stream
  REQUIRE(pg->collective_stream());
  CHECK(pg->collective_stream()->priority() == 0);
  CHECK_FALSE(pg->collective_stream()->is_default());
  // The user's first torch.cuda.Stream() after it is the pool's next stream, not the group's.
  CHECK_FALSE(get_stream_from_pool(kSim) == *pg->collective_stream());

  auto high = make_fake_process_group(0, 2, kSim, ProcessGroupOptions{.high_priority_stream = true});
  high->barrier();
  CHECK(high->collective_stream()->priority() == -1);
}

TEST_CASE("the fake backend allocates and holds what a real rank does, and moves nothing") {
  // Rank 5 of 8 alone, on meta: the same figures as the threads ranks above.
  {
    FreshDevice fresh(kMeta, bytegrad::testing::small_card());
    auto pg = make_fake_process_group(5, 8, kMeta);
    CHECK(pg->backend_name() == "fake");
    CHECK(pg->rank() == 5);
    CHECK(pg->size() == 8);
    const BarrierFindings b = barriers(*pg);
    CHECK(b.peak == kFlagBytes);
    CHECK(b.reserved == kSmallSegment);
    CHECK(b.async_held == kFlagBytes);
    CHECK(b.after_drop == 0);
    const AsyncFindings a = async_all_reduce(*pg);
    CHECK(a.held_by_stash == 0);
    CHECK(a.held_by_result == 0);
    CHECK(a.after_drop == -kTensorBytes);
    CHECK(a.current_idle);
    CHECK(a.group_stream_busy);
    const DroppedFindings dropped = dropped_work(*pg);
    CHECK(dropped.held_after_sync == 0);
    CHECK(dropped.released == -kTensorBytes);
    const SyncFindings s = sync_all_reduce(*pg);
    CHECK(s.peak == 0);
    CHECK(s.current_busy);
  }
  // On sim the values stay as they were.
  FreshDevice fresh(kSim, bytegrad::testing::small_card());
  auto pg = make_fake_process_group(1, 4, kSim);
  Tensor x = full({3}, 7.0, device(kSim));
  Tensor gathered = zeros({12}, device(kSim));
  pg->all_reduce(x);
  pg->all_gather_into_tensor(gathered, x);
  pg->broadcast(x, 0);
  CHECK(x.tolist() == std::vector<double>{7, 7, 7});
  CHECK(gathered.sum().item() == 0);
}
