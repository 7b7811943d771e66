// On a real GPU: the tiny regression trains (the same task and threshold as the sim suite). The golden
// programs run on cuda through the walkthrough instead (ctest cuda_seed*, each a fresh process as
// PyTorch's were: segment addresses, and with them best-fit ties, depend on what the process did before).
#include <string>

#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/tiny_regression.h"

namespace bytegrad::testing {
namespace {

TEST_CASE("a tiny MLP regression trains below its threshold with Adam and with SGD on cuda") {
  require_gpu();
  for (TinyOptimizer which : {TinyOptimizer::adam, TinyOptimizer::sgd_momentum}) {
    const TrainingLosses losses = train_tiny_regression(kCuda, which);
    MESSAGE("cuda, " << std::string(which == TinyOptimizer::adam ? "Adam" : "SGD") << ": loss " << losses.first
                     << " -> " << losses.last);
    CHECK(losses.first > 1.0);  // the target's variance is about 1 + 4 + 0.25 + 9
    CHECK(losses.last < 0.05);  // the stated threshold
  }
}


}  // namespace
}  // namespace bytegrad::testing
