// The tiny GPT learns two sonnets on sim (tests/support/tiny_gpt_text.h says what and why the threshold);
// tests/cuda/test_training.cpp runs the same on a GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/support/tiny_gpt_text.h"

using namespace bytegrad;

TEST_CASE("the tiny GPT learns two sonnets: the loss falls below 2.5 in 150 AdamW steps on sim") {
  const testing::TextLosses losses =
      testing::train_tiny_gpt_on_text(kSim, std::string(BYTEGRAD_TEST_DATA_DIR) + "/text/sonnets.txt");
  MESSAGE("loss " << losses.first << " -> " << losses.last);
  CHECK(std::abs(losses.first - std::log(256.0)) < 0.5);
  CHECK(losses.last < 2.5);
}
