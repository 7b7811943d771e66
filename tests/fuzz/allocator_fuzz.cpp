// The allocator fuzzer: episodes of random malloc / free / empty_cache / set_memory_fraction /
// reset_peak_stats, each episode under a random BYTEGRAD_ALLOC_CONF (tests/fuzz/fuzz_support.h) and a random
// sim capacity, small enough that out-of-memory happens. Every call is checked by CheckedAllocator
// (tests/support/allocator_invariants.h): the model's block, the tiling, every statistic against its sum,
// an OOM that changes only its counters, and each live block's bytes intact until it is freed. Half the
// episodes configure the process's sim device through the registry (BYTEGRAD_ALLOC_CONF +
// configure_simulated_device), some of them with a broken setting that must be refused with the device's
// previous allocator left in place.
#include <doctest/doctest.h>

#include <chrono>
#include <limits>
#include <memory>
#include <random>

#include "bytegrad/memory/device_allocators.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/support/allocator_invariants.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

constexpr size_t MiB = size_t{1} << 20;

struct Episode {
  SimulatedCapacity capacity;
  size_t max_request;
  size_t live_budget;  // free instead of allocating above this many live bytes (0: let OOM stop it)
};

Episode random_episode(std::mt19937& rng) {
  Episode e;
  switch (rng() % 4) {
    case 0:  // a tiny card: OOM within a few requests
      e.capacity.total_bytes = (8 + rng() % 56) * MiB;
      e.capacity.context_bytes = (rng() % 4) * MiB;
      e.max_request = 40 * MiB;
      e.live_budget = 0;
      break;
    case 1:
    case 2:  // a small card, requests up to half of it
      e.capacity.total_bytes = (64 + rng() % 448) * MiB;
      e.capacity.context_bytes = (rng() % 16) * MiB;
      e.max_request = e.capacity.total_bytes / 2;
      e.live_budget = rng() % 2 ? e.capacity.total_bytes / 2 : 0;
      break;
    default:  // the modelled H100, kept to a live budget
      e.max_request = 64 * MiB;
      e.live_budget = 512 * MiB;
      break;
  }
  return e;
}

// Corrupts a valid setting so that it must be refused: an unknown key, a value below a floor, a non-power
// of two, a threshold outside (0, 1), or a dangling key.
std::string broken_alloc_conf(std::mt19937& rng, const std::string& valid) {
  static const char* kBroken[] = {"max_split_size_mb:19",           "unknown_option:1",
                                  "roundup_power2_divisions:3",     "garbage_collection_threshold:1.0",
                                  "max_non_split_rounding_mb:x",    "large_segment_size_mb:",
                                  "roundup_power2_divisions:[3:4]", "expandable_segments:maybe"};
  const std::string bad = kBroken[rng() % std::size(kBroken)];
  return valid.empty() ? bad : valid + "," + bad;
}

double random_fraction(std::mt19937& rng) {
  switch (rng() % 10) {
    case 0: return -0.25;                                     // refused
    case 1: return 1.5;                                       // refused
    case 2: return std::numeric_limits<double>::quiet_NaN();  // refused
    case 3: return 0.0;
    case 4: return 1.0;
    default: return std::uniform_real_distribution<double>(0.05, 1.0)(rng);
  }
}

size_t random_size(std::mt19937& rng, const Episode& episode) {
  switch (rng() % 200) {
    case 0: return kOneExaByte + rng() % 4096;  // refused outright
    case 1: return std::numeric_limits<size_t>::max() - rng() % 4096;
    case 2: return kOneExaByte - 1 - rng() % 4096;              // tried, and out of memory
    case 3: return episode.capacity.total_bytes + rng() % MiB;  // more than the card
    default: return random_request_size(rng, episode.max_request);
  }
}

}  // namespace

TEST_CASE("fuzz: the caching allocator under random configurations, fractions and capacities") {
  const uint64_t operations = fuzz_iterations("ALLOCATOR", 200000);
  const uint64_t seed = fuzz_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const auto start = std::chrono::steady_clock::now();
  CheckedAllocator::Counts total;
  uint64_t done = 0, episodes = 0, refused_configs = 0;
  bool ok = true;
  while (ok && done < operations) {
    const Episode episode = random_episode(rng);
    const GeneratedAllocConf conf = random_alloc_conf(rng);
    const uint64_t steps = std::min<uint64_t>(operations - done, 100 + rng() % 3000);
    INFO("seed " << seed << ", episode " << episodes << ": BYTEGRAD_ALLOC_CONF='" << conf.text << "', capacity "
                 << episode.capacity.total_bytes << " bytes (context " << episode.capacity.context_bytes << ")");
    std::unique_ptr<CachingAllocator> own;
    CachingAllocator* allocator = nullptr;
    if (rng() % 2) {
      own = std::make_unique<CachingAllocator>(make_host_backed_raw_memory(episode.capacity),
                                               AllocatorConfig::parse(conf.text));
      allocator = own.get();
    } else {
      // Through the registry: a broken setting first (refused, the previous allocator kept), then the real one.
      if (rng() % 4 == 0) {
        const CachingAllocator* previous = &caching_allocator(kSim);
        const int64_t previous_segments = previous->stats().num_device_alloc;
        const SimulatedCapacity previous_capacity = simulated_capacity(kSim);
        const std::string bad = broken_alloc_conf(rng, conf.text);
        INFO("broken BYTEGRAD_ALLOC_CONF='" << bad << "'");
        ScopedEnv env("BYTEGRAD_ALLOC_CONF", bad.c_str());
        CHECK_THROWS_AS(configure_simulated_device(kSim, episode.capacity), std::invalid_argument);
        CHECK(&caching_allocator(kSim) == previous);
        CHECK(caching_allocator(kSim).stats().num_device_alloc == previous_segments);
        CHECK(simulated_capacity(kSim).total_bytes == previous_capacity.total_bytes);
        ++refused_configs;
      }
      ScopedEnv env("BYTEGRAD_ALLOC_CONF", conf.text.c_str());
      configure_simulated_device(kSim, episode.capacity);
      allocator = &caching_allocator(kSim);
    }
    const AllocatorConfig& config = allocator->config();
    CHECK(config.max_split_size == conf.expected.max_split_size);
    CHECK(config.large_segment_size == conf.expected.large_segment_size);
    CHECK(config.roundup_power2_divisions == conf.expected.roundup_power2_divisions);

    CheckedAllocator checked(*allocator, episode.capacity, /*fill_blocks=*/true);
    for (uint64_t step = 0; step < steps && checked.ok(); ++step) {
      INFO("step " << step);
      const int roll = static_cast<int>(rng() % 1000);
      const bool over_budget = episode.live_budget != 0 && checked.live_bytes() > episode.live_budget;
      if (roll < 10) checked.empty_cache();
      else if (roll < 15) checked.set_memory_fraction(random_fraction(rng));
      else if (roll < 20) checked.reset_peak_stats();
      else if (checked.live_count() > 0 && (roll < 450 || over_budget)) checked.free(rng() % checked.live_count());
      else checked.malloc(random_size(rng, episode), rng() % 5 == 0 ? 1 : 0);
    }
    checked.free_all_and_flush();
    ok = checked.ok();
    const auto& c = checked.counts();
    total.mallocs += c.mallocs, total.cache_hits += c.cache_hits, total.frees += c.frees, total.flushes += c.flushes,
        total.ooms += c.ooms, total.too_large += c.too_large, total.fractions += c.fractions,
        total.peak_resets += c.peak_resets;
    done += steps;
    ++episodes;
  }
  configure_simulated_device(kSim, {});  // the modelled H100 again, default settings
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("allocator fuzz, seed " << seed << ": " << done << " operations in " << episodes << " episodes, " << seconds
                                  << " s: " << total.mallocs << " mallocs (" << total.cache_hits << " from the cache, "
                                  << total.ooms << " OOMs, " << total.too_large << " over 1 EB), " << total.frees
                                  << " frees, " << total.flushes << " empty_cache, " << total.fractions
                                  << " fractions, " << total.peak_resets << " peak resets, " << refused_configs
                                  << " broken settings refused");
  CHECK(done == operations);
  // The run must have reached what it is meant to test (true for any seed at the CI default and above).
  if (operations >= 10000) {
    CHECK(total.ooms > 0);
    CHECK(total.cache_hits > 0);
    CHECK(refused_configs > 0);
  }
}
