// Long randomized runs (seeded std::mt19937) of malloc / free / empty_cache under the model and invariant
// checks of tests/support/allocator_invariants.h (the allocator fuzzer, tests/fuzz, adds configuration changes,
// memory fractions and peak resets).
#include <doctest/doctest.h>

#include <random>

#include "helpers.h"
#include "tests/support/allocator_invariants.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct Variant {
  const char* name;
  const char* config;
  SimulatedCapacity capacity;
  size_t max_request;  // largest request drawn
  size_t live_budget;  // free instead of allocating above this many live bytes (0: no limit)
  int steps;
  bool two_streams;
};

void run_variant(const Variant& variant, uint32_t seed) {
  INFO("variant '" << std::string(variant.name) << "', seed " << seed);
  auto allocator = make_allocator(AllocatorConfig::parse(variant.config), variant.capacity);
  CheckedAllocator checked(*allocator, variant.capacity);
  std::mt19937 rng(seed);
  for (int step = 0; step < variant.steps && checked.ok(); ++step) {
    INFO("step " << step);
    const int roll = static_cast<int>(rng() % 1000);
    const bool over_budget = variant.live_budget != 0 && checked.live_bytes() > variant.live_budget;
    if (roll < 15) {
      checked.empty_cache();
    } else if (checked.live_count() > 0 && (roll < 450 || over_budget)) {
      checked.free(rng() % checked.live_count());
    } else {
      const size_t n = random_request_size(rng, variant.max_request);
      checked.malloc(n, variant.two_streams && rng() % 5 == 0 ? 1 : 0);
    }
  }
  const auto& counts = checked.counts();
  MESSAGE(std::string(variant.name) << ": " << counts.mallocs << " mallocs (" << counts.cache_hits
                                    << " from the cache), " << counts.frees << " frees, " << counts.flushes
                                    << " empty_cache, " << counts.ooms << " OOMs");
  CHECK(counts.mallocs > variant.steps / 3);
  CHECK(counts.frees > variant.steps / 4);
  CHECK(counts.cache_hits > 0);
  if (variant.capacity.total_bytes < 1 * GiB) CHECK(counts.ooms > 0);
  // Clean up: everything freed and flushed leaves nothing behind.
  checked.free_all_and_flush();
}

}  // namespace

TEST_CASE("randomized invariants: default config, two streams") {
  run_variant({"default", "", {}, 30 * MiB, 512 * MiB, 4000, true}, 20240611);
}

TEST_CASE("randomized invariants: small device, OOMs caught") {
  run_variant({"small device", "", {160 * MiB, 8 * MiB}, 30 * MiB, 0, 4000, false}, 7);
}

TEST_CASE("randomized invariants: max_split_size_mb:40") {
  // Requests up to 64 MiB so that oversize blocks (>= 40 MiB) exist; a 512 MiB device so that
  // release_available_cached_blocks (attempt B) runs.
  run_variant({"max_split_size_mb:40", "max_split_size_mb:40", {512 * MiB, 0}, 64 * MiB, 0, 4000, true}, 99);
}

TEST_CASE("randomized invariants: roundup_power2_divisions:4") {
  run_variant({"roundup_power2_divisions:4", "roundup_power2_divisions:4", {}, 30 * MiB, 512 * MiB, 4000, false}, 3);
}

TEST_CASE("randomized invariants: mixed options on a small device") {
  run_variant({"mixed",
               "max_split_size_mb:24,max_non_split_rounding_mb:24,roundup_power2_divisions:[2:4,>:2]",
               {256 * MiB, 0},
               48 * MiB,
               0,
               3000,
               true},
              12345);
}
