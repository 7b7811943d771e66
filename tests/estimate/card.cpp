// The estimator's words (programs/card.h): sizes read as people write them, cards as a total less the
// driver's share, and that share held to its recording (tests/data/pytorch_probes/cuda_context.json).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/raw_memory.h"
#include "programs/card.h"
#include "programs/training_estimates.h"

using namespace bytegrad;
using namespace bytegrad::programs;

namespace {

json::Value recording() {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/cuda_context.json");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

}  // namespace

TEST_CASE("card: the driver's share and the cards' totals are the recording's") {
  const json::Value r = recording();
  const json::Value& outside = r["outside_allocator_bytes_after"];
  CHECK(kCudaDriverShareBytes == outside["cublas"].unsigned_integer());
  CHECK(outside["cublaslt"].integer() == outside["cublas"].integer());            // cuBLASLt adds nothing after cuBLAS
  CHECK(kSimDefaultContextBytes == outside["context"].unsigned_integer());        // the goldens' H100 measured the same
  CHECK(kSimDefaultContextBytes + 96468992 + 71303168 == kCudaDriverShareBytes);  // context, launches, cuBLAS
  CHECK(parse_card("H200-141GB").total_bytes == r["total_bytes"].integer());
  CHECK(parse_card("h200").total_bytes == r["total_bytes"].integer());
  CHECK(parse_card("H100-80GB").total_bytes == 85017493504);  // the goldens' card (raw_memory.h)
  CHECK(parse_card("H100").driver_bytes == 720175104);
}

TEST_CASE("card: a size is the card's total as its maker states it, less the driver's share") {
  const Card c = parse_card("24GB");
  CHECK(c.total_bytes == 24000000000);
  CHECK(c.usable_bytes() == 24000000000 - 720175104);
  CHECK(parse_card("16GB").total_bytes == 16000000000);
  CHECK(parse_card("40GB").total_bytes == 40000000000);
  CHECK(parse_card("80GB").total_bytes == 80000000000);
  CHECK(parse_card("24GiB").total_bytes == 24 * 1073741824LL);
  CHECK_THROWS_WITH_AS(parse_card("500MB"),
                       "--card '500MB' (500000000 bytes) is no larger than what the CUDA driver keeps on a card "
                       "(720175104 bytes): nothing is left for PyTorch",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_card("A100"), doctest::Contains("got 'A100' (or a card: H100-80GB, H200-141GB)"),
                       std::invalid_argument);
}

TEST_CASE("card: sizes in powers of 1000 and of 1024, any case; ambiguous and bad sizes refused") {
  CHECK(parse_byte_size("--limit", "24GB") == 24000000000);
  CHECK(parse_byte_size("--limit", "24gb") == 24000000000);
  CHECK(parse_byte_size("--limit", "24 GB") == 24000000000);
  CHECK(parse_byte_size("--limit", "24GiB") == 25769803776);  // 24 * 2^30
  CHECK(parse_byte_size("--limit", "24gib") == 25769803776);
  CHECK(parse_byte_size("--limit", "1.5TB") == 1500000000000);
  CHECK(parse_byte_size("--limit", "2TiB") == 2199023255552);  // 2 * 2^40
  CHECK(parse_byte_size("--limit", "512MiB") == 536870912);
  CHECK(parse_byte_size("--limit", "1KB") == 1000);
  CHECK(parse_byte_size("--limit", "1KiB") == 1024);
  CHECK(parse_byte_size("--limit", "4096") == 4096);
  CHECK(parse_byte_size("--limit", "4096B") == 4096);
  CHECK_THROWS_WITH_AS(parse_byte_size("--limit", "24G"),
                       "--limit '24G': 'G' is ambiguous; write GB (powers of 1000) or GiB (of 1024)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_byte_size("--limit", "24Gb/s"), doctest::Contains("unknown unit 'Gb/s'"),
                       std::invalid_argument);
  for (const char* bad : {"nan", "inf", "-1GB", "0", "0.5B", "1e30GiB", "GB", ""}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_byte_size("--limit", bad), std::invalid_argument);
  }
}

TEST_CASE("card: training on a 1GB card fits what a cap of its usable bytes fits on the modelled H100") {
  // 1GB = 10^9 bytes; less the driver's 720175104 leaves 279824896 for PyTorch. The same run, capped by
  // set_per_process_memory_fraction at 279824896 bytes of the H100, has the same largest batch.
  MLPTraining mlp{.sizes = {784, 4096, 4096, 10}, .batch = 8, .optimizer = MLPOptimizer::sgd};
  const SimulatedCapacity h100 = simulated_capacity(kMeta);
  configure_simulated_device(kMeta, {.total_bytes = 1000000000, .context_bytes = kCudaDriverShareBytes});
  const int64_t on_card = max_mlp_batch(mlp, 0, /*default_workspace=*/false).largest;
  configure_simulated_device(kMeta, h100);
  const int64_t capped = max_mlp_batch(mlp, 1000000000 - 720175104, /*default_workspace=*/false).largest;
  CHECK(on_card > 1);
  CHECK(on_card == capped);
}

TEST_CASE("largest_fitting_batch: the largest batch that fits, where fitting is not monotone near the cap") {
  using enum BatchOutcome;
  std::vector<int64_t> runs;
  // FSDP2's four ranks at 6 GiB as PyTorch ran them: 12 and 14 fit, 13 fails through fragmentation, 15 on over.
  auto four_ranks = [&](int64_t b) {
    runs.push_back(b);
    return b >= 15 ? over : b == 13 ? fragmented : fits;
  };
  const BatchSearch found = largest_fitting_batch(four_ranks);
  CHECK(found.largest == 14);
  CHECK(found.not_fitting_below == std::vector<int64_t>{13});
  std::sort(runs.begin(), runs.end());
  CHECK(std::adjacent_find(runs.begin(), runs.end()) == runs.end());  // each batch ran once
  // A fragmented batch just under `over` is walked past; ones further down are not looked for.
  const BatchSearch gap = largest_fitting_batch([](int64_t b) {
    return b >= 40 ? over : b == 39 || b == 36 || b == 35 ? fragmented : fits;
  });
  CHECK(gap.largest == 38);
  CHECK(gap.not_fitting_below.empty());
  const BatchSearch two = largest_fitting_batch([](int64_t b) {
    return b >= 40 ? over : b == 36 || b == 35 ? fragmented : fits;
  });
  CHECK(two.largest == 39);
  CHECK(two.not_fitting_below.empty());
  // Two batches just below the largest fail: both are listed.
  const BatchSearch below = largest_fitting_batch([](int64_t b) {
    return b >= 40 ? over : b == 38 || b == 37 ? fragmented : fits;
  });
  CHECK(below.largest == 39);
  CHECK(below.not_fitting_below == std::vector<int64_t>{38, 37});
  // Monotone: the batch before the first over; none when batch 1 is over or only fragments.
  CHECK(largest_fitting_batch([](int64_t b) { return b >= 8 ? over : fits; }).largest == 7);
  CHECK(largest_fitting_batch([](int64_t) { return over; }).largest == 0);
  const BatchSearch none = largest_fitting_batch([](int64_t b) { return b >= 3 ? over : fragmented; });
  CHECK(none.largest == 0);
  CHECK(none.not_fitting_below.empty());
}
