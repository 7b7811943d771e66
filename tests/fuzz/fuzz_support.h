// What the seeded fuzzers share: their iteration count and seed from the environment, and a generator of
// BYTEGRAD_ALLOC_CONF text from the grammar's tokens together with the configuration it must parse to.
//   BYTEGRAD_FUZZ_ITERATIONS   each fuzzer's count (allocator operations, trace inputs, configuration strings)
//   BYTEGRAD_FUZZ_<NAME>_ITERATIONS  one fuzzer's count (NAME: ALLOCATOR, TRACE, CONFIG), over the above
//   BYTEGRAD_FUZZ_SEED         the seed (default 1); a failure prints the seed and the input to reproduce it
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/memory/alloc_config.h"

namespace bytegrad::testing {

inline uint64_t fuzz_env_number(const std::string& name, uint64_t fallback) {
  const char* text = std::getenv(name.c_str());
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0') throw std::invalid_argument(name + "='" + text + "' is not a non-negative integer");
  return value;
}

// `name`'s iteration count: BYTEGRAD_FUZZ_<name>_ITERATIONS, else BYTEGRAD_FUZZ_ITERATIONS, else the short
// default CI runs.
inline uint64_t fuzz_iterations(const std::string& name, uint64_t ci_default) {
  return fuzz_env_number("BYTEGRAD_FUZZ_" + name + "_ITERATIONS",
                         fuzz_env_number("BYTEGRAD_FUZZ_ITERATIONS", ci_default));
}

inline uint64_t fuzz_seed() { return fuzz_env_number("BYTEGRAD_FUZZ_SEED", 1); }

struct GeneratedAllocConf {
  std::string text;
  AllocatorConfig expected;  // what AllocatorConfig::parse(text) must return (raw aside)
};

// A valid BYTEGRAD_ALLOC_CONF: a random subset of the options in random order, with random whitespace and
// stray commas, and the configuration each option implies (computed here, not by the parser). Sizes stay
// small enough that a few-hundred-MiB device meets every rule: max_split_size_mb near the segment sizes,
// large_segment_size_mb up to 64.
inline GeneratedAllocConf random_alloc_conf(std::mt19937& rng) {
  GeneratedAllocConf out;
  AllocatorConfig& want = out.expected;
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto space = [&] {
    static const char* kSpaces[] = {"", "", "", " ", "\t", "  ", "\n"};
    return std::string(kSpaces[pick(std::size(kSpaces))]);
  };
  auto power_of_two = [&](uint32_t max_log2) { return size_t{1} << pick(max_log2 + 1); };
  std::vector<std::string> options;
  if (pick(2)) {
    const size_t mb = 20 + pick(pick(4) ? 100 : 5000);
    want.max_split_size = mb * kMiB;
    options.push_back("max_split_size_mb:" + space() + std::to_string(mb));
  }
  if (pick(3) == 0) {
    const size_t mb = 20 + pick(200);
    want.max_non_split_rounding_size = mb * kMiB;
    options.push_back("max_non_split_rounding_mb:" + std::to_string(mb));
  }
  if (pick(4) == 0) {
    const size_t mb = 20 + pick(45);
    want.large_segment_size = mb * kMiB;
    options.push_back("large_segment_size_mb:" + std::to_string(mb));
  }
  if (pick(3) == 0) {
    const int percent = 1 + static_cast<int>(pick(99));
    want.garbage_collection_threshold =
        std::stod("0." + std::string(percent < 10 ? "0" : "") + std::to_string(percent));
    options.push_back("garbage_collection_threshold:0." + std::string(percent < 10 ? "0" : "") +
                      std::to_string(percent));
  }
  if (pick(2)) {
    if (pick(3) == 0) {  // one count for every interval
      const size_t divisions = power_of_two(5);
      want.roundup_power2_divisions.fill(divisions);
      options.push_back("roundup_power2_divisions:" + std::to_string(divisions));
    } else {  // [interval:count,...,>:count] over increasing intervals (MB, powers of two)
      std::string list = "[";
      size_t slot = pick(4);
      bool first = true;
      size_t last_slot = 0;
      const uint32_t entries = 1 + pick(4);
      for (uint32_t i = 0; i < entries && slot < kRoundupPower2Intervals; ++i) {
        const size_t divisions = pick(5) == 0 ? 0 : power_of_two(4);
        if (first)
          for (size_t s = 0; s < slot; ++s) want.roundup_power2_divisions[s] = divisions;
        first = false;
        want.roundup_power2_divisions[slot] = divisions;
        last_slot = slot;
        list += (i ? "," + space() : "") + std::to_string(size_t{1} << slot) + ":" + std::to_string(divisions);
        slot += 1 + pick(3);
      }
      if (pick(2)) {
        const size_t divisions = power_of_two(4);
        for (size_t s = last_slot + 1; s < kRoundupPower2Intervals; ++s) want.roundup_power2_divisions[s] = divisions;
        list += ",>:" + std::to_string(divisions);
      }
      options.push_back("roundup_power2_divisions:" + list + "]");
    }
  }
  if (pick(6) == 0) options.push_back("expandable_segments:" + std::string("False"));
  if (pick(6) == 0) options.push_back("backend:native");
  if (pick(6) == 0) options.push_back("release_lock_on_cudamalloc:" + std::string(pick(2) ? "True" : "False"));
  if (pick(8) == 0) options.push_back("pinned_num_register_threads:" + std::to_string(size_t{1} << pick(8)));
  std::shuffle(options.begin(), options.end(), rng);
  for (size_t i = 0; i < options.size(); ++i) {
    if (i) out.text += space() + "," + (pick(10) == 0 ? "," : "") + space();
    out.text += options[i];
  }
  return out;
}

}  // namespace bytegrad::testing
