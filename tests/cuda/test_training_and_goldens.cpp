// On a real GPU: the tiny regression trains (the same task and threshold as the sim suite), and every
// golden program that runs on an ordinary device matches PyTorch's marks with both workspace settings
// (shared/golden/scenarios with CUBLAS_WORKSPACE_CONFIG=:0:0, scenarios-default-workspace without).
#include <string>

#include "tests/cuda/gpu_test_helpers.h"
#include "tests/scenario_checks.h"
#include "tests/tiny_regression.h"

namespace bgcuda {
namespace {

using bgtraining::TinyOptimizer;

TEST_CASE("a tiny MLP regression trains below its threshold with Adam and with SGD on cuda") {
  require_gpu();
  for (TinyOptimizer which : {TinyOptimizer::adam, TinyOptimizer::sgd_momentum}) {
    const bgtraining::TrainingLosses losses = bgtraining::train_tiny_regression(kCuda, which);
    MESSAGE("cuda, " << std::string(which == TinyOptimizer::adam ? "Adam" : "SGD") << ": loss " << losses.first
                     << " -> " << losses.last);
    CHECK(losses.first > 1.0);  // the target's variance is about 1 + 4 + 0.25 + 9
    CHECK(losses.last < 0.05);  // the stated threshold
  }
}

TEST_CASE("every golden program on cuda matches PyTorch's marks, with and without the cuBLAS workspaces") {
  require_gpu();
  for (const bytegrad::examples::Example& example : bytegrad::examples::all_examples()) {
    if (!example.has_golden || example.needs_simulated_device) continue;
    for (auto workspaces : {bgscenario::Workspaces::none, bgscenario::Workspaces::pytorch_default})
      bgscenario::check_against_golden(example.name, kCuda, example.run, workspaces);
  }
}

}  // namespace
}  // namespace bgcuda
