// Allocator settings at run time (set_allocator_settings), per_process_memory_fraction in the settings, and
// the out-of-memory observer: PyTorch 2.11's semantics (AcceleratorAllocatorConfig::parseArgs resets
// max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold on every call; other keys
// keep their values; the fraction key is read when a device's allocator is made).
#include <stdexcept>

#include "bytegrad/memory/memory_functions.h"
#include "tests/memory/helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// An empty allocator for a simulated device for the scope (the test layer's FreshDevice, which this
// layer's tests cannot link); the previous one is put back afterwards.
class EmptyDevice {
 public:
  explicit EmptyDevice(Device device) : device_(device) {
    previous_ = exchange_simulated_device(device, SimulatedDeviceState{nullptr, simulated_capacity(device)});
  }
  ~EmptyDevice() { retire_allocator(exchange_simulated_device(device_, std::move(previous_)).allocator); }
  EmptyDevice(const EmptyDevice&) = delete;
  EmptyDevice& operator=(const EmptyDevice&) = delete;

 private:
  Device device_;
  SimulatedDeviceState previous_;
};

}  // namespace

TEST_CASE("settings: updated() resets three keys to their defaults and keeps the others") {
  const AllocatorConfig before = AllocatorConfig::parse(
      "max_split_size_mb:40,roundup_power2_divisions:4,garbage_collection_threshold:0.5,expandable_segments:True,"
      "max_non_split_rounding_mb:30,per_process_memory_fraction:0.25");
  const AllocatorConfig after = AllocatorConfig::updated(before, "release_lock_on_cudamalloc:True");
  const AllocatorConfig defaults;
  CHECK(after.max_split_size == defaults.max_split_size);
  CHECK(after.roundup_power2_divisions == defaults.roundup_power2_divisions);
  CHECK(after.garbage_collection_threshold == defaults.garbage_collection_threshold);
  CHECK(after.expandable_segments);
  CHECK(after.max_non_split_rounding_size == 30 * MiB);
  CHECK(after.per_process_memory_fraction == 0.25);
  CHECK(after.raw == "release_lock_on_cudamalloc:True");
}

TEST_CASE("settings: per_process_memory_fraction and pinned_reserve_segment_size_mb are checked as in PyTorch") {
  CHECK(AllocatorConfig::parse("per_process_memory_fraction:0.5").per_process_memory_fraction == 0.5);
  CHECK_THROWS_WITH_AS(AllocatorConfig::parse("per_process_memory_fraction:-0.1"),
                       doctest::Contains("per_process_memory_fraction is invalid, set it in [0.0, 1.0]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(AllocatorConfig::parse("per_process_memory_fraction:1.1"),
                       doctest::Contains("per_process_memory_fraction is invalid"), std::invalid_argument);
  CHECK_THROWS_AS(AllocatorConfig::parse("per_process_memory_fraction:half"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(AllocatorConfig::parse("pinned_reserve_segment_size_mb:0"), doctest::Contains("greater than 0"),
                       std::invalid_argument);
  CHECK_NOTHROW(AllocatorConfig::parse("pinned_reserve_segment_size_mb:64"));
  CHECK_THROWS_WITH_AS(AllocatorConfig::parse("pinned_num_register_threads:1024"),
                       doctest::Contains("less than or equal to 128"), std::invalid_argument);
}

TEST_CASE("settings: per_process_memory_fraction caps a new allocator from the start; 1.0 sets no cap") {
  // A 1 GiB card: 0.25 allows 268435456 bytes (1073741824 / 4).
  auto capped = make_allocator(AllocatorConfig::parse("per_process_memory_fraction:0.25"), {GiB, 0});
  CHECK(capped->memory_fraction() == 0.25);
  CHECK_THROWS_AS(capped->malloc(300 * MiB), OutOfMemoryError);
  try {
    capped->malloc(300 * MiB);
  } catch (const OutOfMemoryError& error) {
    REQUIRE(error.has_report());
    CHECK(error.report().allowed_bytes == 268435456);
  }
  auto uncapped = make_allocator(AllocatorConfig::parse("per_process_memory_fraction:1.0"), {GiB, 0});
  try {
    uncapped->malloc(2 * GiB);
  } catch (const OutOfMemoryError& error) {
    CHECK_FALSE(error.report().allowed_bytes.has_value());  // no "allowed" in the message, as with no setting
  }
}

TEST_CASE("settings: set_allocator_settings changes existing allocators between allocations") {
  EmptyDevice fresh(kSim);
  CachingAllocator& alloc = caching_allocator(kSim);
  void* ordinary = alloc.malloc(30 * MiB);  // a 30 MiB segment (ordinary)
  set_allocator_settings("expandable_segments:True");
  CHECK(alloc.config().expandable_segments);
  void* grown = alloc.malloc(30 * MiB);  // a new segment follows the new setting
  const MemorySnapshot snap = alloc.snapshot();
  REQUIRE(snap.segments.size() == 2);
  int expandable = 0;
  for (const SegmentInfo& segment : snap.segments) expandable += segment.is_expandable ? 1 : 0;
  CHECK(expandable == 1);
  // A bad setting throws, names the call and changes nothing.
  CHECK_THROWS_WITH_AS(set_allocator_settings("expandable_segments:true"),
                       doctest::Contains("set_allocator_settings('expandable_segments:true')"), std::invalid_argument);
  CHECK(alloc.config().expandable_segments);
  // Allocators made later start with the settings.
  {
    EmptyDevice later(kMeta);
    CHECK(caching_allocator(kMeta).config().expandable_segments);
  }
  alloc.free(ordinary);
  alloc.free(grown);
  set_allocator_settings("expandable_segments:False");
  CHECK_FALSE(alloc.config().expandable_segments);
  set_allocator_settings("max_split_size_mb:40");
  CHECK(memory_stats(kSim).at("max_split_size") == 40 * static_cast<int64_t>(MiB));
  set_allocator_settings("");
  CHECK(memory_stats(kSim).at("max_split_size") == -1);
}

TEST_CASE("settings: the out-of-memory observer sees the cap and may read the allocator's figures") {
  auto alloc = make_allocator({}, {GiB, 0});
  alloc->set_memory_fraction(0.5);  // 536870912 bytes allowed
  int calls = 0;
  OutOfMemoryNotice seen;
  int64_t allocated_seen = -1;
  alloc->attach_out_of_memory_observer([&](const OutOfMemoryNotice& notice) {
    ++calls;
    seen = notice;
    allocated_seen = alloc->memory_allocated();  // the allocator's lock is not held
  });
  void* kept = alloc->malloc(100 * MiB);
  CHECK_THROWS_AS(alloc->malloc(600 * MiB), OutOfMemoryError);
  CHECK(calls == 1);
  CHECK(seen.alloc_bytes == 600 * MiB);        // a multiple of 2 MiB: the segment tried is the request
  CHECK(seen.device_allowed == 536870912);     // 1073741824 / 2
  CHECK(seen.device_free == GiB - 100 * MiB);  // the card less the 100 MiB segment
  CHECK(allocated_seen == static_cast<int64_t>(100 * MiB));
  CHECK_THROWS_AS(alloc->attach_out_of_memory_observer(nullptr), std::invalid_argument);
  alloc->free(kept);
}
