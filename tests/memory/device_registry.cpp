// The process's device registry (memory/device_allocators.h) on bad input: a bad BYTEGRAD_ALLOC_CONF or an
// impossible simulated capacity makes caching_allocator / reset_device / configure_simulated_device throw
// std::invalid_argument naming the setting, and leaves the device as it was: its previous allocator (same
// object, same statistics, same capacity) stays usable, and a device that had none still has none.
// Each case uses its own device index, so the registry's other users are not disturbed.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "helpers.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/out_of_memory.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// The std::invalid_argument message `f` throws; fails the test when it throws nothing or something else.
template <typename F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected std::invalid_argument, got: " << e.what());
  }
  FAIL("expected std::invalid_argument, nothing was thrown");
  return "";
}

// Leaves one 512-byte block allocated then freed: allocated 0, reserved one 2 MiB small-pool segment.
void use_once(CachingAllocator& allocator) {
  void* p = allocator.malloc(512);
  REQUIRE(p != nullptr);
  allocator.free(p);
}

}  // namespace

TEST_CASE(
    "device registry: a bad BYTEGRAD_ALLOC_CONF on reset_device keeps the previous allocator and its statistics") {
  const Device device{DeviceType::sim, 11};
  reset_device(device);
  CachingAllocator& before = caching_allocator(device);
  use_once(before);
  const std::map<std::string, int64_t> stats = before.memory_stats();
  REQUIRE(stats.at("reserved_bytes.all.current") == 2 * static_cast<int64_t>(MiB));

  {
    ScopedEnv env("BYTEGRAD_ALLOC_CONF", "max_split_size_mb:abc");
    const std::string message = invalid_argument_of([&] { reset_device(device); });
    CHECK(message.find("BYTEGRAD_ALLOC_CONF") != std::string::npos);
    CHECK(message.find("max_split_size_mb") != std::string::npos);
    CHECK(message.find("abc") != std::string::npos);
    // Again: the failed call left nothing behind that a second call could trip on (it used to segfault).
    CHECK_THROWS_AS(reset_device(device), std::invalid_argument);
    CHECK_THROWS_AS(configure_simulated_device(device, SimulatedCapacity{}), std::invalid_argument);
  }

  CachingAllocator& after = caching_allocator(device);
  CHECK(&after == &before);
  CHECK(after.memory_stats() == stats);
  // Still usable, with exact figures: the 512 bytes come from the cached segment.
  void* p = after.malloc(512);
  CHECK(after.memory_allocated() == 512);
  CHECK(after.memory_reserved() == 2 * static_cast<int64_t>(MiB));
  CHECK(stat(after, "segment.all.current") == 1);
  CHECK(stat(after, "num_alloc_retries") == 0);
  after.free(p);

  reset_device(device);  // with the variable restored, a reset gives fresh statistics
  CHECK(caching_allocator(device).memory_reserved() == 0);
  CHECK(caching_allocator(device).max_memory_allocated() == 0);
}

TEST_CASE("device registry: a bad BYTEGRAD_ALLOC_CONF on first use leaves no entry behind") {
  const Device device{DeviceType::sim, 12};
  {
    ScopedEnv env("BYTEGRAD_ALLOC_CONF", "max_split_size_mb:99999999999999999999999");
    const std::string message = invalid_argument_of([&] { (void)caching_allocator(device); });
    CHECK(message.find("max_split_size_mb") != std::string::npos);
    CHECK(message.find("99999999999999999999999") != std::string::npos);
    CHECK(message.find("out of range") != std::string::npos);
    // The sequence of issue #9: a failed creation, then a reset, then another use.
    CHECK_THROWS_AS(reset_device(device), std::invalid_argument);
    CHECK_THROWS_AS((void)caching_allocator(device), std::invalid_argument);
  }
  reset_device(device);
  CachingAllocator& allocator = caching_allocator(device);
  CHECK(allocator.memory_reserved() == 0);
  use_once(allocator);
  CHECK(allocator.memory_allocated() == 0);
  CHECK(allocator.memory_reserved() == 2 * static_cast<int64_t>(MiB));
  CHECK(stat(allocator, "allocation.all.allocated") == 1);
}

TEST_CASE("device registry: an impossible capacity keeps the previous allocator, statistics and capacity") {
  for (DeviceType type : {DeviceType::sim, DeviceType::meta}) {
    const Device device{type, 13};
    CAPTURE(device.str());
    const SimulatedCapacity small{.total_bytes = 64 * MiB, .context_bytes = 4 * MiB};
    configure_simulated_device(device, small);
    CachingAllocator& before = caching_allocator(device);
    use_once(before);
    const auto stats = before.memory_stats();

    SUBCASE("context reservation above the total") {
      const std::string message = invalid_argument_of([&] {
        configure_simulated_device(device, SimulatedCapacity{.total_bytes = 1 * GiB, .context_bytes = 2 * GiB});
      });
      CHECK(message.find("context_bytes") != std::string::npos);
      CHECK(message.find(std::to_string(2 * GiB)) != std::string::npos);
    }
    SUBCASE("a total whose address span would wrap") {
      const std::string message = invalid_argument_of([&] {
        configure_simulated_device(device, SimulatedCapacity{.total_bytes = ~size_t{0}, .context_bytes = 0});
      });
      CHECK(message.find("total_bytes") != std::string::npos);
    }
    SUBCASE("no multiprocessors") {
      SimulatedCapacity none;
      none.multiprocessor_count = 0;
      const std::string message = invalid_argument_of([&] { configure_simulated_device(device, none); });
      CHECK(message.find("multiprocessor_count") != std::string::npos);
    }

    CachingAllocator& after = caching_allocator(device);
    CHECK(&after == &before);
    CHECK(after.memory_stats() == stats);
    CHECK(after.mem_get_info().total == 64 * MiB);
    CHECK(device_launch_limits(device).multiprocessor_count == 132);
    // The small card's capacity still applies, also to a fresh allocator: 100 MiB does not fit in 60 MiB.
    reset_device(device);
    CHECK(caching_allocator(device).mem_get_info().total == 64 * MiB);
    CHECK_THROWS_AS((void)caching_allocator(device).malloc(100 * MiB), OutOfMemoryError);
    CHECK(caching_allocator(device).memory_allocated() == 0);
    configure_simulated_device(device, SimulatedCapacity{});
    CHECK(caching_allocator(device).mem_get_info().total == kSimDefaultTotalBytes);
  }
}

TEST_CASE("device registry: a live block still refuses a reset, and the refusal changes nothing") {
  const Device device{DeviceType::sim, 14};
  reset_device(device);
  CachingAllocator& allocator = caching_allocator(device);
  void* p = allocator.malloc(1000);
  const auto stats = allocator.memory_stats();
  CHECK_THROWS_AS(reset_device(device), std::logic_error);
  CHECK_THROWS_AS(configure_simulated_device(device, SimulatedCapacity{}), std::logic_error);
  CHECK(&caching_allocator(device) == &allocator);
  CHECK(allocator.memory_stats() == stats);
  allocator.free(p);
  reset_device(device);
}
