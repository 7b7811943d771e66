// Helpers of the conformance suite: PyTorch's own caching-allocator tests, transcribed.
//
// Each test runs on the devices chosen on the command line (main.cpp): sim and meta by default, cuda with
// `--device cuda` (ctest `conformance_cuda`, label gpu). `malloc(n)` on the device's allocator stands for
// PyTorch's `torch.empty(n, dtype=torch.uint8, device="cuda")`, a float tensor of k elements for 4 * k
// bytes, and `free(p)` for the tensor's storage dying.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/core/scoped_value.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/testing/fresh_device.h"
#include "bytegrad/testing/stream_work.h"

namespace bytegrad::conformance {

// kMiB is bytegrad's (alloc_config.h).
inline constexpr size_t kGiB = kMiB * 1024;

// The devices the suite runs on (set by main.cpp).
std::vector<Device>& devices_under_test();

// A device as a PyTorch test finds it at its start: on sim and meta an empty allocator of its own for the
// scope (FreshDevice), on cuda the process's allocator with its cache emptied.
class DeviceUnderTest {
 public:
  explicit DeviceUnderTest(Device device, std::optional<SimulatedCapacity> capacity = std::nullopt) : device_(device) {
    if (device.type == DeviceType::cuda) empty_cache(device);
    else fresh_.emplace(device, capacity);
  }
  Device device() const { return device_; }
  CachingAllocator& allocator() const { return caching_allocator(device_); }
  int64_t stat(const std::string& key) const {
    const auto stats = memory_stats(device_);
    const auto it = stats.find(key);
    REQUIRE_MESSAGE(it != stats.end(), "memory_stats() has no key " << key);
    return it->second;
  }

 private:
  Device device_;
  std::optional<testing::FreshDevice> fresh_;
};

// Runs `body` once per device under test, each in a subcase named after the device.
inline void for_each_device(const std::function<void(Device)>& body) {
  for (Device device : devices_under_test()) {
    const std::string name = device.str();
    SUBCASE(name.c_str()) { body(device); }
  }
}

// Restores the run-time allocator settings a test changed, as PyTorch's tests do in their `finally`:
// expandable segments as BYTEGRAD_ALLOC_CONF has them (the expandable run sets them there, as
// test_cuda_expandable_segments.py does for PyTorch's runs).
struct SettingsRestorer {
  ~SettingsRestorer() {
    const bool expandable = AllocatorConfig::from_environment().expandable_segments;
    set_allocator_settings(std::string("expandable_segments:") + (expandable ? "True" : "False") +
                           ",per_process_memory_fraction:1.0");
  }
};

// torch.cuda._sleep on `stream`: work that keeps the stream busy until the program waits for it. On sim and
// meta a work item on the simulated timeline, which stays pending until waited for (their default timing,
// stream_timeline.h) as the sleep does on the H100; on cuda testing::queue_busy_work's spinning kernel.
inline void queue_busy_work(const Stream& stream) {
  if (stream.device().type != DeviceType::cuda)
    REQUIRE_MESSAGE(simulated_timing(stream.device()) == SimulatedTiming::work_pending_until_waited,
                    "the conformance tests model a busy GPU: " << stream.device().str()
                                                               << " must keep queued work pending until waited for");
  testing::queue_busy_work(stream);  // on cuda a kernel spinning for about a second
}

// Work on cuda's current stream long enough that two events around it are measurably apart (for
// elapsed_time: cudaEventElapsedTime resolves about half a microsecond; filling 256 MiB takes far longer).
inline void measurable_work(Device device) { empty({64 * 1024 * 1024}, bytegrad::device(device)).fill_(1.0); }

// torch.cuda.device(d) for a scope: d is the device bytegrad's functions use when none is named
// (default_device(): current_stream(), memory_allocated(), a tensor made without a device).
using CurrentDeviceScope = ScopedSetting<Device, &default_device, &set_default_device>;

// Index 1 of the device's kind, for PyTorch's multi-GPU tests: sim and meta have as many as asked for; cuda
// needs a second GPU (has_second_device).
inline Device second_device_of(Device device) { return Device{device.type, 1}; }
inline bool has_second_device(Device device) { return device.type != DeviceType::cuda || cuda_device_count() >= 2; }
inline constexpr const char* kOnlyOneGpu = "only one GPU: skipped, as PyTorch skips it";

// Runs `body(d0, d1)` for each device under test d0 and a second device of its kind d1, both as a test
// finds them (DeviceUnderTest); with one GPU, says so and skips, as PyTorch's multi-GPU tests do.
inline void for_each_device_pair(const std::function<void(Device, Device)>& body) {
  for_each_device([&](Device d0) {
    if (!has_second_device(d0)) {
      MESSAGE(kOnlyOneGpu);
      return;
    }
    const Device d1 = second_device_of(d0);
    DeviceUnderTest dut0(d0), dut1(d1);
    body(d0, d1);
  });
}

}  // namespace bytegrad::conformance
