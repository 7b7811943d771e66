// PyTorch's test/test_cuda_multigpu.py, class TestCudaMultiGPU: the memory statistics walk, checked against
// the snapshot after every step, on one device and interleaved on two devices of one kind (sim:0 and sim:1,
// meta:0 and meta:1; cuda:0 and cuda:1 where two GPUs are present).
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

// PyTorch's _check_memory_stat_consistency for one device: the statistics rebuilt from the snapshot.
void check_memory_stat_consistency(Device device) {
  const MemorySnapshot snapshot = caching_allocator(device).snapshot();
  std::map<std::string, int64_t> expected;
  for (const SegmentInfo& segment : snapshot.segments) {
    const std::string pool = segment.pool == PoolKind::small ? "small_pool" : "large_pool";
    auto add = [&](const std::string& stat, int64_t amount) {
      expected[stat + ".all.current"] += amount;
      expected[stat + "." + pool + ".current"] += amount;
    };
    if (!segment.is_expandable) add("segment", 1);
    add("allocated_bytes", static_cast<int64_t>(segment.allocated_size));
    add("reserved_bytes", static_cast<int64_t>(segment.total_size));
    add("active_bytes", static_cast<int64_t>(segment.active_size));
    add("requested_bytes", static_cast<int64_t>(segment.requested_size));
    size_t sum_requested = 0;
    const bool is_split = segment.blocks.size() > 1;
    for (const BlockInfo& block : segment.blocks) {
      if (block.state == BlockState::active_allocated) add("allocation", 1);
      if (block.state != BlockState::inactive) {
        sum_requested += block.requested_size;
        add("active", 1);
      }
      if (block.state == BlockState::inactive && is_split && !segment.is_expandable) {
        add("inactive_split", 1);
        add("inactive_split_bytes", static_cast<int64_t>(block.size));
      }
    }
    CHECK(sum_requested == segment.requested_size);
  }
  const auto stats = memory_stats(device);
  for (const auto& [key, value] : expected) {
    INFO(device.str() << " " << key);
    CHECK(stats.at(key) == value);
  }
}

// A float tensor's storage on `device`: freed when the last copy of the handle goes.
using Storage = std::shared_ptr<void>;
struct Tensor {
  Storage storage;
  int64_t numel = 0;
};

// PyTorch's _test_memory_stats_generator as a list of steps (one per `yield`), run one at a time.
class MemoryStatsWalk {
 public:
  MemoryStatsWalk(Device device, int n) : device_(device), n_(n) {
    m0_ = memory_allocated(device_);
    last_m_ = memory_allocated(device_);
    max_m_ = max_memory_allocated(device_);
    last_r_ = memory_reserved(device_);
    max_r_ = max_memory_reserved(device_);
    build();
  }
  // Runs the next step; false once every step ran.
  bool advance() {
    if (next_ >= steps_.size()) return false;
    steps_[next_++]();
    return true;
  }

 private:
  Tensor alloc(std::initializer_list<int64_t> size) {
    const int64_t numel = std::accumulate(size.begin(), size.end(), int64_t{1}, std::multiplies<>());
    CachingAllocator* allocator = &caching_allocator(device_);
    void* ptr = allocator->malloc(static_cast<size_t>(numel) * 4);
    return Tensor{Storage(ptr, [allocator](void* p) { allocator->free(p); }), numel};
  }

  void assert_change(int64_t comp, bool empty = false, bool reset_peak = false) {
    const int64_t new_m = memory_allocated(device_);
    const int64_t new_max_m = max_memory_allocated(device_);
    if (comp > 0) CHECK(new_m > last_m_);
    else if (comp < 0) CHECK(new_m < last_m_);
    else CHECK(new_m == last_m_);
    CHECK(new_m <= new_max_m);
    CHECK(new_max_m >= max_m_);
    last_m_ = new_m;
    max_m_ = new_max_m;

    int64_t new_r = memory_reserved(device_);
    int64_t new_max_r = max_memory_reserved(device_);
    CHECK(new_r <= new_max_r);
    CHECK(new_max_r >= max_r_);
    last_r_ = new_r;
    max_r_ = new_max_r;

    if (empty) {
      auto stats = memory_stats(device_);
      const int64_t num_sync_1 = stats.at("num_sync_all_streams");
      const int64_t num_alloc_1 = stats.at("num_device_alloc");
      const int64_t num_free_1 = stats.at("num_device_free");
      CHECK(num_sync_1 >= 0);
      CHECK(num_alloc_1 >= (new_m == 0 ? 0 : 1));
      CHECK(num_free_1 >= 0);
      empty_cache(device_);
      stats = memory_stats(device_);
      CHECK(stats.at("num_sync_all_streams") == num_sync_1 + 1);
      CHECK(stats.at("num_device_alloc") >= num_alloc_1);
      CHECK(stats.at("num_device_free") >= num_free_1);
      new_r = memory_reserved(device_);
      new_max_r = max_memory_reserved(device_);
      CHECK(new_r <= last_r_);
      CHECK(new_r <= new_max_r);
      CHECK(new_max_r == max_r_);
      last_r_ = new_r;
    }
    if (reset_peak) {
      reset_peak_memory_stats(device_);
      CHECK(memory_allocated(device_) == last_m_);
      CHECK(max_memory_allocated(device_) == last_m_);
      max_m_ = last_m_;
      CHECK(memory_reserved(device_) == last_r_);
      CHECK(max_memory_reserved(device_) == last_r_);
      max_r_ = last_r_;
    }
  }

  void build() {
    const int n = n_;
    steps_.push_back([this] {
      assert_change(0);
      assert_change(0, false, true);
      assert_change(0, true);
      assert_change(0, false, true);
      assert_change(0);
    });
    steps_.push_back([this] {
      tensors1_ = {alloc({1}), alloc({10, 20}), alloc({200, 300, 2000})};
      m1_ = memory_allocated(device_);
      assert_change(1);
    });
    for (int64_t i = 1; i <= n / 2; ++i)  // small ones
      steps_.push_back([this, i] {
        tensors2_.push_back(alloc({i, i * 4}));
        assert_change(1);
      });
    for (int64_t i = 5; i < n / 2 + 5; ++i)  // large ones
      steps_.push_back([this, i] {
        tensors2_.push_back(alloc({i, i * 7, i * 9, i * 11}));
        assert_change(1, false, i % 2 == 0);
      });
    steps_.push_back([this] {
      tensors2_.push_back(alloc({0, 0, 0}));
      assert_change(0);
    });
    // A permutation of tensors2 (torch.randperm), one element per step.
    steps_.push_back([this] {
      order_.resize(tensors2_.size());
      std::iota(order_.begin(), order_.end(), size_t{0});
      std::shuffle(order_.begin(), order_.end(), std::mt19937(35));
      assert_change(0);
    });
    for (size_t k = 0; k < static_cast<size_t>(n / 2 + n / 2 + 1); ++k)
      steps_.push_back([this, k] {
        permute_.push_back(tensors2_[order_[k]]);
        assert_change(0);
      });
    steps_.push_back([this] {
      tensors2_.clear();
      assert_change(0);
    });
    steps_.push_back([this] {
      tensors2_ = permute_;
      assert_change(0);
    });
    steps_.push_back([this] {
      permute_.clear();
      assert_change(0, false, true);
    });
    for (int i = 0; i < n / 2; ++i)
      steps_.push_back([this, i] {
        const int64_t x = tensors2_[static_cast<size_t>(i)].numel;
        tensors2_.erase(tensors2_.begin() + i);
        assert_change(-x);  // 0 when the tensor was empty
      });
    for (int64_t i = 2; i < 2 * n / 3 + 2; ++i)
      steps_.push_back([this, i] {
        tensors2_.push_back(alloc({i, i * 3, i * 8}));
        assert_change(1);
      });
    steps_.push_back([this] {
      tensors2_.clear();
      assert_change(-1, false, true);
      assert_change(0);
      CHECK(memory_allocated(device_) == m1_);
    });
    steps_.push_back([this] {
      tensors1_.clear();
      assert_change(-1, false, true);
      CHECK(memory_allocated(device_) == m0_);
      assert_change(0, true);
      assert_change(0, false, true);
    });
  }

  Device device_;
  int n_;
  std::vector<std::function<void()>> steps_;
  size_t next_ = 0;
  int64_t m0_ = 0, m1_ = 0, last_m_ = 0, max_m_ = 0, last_r_ = 0, max_r_ = 0;
  std::vector<Tensor> tensors1_, tensors2_, permute_;
  std::vector<size_t> order_;
};

}  // namespace

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_memory_stats
TEST_CASE("conformance: the memory statistics walk agrees with the snapshot at every step") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    empty_cache(device);
    MemoryStatsWalk walk(device, 35);
    while (walk.advance()) check_memory_stat_consistency(device);
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_memory_stats_multigpu
TEST_CASE("conformance: two devices of one kind keep their own statistics, interleaved") {
  for_each_device([](Device device) {
    const Device other = second_device_of(device);
    if (!has_second_device(device)) {
      MESSAGE(kOnlyOneGpu);
      return;
    }
    DeviceUnderTest dut0(device);
    DeviceUnderTest dut1(other);
    // interlace
    {
      empty_cache(device);
      empty_cache(other);
      MemoryStatsWalk gen0(device, 35);
      MemoryStatsWalk gen1(other, 35);
      bool more0 = true, more1 = true;
      while (more0 || more1) {
        if (more0) more0 = gen0.advance();
        if (more1) more1 = gen1.advance();
      }
    }
    // semi-random order: up to two steps of the second device per step of the first
    {
      empty_cache(device);
      empty_cache(other);
      MemoryStatsWalk gen0(device, 35);
      MemoryStatsWalk gen1(other, 35);
      std::mt19937 random(1);
      bool more0 = true, more1 = true;
      while (more0 || more1) {
        if (more0) more0 = gen0.advance();
        const int times = more0 ? std::uniform_int_distribution<int>(0, 2)(random) : 1 << 30;
        for (int t = 0; t < times && more1; ++t) more1 = gen1.advance();
      }
    }
  });
}
