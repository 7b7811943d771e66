// AllocatorConfig::parse: PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax (reference sections 1 and 2.2), valid
// forms and the errors, each std::invalid_argument naming what is at fault.
#include <doctest/doctest.h>

#include <stdexcept>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// Parses `text`, expecting std::invalid_argument whose message contains every one of `names`.
void check_rejected(const std::string& text, std::initializer_list<std::string> names) {
  INFO("config '" << text << "'");
  try {
    (void)AllocatorConfig::parse(text);
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const std::string& name : names)
      CHECK_MESSAGE(message.find(name) != std::string::npos,
                    "message '" << message << "' should name '" << name << "'");
  }
}

}  // namespace

TEST_CASE("config: empty text gives the defaults of section 1") {
  const AllocatorConfig config = AllocatorConfig::parse("");
  CHECK(config.raw.empty());
  CHECK(config.max_split_size == SIZE_MAX);
  CHECK(config.max_non_split_rounding_size == 20 * MiB);
  CHECK(config.large_segment_size == 20 * MiB);
  CHECK(config.garbage_collection_threshold == 0.0);
  for (size_t d : config.roundup_power2_divisions) CHECK(d == 0);
}

TEST_CASE("config: valid forms") {
  SUBCASE("max_split_size_mb") {
    const AllocatorConfig config = AllocatorConfig::parse("max_split_size_mb:100");
    CHECK(config.max_split_size == 104857600);  // 100 * 1048576 (section 8.4)
    CHECK(config.raw == "max_split_size_mb:100");
    // The minimum allowed is kLargeBuffer = 20 MiB (section 1: N >= 20).
    CHECK(AllocatorConfig::parse("max_split_size_mb:20").max_split_size == 20 * MiB);
  }
  SUBCASE("max_non_split_rounding_mb") {
    CHECK(AllocatorConfig::parse("max_non_split_rounding_mb:64").max_non_split_rounding_size == 64 * MiB);
  }
  SUBCASE("whitespace is ignored") {
    const AllocatorConfig config =
        AllocatorConfig::parse(" max_split_size_mb : 100 , garbage_collection_threshold : 0.6 ");
    CHECK(config.max_split_size == 100 * MiB);
    CHECK(config.garbage_collection_threshold == doctest::Approx(0.6));
  }
  SUBCASE("legacy roundup_power2_divisions:4 sets all 16 slots") {
    const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:4");
    for (size_t d : config.roundup_power2_divisions) CHECK(d == 4);
  }
  SUBCASE("list form [256:1,512:2,>:8]") {
    const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,>:8]");
    // Key K (MB) -> slot log2(K): 256 -> 8, 512 -> 9. The first key fills every slot below it; `>` fills the
    // slots after the last listed key (the measured 700 MiB -> 768 MiB shows slot 9 kept its 2).
    for (size_t slot = 0; slot <= 8; ++slot) CHECK(config.roundup_power2_divisions[slot] == 1);
    CHECK(config.roundup_power2_divisions[9] == 2);
    for (size_t slot = 10; slot < kRoundupPower2Intervals; ++slot) CHECK(config.roundup_power2_divisions[slot] == 8);
    CHECK(config.divisions_for(1 * MiB) == 1);
    CHECK(config.divisions_for(300 * MiB) == 1);
    CHECK(config.divisions_for(700 * MiB) == 2);
    CHECK(config.divisions_for(1100 * MiB) == 8);
    CHECK(config.divisions_for(100 * GiB) == 8);
  }
  SUBCASE("list form: 0 disables a slot") {
    const AllocatorConfig config = AllocatorConfig::parse("roundup_power2_divisions:[1:4,2:0,>:2]");
    CHECK(config.roundup_power2_divisions[0] == 4);
    CHECK(config.roundup_power2_divisions[1] == 0);
    for (size_t slot = 2; slot < kRoundupPower2Intervals; ++slot) CHECK(config.roundup_power2_divisions[slot] == 2);
  }
  SUBCASE("garbage_collection_threshold") {
    CHECK(AllocatorConfig::parse("garbage_collection_threshold:0.6").garbage_collection_threshold ==
          doctest::Approx(0.6));
  }
  SUBCASE("several options, and accepted options without effect on accounting") {
    const AllocatorConfig config = AllocatorConfig::parse(
        "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6,"
        "expandable_segments:False,backend:native,release_lock_on_cudamalloc:True");
    CHECK(config.max_split_size == 64 * MiB);
    CHECK(config.roundup_power2_divisions[9] == 2);
    CHECK(config.garbage_collection_threshold == doctest::Approx(0.6));
    CHECK_FALSE(config.expandable_segments);
  }
  SUBCASE("expandable segments on, alone and with other keys") {
    CHECK_FALSE(AllocatorConfig::parse("").expandable_segments);
    CHECK(AllocatorConfig::parse("expandable_segments:True").expandable_segments);
    const AllocatorConfig config = AllocatorConfig::parse("max_split_size_mb:64,expandable_segments:True");
    CHECK(config.expandable_segments);
    CHECK(config.max_split_size == 64 * MiB);
  }
}

TEST_CASE("config: errors name the key or value at fault") {
  SUBCASE("unknown key") { check_rejected("max_spilt_size_mb:100", {"max_spilt_size_mb"}); }
  SUBCASE("unknown key after a valid one") { check_rejected("max_split_size_mb:100,foo:1", {"foo"}); }
  SUBCASE("max_split_size_mb below 20") { check_rejected("max_split_size_mb:19", {"max_split_size_mb", "19"}); }
  SUBCASE("max_split_size_mb of 0") { check_rejected("max_split_size_mb:0", {"max_split_size_mb"}); }
  SUBCASE("max_non_split_rounding_mb below 20") {
    check_rejected("max_non_split_rounding_mb:10", {"max_non_split_rounding_mb", "10"});
  }
  SUBCASE("non-integer size") { check_rejected("max_split_size_mb:abc", {"max_split_size_mb", "abc"}); }
  SUBCASE("negative size") { check_rejected("max_split_size_mb:-5", {"max_split_size_mb", "-5"}); }
  SUBCASE("legacy divisions not a power of two") {
    check_rejected("roundup_power2_divisions:3", {"roundup_power2_divisions", "3"});
  }
  SUBCASE("legacy divisions of 0 (the single value must be a power of two)") {
    check_rejected("roundup_power2_divisions:0", {"roundup_power2_divisions", "0"});
  }
  SUBCASE("list divisions not a power of two") {
    check_rejected("roundup_power2_divisions:[256:3]", {"roundup_power2_divisions", "3"});
  }
  SUBCASE("list interval not a power of two") {
    check_rejected("roundup_power2_divisions:[300:2]", {"roundup_power2_divisions", "300"});
  }
  SUBCASE("list not closed") { check_rejected("roundup_power2_divisions:[256:1", {"roundup_power2_divisions"}); }
  SUBCASE("list entry without a value") {
    check_rejected("roundup_power2_divisions:[256:]", {"roundup_power2_divisions"});
  }
  SUBCASE("garbage_collection_threshold of 0") {
    check_rejected("garbage_collection_threshold:0", {"garbage_collection_threshold", "0"});
  }
  SUBCASE("garbage_collection_threshold of 1") {
    check_rejected("garbage_collection_threshold:1", {"garbage_collection_threshold", "1"});
  }
  SUBCASE("garbage_collection_threshold above 1") {
    check_rejected("garbage_collection_threshold:1.5", {"garbage_collection_threshold", "1.5"});
  }
  SUBCASE("garbage_collection_threshold negative") {
    check_rejected("garbage_collection_threshold:-0.2", {"garbage_collection_threshold", "-0.2"});
  }
  SUBCASE("garbage_collection_threshold not a number") {
    check_rejected("garbage_collection_threshold:half", {"garbage_collection_threshold", "half"});
  }
  SUBCASE("key without value") { check_rejected("max_split_size_mb", {"max_split_size_mb"}); }
  SUBCASE("key and colon without value") { check_rejected("max_split_size_mb:", {"max_split_size_mb"}); }
  SUBCASE("wrong separator") { check_rejected("max_split_size_mb=100", {"max_split_size_mb=100"}); }
  SUBCASE("missing comma between options") { check_rejected("max_split_size_mb:100:200", {"max_split_size_mb"}); }
  SUBCASE("boolean option with a non-boolean") {
    check_rejected("expandable_segments:maybe", {"expandable_segments", "maybe"});
  }
  SUBCASE("unsupported backend") { check_rejected("backend:cudaMallocAsync", {"backend", "cudaMallocAsync"}); }
  SUBCASE("boolean options take only True or False, as PyTorch 2.11 (its message, with the token's index)") {
    // PyTorch 2.11 (tests/data/pytorch_probes/bad_inputs): "Expected 'True' or 'False' at index 2 in
    // ConfigTokenizer but got 'true'" for expandable_segments:true, :1 and release_lock_on_cudamalloc:true.
    for (const std::string setting :
         {"expandable_segments:true", "expandable_segments:1", "expandable_segments:false",
          "release_lock_on_cudamalloc:true", "pinned_use_background_threads:0", "pinned_use_cuda_host_register:yes"}) {
      const std::string key = setting.substr(0, setting.find(':'));
      const std::string value = setting.substr(setting.find(':') + 1);
      check_rejected(setting,
                     {key, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got '" + value + "'"});
    }
    // After another option the index counts every token before the value: "max_split_size_mb", ":", "64",
    // ",", "expandable_segments", ":" are 0 to 5.
    check_rejected("max_split_size_mb:64,expandable_segments:true", {"at index 6"});
  }
  SUBCASE("pinned_num_register_threads: a power of two, at most 128 (PyTorch 2.11)") {
    check_rejected("pinned_num_register_threads:1024", {"pinned_num_register_threads", "less than or equal to 128"});
    check_rejected("pinned_num_register_threads:3", {"pinned_num_register_threads", "power of 2"});
    CHECK_NOTHROW(AllocatorConfig::parse("pinned_num_register_threads:64"));
  }
}

TEST_CASE("memory_stats()[\"max_split_size\"]: -1 by default, the configured bytes otherwise") {
  CHECK(stat(*make_allocator(), "max_split_size") == -1);  // SIZE_MAX cast to int64 (section 1, measured)
  CHECK(stat(*make_allocator(AllocatorConfig::parse("max_split_size_mb:100")), "max_split_size") == 104857600);
}

TEST_CASE("config: numbers that do not fit name the option and the text, never a bare standard error") {
  const std::string huge = "99999999999999999999999";
  for (const std::string key : {"max_split_size_mb", "max_non_split_rounding_mb", "large_segment_size_mb",
                                "roundup_power2_divisions", "pinned_num_register_threads"}) {
    check_rejected(key + ":" + huge, {key, huge, "out of range"});
  }
  check_rejected("roundup_power2_divisions:[" + huge + ":2]", {"roundup_power2_divisions", huge});
  check_rejected("roundup_power2_divisions:[256:" + huge + "]", {"roundup_power2_divisions", huge});
  check_rejected("garbage_collection_threshold:1e999", {"garbage_collection_threshold", "1e999"});
  check_rejected("garbage_collection_threshold:nan", {"garbage_collection_threshold", "nan"});
  check_rejected("garbage_collection_threshold:0x0.8", {"garbage_collection_threshold", "0x0.8"});
  // The largest size is accepted (and capped so that bytes do not overflow).
  CHECK(AllocatorConfig::parse("max_split_size_mb:18446744073709551615").max_split_size ==
        std::numeric_limits<size_t>::max() / kMiB * kMiB);
}
