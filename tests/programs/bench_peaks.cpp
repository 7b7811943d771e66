// The GPT-2 small benchmark's steps (bench/gpt2_bench_step.h, what bench_gpt2 times) on meta against PyTorch's
// same benchmark (bench/pytorch_gpt2_step.py) on an H100: the peak allocated after each size's warm-up and
// timed steps, every mode, the sizes in the benchmark's order in one process
// (tests/data/pytorch_probes/bench_gpt2_peaks.json). Issue 31: the benchmark's peaks are PyTorch's after the
// steps it runs. The model is built as nanoGPT builds it (on the CPU, then moved).
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "bench/gpt2_bench_step.h"
#include "bytegrad/core/json.h"
#include "bytegrad/memory/memory_functions.h"
#include "programs/checks.h"
#include "programs/scenario.h"

using namespace bytegrad;

TEST_CASE("GPT-2 small benchmark steps on meta reach the peaks PyTorch's benchmark reached") {
  const json::Value doc = programs::read_json_file(
      std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/bench_gpt2_peaks.json", "benchmark peaks");
  const int steps = static_cast<int>(doc["steps"].integer());
  const Device meta{DeviceType::meta, 0};
  std::string process_mode;  // a new mode is a new benchmark process
  std::optional<programs::GoldenConditions> process;
  for (const json::Value& run : doc["runs"].items) {
    const std::string mode = run["mode"].string();
    const int64_t batch = run["batch"].integer(), seq = run["seq"].integer();
    CAPTURE(mode);
    CAPTURE(batch);
    CAPTURE(seq);
    if (mode != process_mode) {
      process.reset();
      process.emplace(meta, programs::Workspaces::pytorch_default);  // CUBLAS_WORKSPACE_CONFIG unset
      process_mode = mode;
    }
    reset_peak_memory_stats(meta);
    manual_seed(1337);
    bench::median_step_ms(bench::Gpt2TrainingStep(bench::gpt2_small_on(meta, mode), meta, mode, batch, seq), steps);
    CHECK(max_memory_allocated(meta) == run["peak_allocated"].integer());
  }
}
