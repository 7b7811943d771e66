// PyTorch's test/test_cuda.py, class TestCuda: the tests of the caching allocator's observable behaviour
// (memory_stats, memory_allocated/reserved, empty_cache, the memory fraction, out of memory).
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>

#include "bytegrad/memory/out_of_memory.h"
#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

// A small card for the tests that fill the device: 2 GiB, of which the driver keeps 64 MiB.
SimulatedCapacity small_card() { return SimulatedCapacity{2 * kGiB, 64 * kMiB}; }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// PyTorch: test_cuda.py TestCuda.test_memory_allocation
TEST_CASE("conformance: a one-byte allocation raises memory_allocated, its free restores it") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const int64_t prev = memory_allocated(device);
    void* mem = dut.allocator().malloc(1);
    CHECK(memory_allocated(device) > prev);
    dut.allocator().free(mem);
    CHECK(memory_allocated(device) == prev);
  });
}

// PyTorch: test_cuda.py TestCuda.test_memory_stats
TEST_CASE("conformance: active_bytes current and freed follow a 1 kB tensor; peaks reset") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    empty_cache(device);
    reset_peak_memory_stats(device);
    reset_accumulated_memory_stats(device);
    const int64_t prev_allocated = memory_allocated(device);
    const int64_t prev_reserved = memory_reserved(device);
    const int64_t prev_max_allocated = max_memory_allocated(device);
    const int64_t prev_max_reserved = max_memory_reserved(device);
    CHECK(prev_allocated == prev_max_allocated);
    CHECK(prev_reserved == prev_max_reserved);
    const int64_t prev_active_current = dut.stat("active_bytes.all.current");
    void* tmp = dut.allocator().malloc(256 * 4);  // torch.randn(256): 1024 bytes
    CHECK(dut.stat("active_bytes.all.current") == 1024 + prev_active_current);
    CHECK(dut.stat("active_bytes.all.freed") == 0);
    dut.allocator().free(tmp);
    empty_cache(device);
    CHECK(dut.stat("active_bytes.all.current") == prev_active_current);
    CHECK(dut.stat("active_bytes.all.freed") == 1024);
    reset_peak_memory_stats(device);
    CHECK(max_memory_allocated(device) == prev_max_allocated);
    CHECK(max_memory_reserved(device) == prev_max_reserved);
  });
}

// PyTorch: test_cuda.py TestCuda.test_out_of_memory
TEST_CASE("conformance: an impossible request names its size; over 1 EB is refused outright") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    void* tensor = dut.allocator().malloc(1024 * 4);
    // 1024^3 * 800000000 bytes: a multiple of 2 MiB, so the segment tried is the request itself.
    try {
      dut.allocator().malloc(size_t{1024} * 1024 * 1024 * 800000000);
      FAIL("no OutOfMemoryError");
    } catch (const OutOfMemoryError& error) {
      CHECK(contains(error.what(), "Tried to allocate 800000000.00 GiB. GPU " + std::to_string(device.index) +
                                       " has a total capacity of"));
    }
    try {
      dut.allocator().malloc(size_t{1024} * 1024 * 1024 * 8000000000);  // 8.6e18 bytes, over 2^60
      FAIL("no OutOfMemoryError");
    } catch (const OutOfMemoryError& error) {
      CHECK(contains(error.what(), "Tried to allocate more than 1EB memory"));
    }
    // The error leaves the allocator working.
    void* after = dut.allocator().malloc(1024 * 4);
    CHECK(after != nullptr);
    dut.allocator().free(after);
    dut.allocator().free(tensor);
  });
}

// PyTorch: test_cuda.py TestCuda.test_out_of_memory_retry
TEST_CASE("conformance: half the card twice fails, and succeeds once the first half is freed") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device, small_card());
    empty_cache(device);
    const auto total_memory = static_cast<size_t>(mem_get_info(device).second);
    const size_t size = total_memory / 2;
    void* a = dut.allocator().malloc(size);
    CHECK_THROWS_WITH_AS(dut.allocator().malloc(size), doctest::Contains("Tried to allocate"), OutOfMemoryError);
    dut.allocator().free(a);
    void* b = dut.allocator().malloc(size);
    dut.allocator().free(b);
    empty_cache(device);
    reset_peak_memory_stats(device);
  });
}

// PyTorch: test_cuda.py TestCuda.test_set_per_process_memory_fraction
TEST_CASE("conformance: a memory fraction of 0.5 admits 0.499 of the card and refuses 0.5") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device, small_card());
    const double orig = get_per_process_memory_fraction(device);
    reset_peak_memory_stats(device);
    CHECK_THROWS_AS(set_per_process_memory_fraction(-0.1, device), std::invalid_argument);
    CHECK_THROWS_AS(set_per_process_memory_fraction(2.0, device), std::invalid_argument);
    void* tensor = dut.allocator().malloc(1024 * 4);
    empty_cache(device);
    const auto total_memory = static_cast<double>(mem_get_info(device).second);
    set_per_process_memory_fraction(0.5, device);
    const auto application =
        static_cast<size_t>(static_cast<int64_t>(total_memory * 0.499) - max_memory_reserved(device));
    void* tmp = dut.allocator().malloc(application);
    dut.allocator().free(tmp);
    empty_cache(device);
    CHECK_THROWS_WITH_AS(dut.allocator().malloc(static_cast<size_t>(total_memory * 0.5)),
                         doctest::Contains("out of memory"), OutOfMemoryError);
    void* after = dut.allocator().malloc(1024 * 4);  // the error leaves the allocator working
    dut.allocator().free(after);
    dut.allocator().free(tensor);
    set_per_process_memory_fraction(orig, device);
  });
}

// PyTorch: test_cuda.py TestCuda.test_get_per_process_memory_fraction
TEST_CASE("conformance: get_per_process_memory_fraction returns what was set") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const double init_fraction = get_per_process_memory_fraction(device);
    set_per_process_memory_fraction(1.0, device);
    CHECK(get_per_process_memory_fraction(device) == 1.0);
    set_per_process_memory_fraction(0.0, device);
    CHECK(get_per_process_memory_fraction(device) == 0.0);
    std::mt19937 random(0);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int i = 0; i < 3; ++i) {
      const double value = uniform(random);
      set_per_process_memory_fraction(value, device);
      // Python's assertEqual on floats allows a relative 1.3e-6; the cap is whole bytes of an 80 GB card.
      CHECK(get_per_process_memory_fraction(device) == doctest::Approx(value).epsilon(1.3e-6));
    }
    set_per_process_memory_fraction(init_fraction, device);
  });
}

// PyTorch: test_cuda.py TestCuda.test_allocator_settings
TEST_CASE("conformance: settings changed at run time round the next requests; bad settings are refused") {
  // The block PyTorch's roundup_power2_divisions gives `size` bytes (the test's own power2_div).
  auto power2_div = [](size_t size, size_t div_factor) {
    size_t pow2 = 1;
    while (pow2 < size) pow2 *= 2;
    if (pow2 == size) return pow2;
    const size_t step = pow2 / 2 / div_factor;
    size_t ret = pow2 / 2;
    while (ret < size) ret += step;
    return ret;
  };
  for_each_device([&](Device device) {
    DeviceUnderTest dut(device);
    SettingsRestorer restore;
    CachingAllocator& alloc = dut.allocator();
    const std::string key_allocated = "active_bytes.all.allocated";
    const std::string key_requested = "requested_bytes.all.allocated";
    const size_t nbytes = 4 * 21 * kMiB;       // torch.rand(21 * 1024 * 1024): 88080384 bytes
    const size_t nbytes_big = 4 * 100 * kMiB;  // torch.rand(100 * 1024 * 1024): 419430400 bytes

    empty_cache(device);
    int64_t start_mem = dut.stat(key_allocated);
    set_allocator_settings("");
    void* x = alloc.malloc(nbytes);
    // roundup_power2_divisions, single value
    int64_t reg_mem = dut.stat(key_allocated);
    const int64_t start_requested = dut.stat(key_requested);
    set_allocator_settings("roundup_power2_divisions:4");
    void* y = alloc.malloc(nbytes);
    const int64_t pow2_div4_mem = dut.stat(key_allocated);
    const int64_t current_requested = dut.stat(key_requested);
    CHECK(reg_mem - start_mem == static_cast<int64_t>(nbytes));
    CHECK(pow2_div4_mem - reg_mem == static_cast<int64_t>(power2_div(nbytes, 4)));
    CHECK(current_requested - start_requested == static_cast<int64_t>(nbytes));

    set_allocator_settings("garbage_collection_threshold:0.5");
    set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40");
    // roundup_power2_divisions went back to its default: no rounding.
    empty_cache(device);
    start_mem = dut.stat(key_allocated);
    void* z = alloc.malloc(nbytes);
    reg_mem = dut.stat(key_allocated);
    CHECK(reg_mem - start_mem == static_cast<int64_t>(nbytes));

    // roundup_power2_divisions, list syntax
    empty_cache(device);
    set_allocator_settings(
        "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]");
    start_mem = dut.stat(key_allocated);
    void* w = alloc.malloc(nbytes);
    const int64_t pow2_div8_mem = dut.stat(key_allocated);
    CHECK(pow2_div8_mem - start_mem == static_cast<int64_t>(power2_div(nbytes, 8)));

    empty_cache(device);
    start_mem = dut.stat(key_allocated);
    void* v = alloc.malloc(nbytes_big);
    const int64_t pow2_div2_mem = dut.stat(key_allocated);
    CHECK(pow2_div2_mem - start_mem == static_cast<int64_t>(power2_div(nbytes_big, 2)));

    empty_cache(device);
    set_allocator_settings("release_lock_on_cudamalloc:True");
    start_mem = dut.stat(key_allocated);
    void* w2 = alloc.malloc(nbytes);
    reg_mem = dut.stat(key_allocated);
    CHECK(reg_mem - start_mem == static_cast<int64_t>(nbytes));

    for (const char* bad : {"foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                            "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                            "pinned_num_register_threads:none", "pinned_num_register_threads:1024"}) {
      INFO(bad);
      CHECK_THROWS_AS(set_allocator_settings(bad), std::invalid_argument);
    }
    for (void* p : {x, y, z, w, v, w2}) alloc.free(p);
    set_allocator_settings("");
    empty_cache(device);
  });
}

// PyTorch: test_cuda.py TestCuda.test_allocator_memory_fraction_setting
TEST_CASE("conformance: per_process_memory_fraction in the settings caps a new allocator; out of range is refused") {
  // PyTorch runs a fresh process per value with PYTORCH_CUDA_ALLOC_CONF set; here a fresh allocator per value.
  auto fraction_of_new_allocator = [](const std::string& value) {
    AllocatorConfig config = AllocatorConfig::parse("per_process_memory_fraction:" + value);
    CachingAllocator allocator(make_host_backed_raw_memory(SimulatedCapacity{}), config);
    return allocator.memory_fraction();
  };
  CHECK(fraction_of_new_allocator("0.0") == 0.0);
  CHECK(fraction_of_new_allocator("0.5") == 0.5);
  CHECK(fraction_of_new_allocator("1.0") == 1.0);
  CHECK_THROWS_WITH_AS(AllocatorConfig::parse("per_process_memory_fraction:-0.1"),
                       doctest::Contains("per_process_memory_fraction is invalid"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(AllocatorConfig::parse("per_process_memory_fraction:1.1"),
                       doctest::Contains("per_process_memory_fraction is invalid"), std::invalid_argument);
}

// PyTorch: test_cuda.py TestCuda.test_raises_oom (both parametrizations)
TEST_CASE("conformance: a 4 TiB request raises OutOfMemoryError, with and without max_split_size_mb") {
  for_each_device([](Device device) {
    for (const bool max_split_size_mb_setting : {false, true}) {
      DeviceUnderTest dut(device);
      SettingsRestorer restore;
      if (max_split_size_mb_setting) {
        set_allocator_settings("max_split_size_mb:1024");
        empty_cache(device);
      }
      // torch.empty(1024 ** 4) floats: 4 TiB
      CHECK_THROWS_AS(dut.allocator().malloc(size_t{4} * 1024 * 1024 * 1024 * 1024), OutOfMemoryError);
      set_allocator_settings("");
    }
  });
}

// PyTorch: test_cuda.py TestCuda.test_notifies_oom
TEST_CASE("conformance: an attached out-of-memory observer is called before the error") {
  // Observers stay attached for the process, as in PyTorch; this one only counts. Attached once: doctest
  // runs the test's body again for each device's subcase.
  static int notified = 0;
  static OutOfMemoryNotice last;
  static const bool attached = [] {
    attach_out_of_memory_observer([](const OutOfMemoryNotice& notice) {
      ++notified;
      last = notice;
    });
    return true;
  }();
  CHECK(attached);
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const int before = notified;
    CHECK_THROWS_AS(dut.allocator().malloc(size_t{4} * 1024 * 1024 * 1024 * 1024), OutOfMemoryError);
    CHECK(notified == before + 1);
    CHECK(last.device_index == device.index);
    CHECK(last.alloc_bytes == size_t{4} * 1024 * 1024 * 1024 * 1024);                // already a multiple of 2 MiB
    CHECK(last.device_allowed == static_cast<size_t>(mem_get_info(device).second));  // no fraction: the total
    CHECK(last.device_free == static_cast<size_t>(mem_get_info(device).first));
  });
}

// PyTorch: test_cuda.py TestCuda.test_max_split_expandable
TEST_CASE("conformance: expandable and ordinary segments mix under a cap and max_split_size_mb") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    SettingsRestorer restore;
    const double orig = get_per_process_memory_fraction(device);
    empty_cache(device);
    const auto all_memory = static_cast<double>(mem_get_info(device).second);
    const int64_t pre_reserved = memory_reserved(device);
    const auto total_allowed = static_cast<int64_t>(120 * kMiB) + pre_reserved;
    const double fraction_allowed = static_cast<double>(total_allowed) / all_memory;
    CHECK(static_cast<int64_t>(std::round(fraction_allowed * all_memory)) == total_allowed);
    set_per_process_memory_fraction(fraction_allowed, device);
    auto alloc = [&](size_t n) { return dut.allocator().malloc(n * kMiB); };
    set_allocator_settings("expandable_segments:False,max_split_size_mb:40");
    void* a = alloc(40);
    set_allocator_settings("expandable_segments:True,max_split_size_mb:40");
    void* b = alloc(40);
    set_allocator_settings("expandable_segments:False,max_split_size_mb:40");
    void* c = alloc(40);
    CHECK_THROWS_AS(alloc(40), OutOfMemoryError);
    for (void* p : {a, b, c}) dut.allocator().free(p);
    // release_cached_blocks runs with an expandable segment's blocks in the free list
    void* d = nullptr;
    CHECK_NOTHROW(d = alloc(120));
    dut.allocator().free(d);
    set_per_process_memory_fraction(orig, device);
    set_allocator_settings("");
  });
}

// PyTorch: test_cuda.py TestCuda.test_garbage_collect_expandable
TEST_CASE("conformance: garbage collection runs with an expandable segment's block in the free list") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    SettingsRestorer restore;
    const double orig = get_per_process_memory_fraction(device);
    empty_cache(device);
    const auto all_memory = static_cast<double>(mem_get_info(device).second);
    const int64_t pre_reserved = memory_reserved(device);
    const auto total_allowed = static_cast<int64_t>(120 * kMiB) + pre_reserved;
    const double fraction_allowed = static_cast<double>(total_allowed) / all_memory;
    CHECK(fraction_allowed * all_memory == static_cast<double>(total_allowed));
    set_per_process_memory_fraction(fraction_allowed, device);
    auto alloc = [&](size_t n) { return dut.allocator().malloc(n * kMiB); };
    set_allocator_settings("expandable_segments:False,garbage_collection_threshold:0.5");
    void* a = alloc(40);
    set_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5");
    void* b = alloc(40);
    dut.allocator().free(a);
    dut.allocator().free(b);
    void* c = nullptr;
    CHECK_NOTHROW(c = alloc(80));  // garbage collection runs first
    dut.allocator().free(c);
    set_per_process_memory_fraction(orig, device);
    set_allocator_settings("");
  });
}

// PyTorch: test_cuda.py TestCuda.test_allocator_fuzz
TEST_CASE("conformance: 10000 random allocations, frees and empty_caches keep every block intact") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const int64_t start_allocated = memory_allocated(device);
    std::mt19937 random(123);
    struct Live {
      int value;
      void* ptr;
      size_t bytes;
    };
    std::vector<Live> mem;
    size_t total = 0;  // int32 elements live
    int c = 0;
    const bool writable = device.type == DeviceType::sim;  // host memory: the values can be checked
    auto alloc = [&] {
      const size_t b = std::uniform_int_distribution<size_t>(2 * kMiB / 4, 20 * kMiB / 4 - 1)(random);
      void* p = dut.allocator().malloc(b * 4);
      // torch.full((b,), c): the first and last elements stand for the whole (writing all 50 GB is slow).
      if (writable) {
        static_cast<int32_t*>(p)[0] = c;
        static_cast<int32_t*>(p)[b - 1] = c;
      }
      mem.push_back({c, p, b});
      ++c;
      total += b;
    };
    auto free_one = [&] {
      const size_t idx = std::uniform_int_distribution<size_t>(0, mem.size() - 1)(random);
      const Live live = mem[idx];
      mem.erase(mem.begin() + static_cast<std::ptrdiff_t>(idx));
      if (writable) {
        CHECK(static_cast<int32_t*>(live.ptr)[0] == live.value);
        CHECK(static_cast<int32_t*>(live.ptr)[live.bytes - 1] == live.value);
      }
      dut.allocator().free(live.ptr);
      total -= live.bytes;
    };
    for (int i = 0; i < 10000; ++i) {
      while (total >= 1024 * 1024 * 1024 / (4 * 10)) free_one();
      std::discrete_distribution<int> choice({1.0, mem.empty() ? 0.0 : 1.0, 0.1});
      switch (choice(random)) {
        case 0: alloc(); break;
        case 1: free_one(); break;
        default: empty_cache(device); break;
      }
    }
    while (!mem.empty()) free_one();
    CHECK(memory_allocated(device) == start_allocated);
  });
}
