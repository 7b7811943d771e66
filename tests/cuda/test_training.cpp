// On a real GPU: the tiny regression trains (the same task and threshold as the sim suite). The golden
// programs run on cuda through the walkthrough instead (ctest cuda_seed*, each a fresh process as
// PyTorch's were: segment addresses, and with them best-fit ties, depend on what the process did before).
#include <cmath>
#include <string>

#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/tiny_gpt_text.h"
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

TEST_CASE("the tiny GPT learns two sonnets on cuda: the loss falls below 2.5 in 150 AdamW steps") {
  require_gpu();
  const TextLosses losses = train_tiny_gpt_on_text(kCuda, std::string(BYTEGRAD_TEST_DATA_DIR) + "/text/sonnets.txt");
  MESSAGE("cuda: loss " << losses.first << " -> " << losses.last);
  CHECK(std::abs(losses.first - std::log(256.0)) < 0.5);
  CHECK(losses.last < 2.5);  // tests/support/tiny_gpt_text.h: below the text's unigram entropy, 3.1
}

}  // namespace
}  // namespace bytegrad::testing
