// PyTorch's test/test_cuda.py, class TestMemPool: a user's memory pool (torch.cuda.MemPool, use_mem_pool).
// Where PyTorch's test makes its pool with a pluggable allocator (CUDAPluggableAllocator over cudaMallocManaged)
// only to have one, the pool here uses the device's own memory: the allocator's bookkeeping, which these tests
// assert, is the same. The tests about the pluggable allocator itself are listed in README.md.
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "bytegrad/memory/mem_pool.h"
#include "bytegrad/memory/out_of_memory.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

constexpr int64_t kOneMiBOfFloats = 1024 * 1024 / 4;

// With expandable segments a pool without a pluggable allocator grows one segment in place (recorded in
// PyTorch: tests/data/pytorch_probes/mempool_h100.jsonl, pool_expandable), where PyTorch's tests, whose pools
// have a pluggable allocator and so never expand, count separate segments.
bool pools_expand() { return AllocatorConfig::from_environment().expandable_segments; }
constexpr const char* kExpandsInPlace =
    "expandable segments: a pool without a pluggable allocator grows in place; segment counts not asserted";

// The segments of one pool, as torch.cuda.memory.memory_snapshot(pool.id).
size_t pool_segments(Device device, const MemPool& pool) {
  return caching_allocator(device).snapshot(pool.id()).segments.size();
}

// PyTorch's _teardown_mempool_limited_memory_test, also when the test fails: on cuda the process's allocator
// outlives the test, and the next tests must not find the cap.
struct FractionRestorer {
  Device device;
  double fraction = get_per_process_memory_fraction(device);
  ~FractionRestorer() {
    empty_cache(device);
    set_per_process_memory_fraction(fraction, device);
  }
};

// PyTorch's _setup_mempool_limited_memory_test: the cap at what the device holds plus `extra_mib`.
void limit_to(Device device, int64_t extra_mib) {
  empty_cache(device);
  const auto all_memory = static_cast<double>(mem_get_info(device).second);
  const auto total_allowed = static_cast<double>(extra_mib * static_cast<int64_t>(kMiB) + memory_reserved(device));
  set_per_process_memory_fraction(total_allowed / all_memory, device);
}

}  // namespace

// PyTorch: test_cuda.py TestMemPool.test_mempool_id
TEST_CASE("conformance: pool ids are (0, n), counting up across MemPool and graph_pool_handle") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const MempoolId pool1 = graph_pool_handle();
    const MempoolId pool2 = MemPool(device).id();
    const MempoolId pool3 = graph_pool_handle();
    CHECK((pool1.first == 0) == (pool2.first == 0));
    CHECK((pool1.first == 0) == (pool3.first == 0));
    CHECK(pool2.second > pool1.second);
    CHECK(pool3.second > pool2.second);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_empty_cache
TEST_CASE("conformance: deleting a pool keeps the default pool's cached segment") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    empty_cache(device);
    auto pool = std::make_unique<MemPool>(device);
    auto x = empty({1024, 1024}, bytegrad::device(device));
    Tensor y;
    {
      auto in_pool = use_mem_pool(*pool);
      y = empty({1024, 1024}, bytegrad::device(device));
    }
    y = Tensor();
    x = Tensor();
    pool.reset();
    CHECK(!dut.allocator().snapshot().segments.empty());
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_with_allocator (its use counts and segment counts; the
// pluggable allocator's calls are not modelled)
TEST_CASE("conformance: a pool's use count counts its scopes; small blocks pack into its 2 MiB segments") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    MemPool pool(device);
    CHECK(pool.use_count() == 1);
    Tensor out_0, out_1, out_2;
    {
      auto in_pool = use_mem_pool(pool);
      out_0 = randn({kOneMiBOfFloats}, bytegrad::device(device));
      CHECK(pool.use_count() == 2);
    }
    CHECK(pool.use_count() == 1);
    auto out_non_pool = empty({kOneMiBOfFloats}, bytegrad::device(device));
    if (pools_expand()) {
      MESSAGE(kExpandsInPlace);
      return;
    }
    {
      auto in_pool = use_mem_pool(pool);
      CHECK(pool.snapshot().size() == 1);  // the 1 MiB block packed into a 2 MiB segment
      out_1 = randn({kOneMiBOfFloats}, bytegrad::device(device));
      CHECK(pool.snapshot().size() == 1);  // the second 1 MiB fills it
      out_2 = randn({kOneMiBOfFloats}, bytegrad::device(device));
      CHECK(pool.snapshot().size() == 2);  // the third needs a new one
    }
    CHECK(pool.snapshot().size() == 2);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_limited_memory_with_allocator
TEST_CASE("conformance: only a use_on_oom pool's free blocks serve requests that would run out of memory") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    SettingsRestorer restore;
    auto pool_do_not_use = std::make_unique<MemPool>(device);
    auto pool_use = std::make_unique<MemPool>(device, /*use_on_oom=*/true);
    FractionRestorer restore_fraction{device};
    limit_to(device, 80);
    const auto on = bytegrad::device(device);
    Tensor a, b, c, e;
    {
      auto in_pool = use_mem_pool(*pool_do_not_use);
      a = randn({40 * kOneMiBOfFloats}, on);
    }
    {
      auto in_pool = use_mem_pool(*pool_use);
      b = randn({40 * kOneMiBOfFloats}, on);
    }
    const void* b_dataptr = b.data_ptr();
    CHECK_THROWS_AS(randn({40 * kOneMiBOfFloats}, on), OutOfMemoryError);
    a = Tensor();
    b = Tensor();
    c = randn({30 * kOneMiBOfFloats}, on);  // from pool_use, as a fallback
    const void* c_dataptr = c.data_ptr();
    CHECK_THROWS_AS(randn({30 * kOneMiBOfFloats}, on), OutOfMemoryError);  // pool_do_not_use is not used
    c = Tensor();
    CHECK(b_dataptr == c_dataptr);
    {
      auto in_pool = use_mem_pool(*pool_use);
      e = randn({20 * kOneMiBOfFloats}, on);
    }
    const void* e_dataptr = e.data_ptr();
    e = Tensor();
    CHECK(e_dataptr == c_dataptr);
    pool_use.reset();
    pool_do_not_use.reset();
    empty_cache(device);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_no_split
TEST_CASE("conformance: a no_split pool never splits a segment") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    if (pools_expand()) {  // mapped pages are never split off either: the test is about whole segments
      MESSAGE(kExpandsInPlace);
      return;
    }
    empty_cache(device);
    MemPool pool_split(device);
    MemPool pool_no_split(device, /*use_on_oom=*/false, /*no_split=*/true);
    const auto on = bytegrad::device(device);
    std::vector<Tensor> keep;
    for (int i = 0; i < 2; ++i) {
      {
        auto in_pool = use_mem_pool(pool_split);
        keep.push_back(randn({4 * kOneMiBOfFloats}, on));
      }
      {
        auto in_pool = use_mem_pool(pool_no_split);
        keep.push_back(randn({4 * kOneMiBOfFloats}, on));
      }
    }
    CHECK(pool_no_split.snapshot().size() > pool_split.snapshot().size());
    size_t blocks_split = 0, blocks_no_split = 0;
    for (const SegmentInfo& seg : pool_no_split.snapshot()) {
      CHECK(seg.blocks.size() == 1);
      blocks_no_split += seg.blocks.size();
    }
    for (const SegmentInfo& seg : pool_split.snapshot()) blocks_split += seg.blocks.size();
    CHECK(blocks_no_split < blocks_split);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_deleted_mempool_not_used_on_oom
TEST_CASE("conformance: a deleted use_on_oom pool never serves a fallback") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    SettingsRestorer restore;
    FractionRestorer restore_fraction{device};
    limit_to(device, 40);
    const auto on = bytegrad::device(device);
    for (int i = 0; i < 10; ++i) {
      auto pool = std::make_unique<MemPool>(device, /*use_on_oom=*/true);
      Tensor a;
      {
        auto in_pool = use_mem_pool(*pool);
        a = randn({40 * kOneMiBOfFloats}, on);
      }
      a = Tensor();
      pool.reset();
    }
    auto new_pool = std::make_unique<MemPool>(device, /*use_on_oom=*/true);
    {
      auto in_pool = use_mem_pool(*new_pool);
      auto a = randn({40 * kOneMiBOfFloats}, on);
    }
    auto b = randn({20 * kOneMiBOfFloats}, on);  // both from new_pool's free 40 MiB
    auto c = randn({20 * kOneMiBOfFloats}, on);
    b = Tensor();
    c = Tensor();
    new_pool.reset();
    empty_cache(device);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_multithread
TEST_CASE("conformance: pools made on four threads have four ids") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    std::mutex mutex;
    std::vector<MempoolId> pool_ids;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        MemPool pool(device);
        std::lock_guard lock(mutex);
        pool_ids.push_back(pool.id());
      });
    for (auto& thread : threads) thread.join();
    CHECK(std::set<MempoolId>(pool_ids.begin(), pool_ids.end()).size() == 4);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_emptycache_multithread
TEST_CASE("conformance: empty_cache inside pool scopes on four threads keeps every pool's segment") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    std::vector<std::unique_ptr<MemPool>> pools;
    for (int t = 0; t < 4; ++t) pools.push_back(std::make_unique<MemPool>(device));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        auto in_pool = use_mem_pool(*pools[t]);
        auto x = randn({4}, bytegrad::device(device));
        x = Tensor();
        empty_cache(device);
      });
    for (auto& thread : threads) thread.join();
    for (const auto& pool : pools) CHECK(pool->snapshot().size() == 1);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_nested_mempool
TEST_CASE("conformance: nested pool scopes: the innermost pool takes the requests") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    empty_cache(device);
    MemPool pool1(device), pool2(device), pool3(device);
    std::vector<Tensor> data;
    auto allocate_data = [&] { data.push_back(empty({kOneMiBOfFloats * 20}, bytegrad::device(device))); };
    {
      auto in1 = use_mem_pool(pool1);
      allocate_data();
      {
        auto in2 = use_mem_pool(pool2);
        allocate_data();
        {
          auto in3 = use_mem_pool(pool3);
          allocate_data();
        }
        allocate_data();
      }
      allocate_data();
    }
    if (pools_expand()) {
      MESSAGE(kExpandsInPlace);
      return;
    }
    CHECK(pool_segments(device, pool1) == 2);
    CHECK(pool_segments(device, pool2) == 2);
    CHECK(pool_segments(device, pool3) == 1);
  });
}

// PyTorch: test_cuda.py TestMemPool.test_mempool_ctx_multithread
TEST_CASE("conformance: a pool scope routes only its own thread's requests") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    empty_cache(device);
    REQUIRE(dut.allocator().snapshot().segments.empty());
    const int64_t nelem = 1024 * 1024;  // bytes: uint8 stands for PyTorch's int8 (bytegrad has no int8)
    std::mutex mutex;
    std::condition_variable changed;
    bool trigger_alloc = false, done_allocation = false;
    std::vector<SegmentInfo> segments;
    std::thread main_thread([&] {
      MemPool pool(device);
      auto out1 = empty({nelem}, bytegrad::device(device).with_dtype(ScalarType::uint8));
      auto in_pool = use_mem_pool(pool);
      auto out = empty({nelem}, bytegrad::device(device).with_dtype(ScalarType::uint8));
      out = Tensor();
      std::unique_lock lock(mutex);
      trigger_alloc = true;
      changed.notify_all();
      changed.wait(lock, [&] { return done_allocation; });
    });
    std::thread side_thread([&] {
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return trigger_alloc; });
      }
      auto out = empty({nelem}, bytegrad::device(device).with_dtype(ScalarType::uint8));
      segments = dut.allocator().snapshot().segments;
      std::lock_guard lock(mutex);
      done_allocation = true;
      changed.notify_all();
    });
    main_thread.join();
    side_thread.join();
    REQUIRE(segments.size() == 2);
    std::map<MempoolId, size_t> active;
    for (const SegmentInfo& s : segments) active[s.pool_id] += s.active_size;
    for (const auto& [id, bytes] : active) {
      if (id == kDefaultMempool) CHECK(bytes == 2097152);  // both 1 MiB blocks in the default pool
      else CHECK(bytes == 0);
    }
  });
}
