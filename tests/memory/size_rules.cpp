// Reference sections 2.1-2.4 (round_size, roundup_power2_divisions, pool, segment size), 4.7 (should_split)
// and 7.4 (format_size), each with the document's examples; plus the same rules seen through an allocator.
#include <doctest/doctest.h>

#include "helpers.h"
#include "bytegrad/memory/format_size.h"
#include "bytegrad/memory/size_rules.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("section 1 constants") {
  CHECK(kMinBlockSize == 512);
  CHECK(kSmallSize == 1048576);
  CHECK(kSmallBuffer == 2097152);
  CHECK(kMinLargeAlloc == 10485760);
  CHECK(kRoundLarge == 2097152);
  const AllocatorConfig defaults;
  CHECK(defaults.large_segment_size == 20971520);           // kLargeBuffer
  CHECK(defaults.max_non_split_rounding_size == 20971520);  // default 20 MiB
  CHECK(defaults.max_split_size == SIZE_MAX);
  CHECK(defaults.garbage_collection_threshold == 0.0);
  for (size_t d : defaults.roundup_power2_divisions) CHECK(d == 0);
}

TEST_CASE("2.1 round_size with the default config: 512 minimum, 512 multiples") {
  const AllocatorConfig config;
  CHECK(round_size(1, config) == 512);  // n < 512 -> 512
  CHECK(round_size(4, config) == 512);  // torch.empty(1) fp32 (section 13)
  CHECK(round_size(511, config) == 512);
  CHECK(round_size(512, config) == 512);
  CHECK(round_size(513, config) == 1024);  // ceil(513 / 512) * 512
  CHECK(round_size(1000, config) == 1024);
  CHECK(round_size(1048576, config) == 1048576);
  CHECK(round_size(1048577, config) == 1049088);    // measured (2.3)
  CHECK(round_size(9436672, config) == 9436672);    // already a 512 multiple (section 13, e)
  CHECK(round_size(26214401, config) == 26214912);  // 25 MiB + 1 -> next 512 multiple: 26214400 + 512
  // Without power-2 rounding nothing is rounded to a power of two.
  CHECK(round_size(1228800, config) == 1228800);
}

TEST_CASE("2.1 roundup_power2_next_division") {
  // n = 1200 KiB with d = 4: f = 1 MiB, step = 256 KiB -> 1280 KiB.
  CHECK(roundup_power2_next_division(1200 * KiB, 4) == 1280 * KiB);
  // A power of two is returned unchanged.
  CHECK(roundup_power2_next_division(4 * MiB, 4) == 4 * MiB);
  CHECK(roundup_power2_next_division(1024, 8) == 1024);
  // step = f >> floor(log2(d)) == 0 -> 2f: f = 2 (n = 3), d = 8 -> step 2 >> 3 = 0 -> 4.
  CHECK(roundup_power2_next_division(3, 8) == 4);
  // Already on a step boundary: 1280 KiB with d = 4 (step 256 KiB) stays.
  CHECK(roundup_power2_next_division(1280 * KiB, 4) == 1280 * KiB);
}

TEST_CASE("2.2 measured rounding with roundup_power2_divisions:4") {
  const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:4");
  CHECK(round_size(1228800, config) == 1310720);
  CHECK(round_size(5 * MiB + 1, config) == 6291456);
  CHECK(round_size(1000, config) == 1024);  // 1000 < 512 * 4: ordinary 512 rounding
  CHECK(round_size(3000, config) == 3072);
  CHECK(round_size(2049, config) == 2560);
  CHECK(round_size(33 * MiB, config) == 41943040);
  // n == 512 * d exactly is not > 512 * d: ordinary rounding (2048 is a 512 multiple anyway).
  CHECK(round_size(2048, config) == 2048);
}

TEST_CASE("2.2 measured rounding with roundup_power2_divisions:[256:1,512:2,>:8]") {
  const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]");
  CHECK(round_size(1228800, config) == 1228800);
  CHECK(round_size(300 * MiB, config) == 314572800);
  CHECK(round_size(700 * MiB, config) == 805306368);
  CHECK(round_size(1100 * MiB, config) == 1207959552);
}

TEST_CASE("2.2 a division count of 1 means no power-2 rounding (2.11: the test is d > 1)") {
  const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:1");
  CHECK(round_size(1228800, config) == 1228800);
  CHECK(round_size(5 * MiB + 1, config) == 5 * MiB + 512);
}

TEST_CASE("2.2 interval slots: floor(log2(n)) - 20, clamped to 0..15") {
  AllocatorConfig config;
  for (size_t i = 0; i < kRoundupPower2Intervals; ++i) config.roundup_power2_divisions[i] = size_t{1} << i;
  CHECK(config.divisions_for(1000) == 1);     // below 1 MiB: slot 0
  CHECK(config.divisions_for(1 * MiB) == 1);  // [1, 2) MiB: slot 0
  CHECK(config.divisions_for(2 * MiB - 1) == 1);
  CHECK(config.divisions_for(2 * MiB) == 2);                    // [2, 4) MiB: slot 1
  CHECK(config.divisions_for(32 * GiB) == (size_t{1} << 15));   // [32, 64) GiB: slot 15
  CHECK(config.divisions_for(128 * GiB) == (size_t{1} << 15));  // 64 GiB and above: clamped to slot 15
}

TEST_CASE("2.3 pool: the rounded size decides, 1 MiB is the boundary") {
  const AllocatorConfig config;
  CHECK(pool_for(512) == PoolKind::small);
  CHECK(pool_for(1048576) == PoolKind::small);
  CHECK(pool_for(1049088) == PoolKind::large);
  // 1048577 bytes rounds to 1049088 and goes to the large pool (measured).
  CHECK(pool_for(round_size(1048577, config)) == PoolKind::large);
}

TEST_CASE("2.4 segment size examples") {
  const AllocatorConfig config;
  auto segment_for_request = [&](size_t n) { return segment_size_for(round_size(n, config), config); };
  CHECK(segment_for_request(1) == 2 * MiB);
  CHECK(segment_for_request(1 * MiB) == 2 * MiB);  // 1 MiB rounds to 1 MiB: still small
  CHECK(segment_for_request(1 * MiB + 1) == 20 * MiB);
  CHECK(segment_for_request(9 * MiB) == 20 * MiB);
  CHECK(segment_for_request(10 * MiB - 512) == 20 * MiB);  // 10485248 < 10 MiB
  CHECK(segment_for_request(10 * MiB - 1) == 10 * MiB);    // rounds up to 10485760 = 10 MiB
  CHECK(segment_for_request(10 * MiB) == 10 * MiB);
  CHECK(segment_for_request(19 * MiB + 512 * KiB) == 20 * MiB);  // 19.5 MiB
  CHECK(segment_for_request(25 * MiB) == 26 * MiB);
  CHECK(segment_for_request(25 * MiB + 1) == 26 * MiB);
  CHECK(segment_for_request(120 * MiB + 1) == 122 * MiB);
  CHECK(segment_for_request(150 * MiB) == 150 * MiB);
  // A larger large_segment_size replaces the 20 MiB for 1-10 MiB requests only.
  AllocatorConfig big = config;
  big.large_segment_size = 40 * MiB;
  CHECK(segment_size_for(round_size(5 * MiB, big), big) == 40 * MiB);
  CHECK(segment_size_for(round_size(25 * MiB, big), big) == 26 * MiB);
}

TEST_CASE("4.7 should_split") {
  const AllocatorConfig config;
  // Small pool: split iff the remainder is at least 512.
  CHECK(should_split(PoolKind::small, 2 * MiB, 512, config));
  CHECK(should_split(PoolKind::small, 2 * MiB, 2 * MiB - 512, config));  // remainder 512
  CHECK_FALSE(should_split(PoolKind::small, 2 * MiB, 2 * MiB, config));  // remainder 0
  CHECK_FALSE(should_split(PoolKind::small, 1024, 1024, config));
  // Large pool: split iff the remainder is > 1 MiB (strictly).
  CHECK_FALSE(should_split(PoolKind::large, 26 * MiB, 25 * MiB, config));  // remainder exactly 1 MiB (measured)
  CHECK(should_split(PoolKind::large, 26 * MiB, 25 * MiB - 512, config));  // remainder 1 MiB + 512
  CHECK_FALSE(should_split(PoolKind::large, 20 * MiB, 20447232, config));  // 19.5 MiB: remainder 0.5 MiB
  CHECK(should_split(PoolKind::large, 20 * MiB, 1049088, config));         // c of section 13
  // ... and only for requests below max_split_size.
  const AllocatorConfig capped = AllocatorConfig::parse("max_split_size_mb:100");
  CHECK_FALSE(should_split(PoolKind::large, 150 * MiB, 100 * MiB, capped));  // s >= max_split_size
  CHECK(should_split(PoolKind::large, 150 * MiB, 100 * MiB - 512, capped));  // s < max_split_size
  CHECK_FALSE(should_split(PoolKind::large, 150 * MiB, 140 * MiB, capped));  // section 8.4
}

TEST_CASE("4.7/4.8 through the allocator: unsplit blocks are handed out whole") {
  auto allocator = make_allocator();
  SUBCASE("25 MiB in a 26 MiB segment allocates all 26 MiB (measured)") {
    void* p = allocator->malloc(25 * MiB);
    CHECK(allocator->block_size(p) == 26 * MiB);
    CHECK(stat(*allocator, "allocated_bytes.all.current") == 27262976);  // 26 MiB
    CHECK(stat(*allocator, "requested_bytes.all.current") == 26214400);  // 25 MiB
    CHECK(stat(*allocator, "inactive_split.all.current") == 0);
  }
  SUBCASE("19.5 MiB takes a fresh 20 MiB segment whole (measured)") {
    allocator->malloc(20447232);
    CHECK(stat(*allocator, "allocated_bytes.all.current") == 20971520);
    CHECK(stat(*allocator, "requested_bytes.all.current") == 20447232);
  }
  SUBCASE("1048577 bytes go to the large pool (measured)") {
    allocator->malloc(1048577);
    CHECK(stat(*allocator, "allocated_bytes.large_pool.current") == 1049088);
    CHECK(stat(*allocator, "allocated_bytes.small_pool.current") == 0);
    CHECK(stat(*allocator, "reserved_bytes.large_pool.current") == 20971520);
    CHECK(stat(*allocator, "segment.large_pool.current") == 1);
  }
  SUBCASE("power-2 rounding reaches the block size and the stats") {
    auto rounded = make_allocator(AllocatorConfig::parse("roundup_power2_divisions:4"));
    void* p = rounded->malloc(1228800);
    CHECK(rounded->block_size(p) == 1310720);
    CHECK(stat(*rounded, "allocated_bytes.all.current") == 1310720);
    CHECK(stat(*rounded, "requested_bytes.all.current") == 1228800);
  }
  SUBCASE("0 bytes never reach the allocator") {
    CHECK(allocator->malloc(0) == nullptr);
    for (const auto& [key, value] : allocator->memory_stats())
      if (key != "max_split_size") CHECK_MESSAGE(value == 0, key);
  }
}

TEST_CASE("7.4 format_size") {
  CHECK(format_size(0) == "0 bytes");
  CHECK(format_size(512) == "512 bytes");
  CHECK(format_size(1024) == "1024 bytes");
  CHECK(format_size(1025) == "1.00 KiB");
  CHECK(format_size(1048576) == "1024.00 KiB");
  CHECK(format_size(1048577) == "1.00 MiB");
  CHECK(format_size(2097152) == "2.00 MiB");
  CHECK(format_size(1073741824) == "1024.00 MiB");
  CHECK(format_size(1073741825) == "1.00 GiB");
  CHECK(format_size(200 * GiB) == "200.00 GiB");
  // No TiB: 2 TiB = 2048 GiB.
  CHECK(format_size(2048 * GiB) == "2048.00 GiB");
  // Figures of the measured OOM messages (7.2): the H100's total 85017493504 B, 7 MiB and 13 MiB,
  // the 0.01 and 1e-6 fraction caps (850174935 and 85017 B).
  CHECK(format_size(85017493504) == "79.18 GiB");
  CHECK(format_size(7 * MiB) == "7.00 MiB");
  CHECK(format_size(13 * MiB) == "13.00 MiB");
  CHECK(format_size(850174935) == "810.79 MiB");
  CHECK(format_size(85017) == "83.02 KiB");
  CHECK(format_size(610 * MiB) == "610.00 MiB");
  // printf "%.2f" rounding: 1535 / 1024 = 1.49902... -> "1.50"; 1029 / 1024 = 1.00488... -> "1.00".
  CHECK(format_size(1535) == "1.50 KiB");
  CHECK(format_size(1029) == "1.00 KiB");
}
