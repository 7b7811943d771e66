// The tiny GPT learns a text: two of Shakespeare's sonnets (tests/data/text/sonnets.txt, public domain),
// byte by byte, with nanoGPT's AdamW groups (foreach, lr 3e-3) on sim. The loss starts near ln(256) = 5.5
// (uniform over bytes); the text's byte frequencies alone give 3.1 (its unigram entropy), so a mean loss
// below 2.5 over the last 10 of 150 steps (8 random 64-byte windows each; 2.27 when written) means the model
// uses the context.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/nn/init.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

TEST_CASE("the tiny GPT learns two sonnets: the loss falls below 2.5 in 150 AdamW steps on sim") {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/text/sonnets.txt", std::ios::binary);
  REQUIRE(in);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  REQUIRE(text.size() > 1000);

  manual_seed(1337);
  const int64_t block = 64, batch = 8;
  nn::GPT model({.n_layer = 2, .n_head = 2, .n_embd = 64, .vocab_size = 256, .block_size = block}, device(kSim));
  {
    // nanoGPT's _init_weights (its model.py, not the golden program): N(0, 0.02) weights and zero biases, so
    // the position embeddings (PyTorch's default N(0, 1)) do not drown the tokens' (the tied lm_head's
    // uniform(+-1/8)) at the start.
    NoGradGuard no_grad;
    for (const auto& [name, p] : model.named_parameters()) {
      if (p.dim() >= 2) nn::init::normal_(p, 0.0, 0.02);
      else if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") p.zero_();
    }
  }
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamOptions base{.lr = 3e-3, .betas = {0.9, 0.95}, .foreach = true};
  optim::AdamOptions with_decay = base, without_decay = base;
  with_decay.weight_decay = 0.1;
  without_decay.weight_decay = 0.0;
  optim::AdamW opt({{decay, with_decay}, {no_decay, without_decay}});

  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    // batch windows of block + 1 bytes at random offsets: inputs and the next bytes as targets
    const std::vector<double> starts = randint(0, static_cast<int64_t>(text.size()) - block - 1, {batch}).tolist();
    std::vector<double> x, y;
    for (double s : starts)
      for (int64_t i = 0; i < block; ++i) {
        x.push_back(static_cast<unsigned char>(text[static_cast<size_t>(s) + i]));
        y.push_back(static_cast<unsigned char>(text[static_cast<size_t>(s) + i + 1]));
      }
    const TensorOptions int64_sim{ScalarType::int64, kSim};
    nn::GPT::Output out = model.forward(from_vector(x, {batch, block}, int64_sim), from_vector(y, {batch, block}, int64_sim));
    const double loss = out.loss.item();
    if (step == 0) first = loss;
    if (step >= 140) last += loss / 10;  // the mean of the last 10 batches' losses
    out.loss.backward();
    opt.step();
    opt.zero_grad();
  }
  MESSAGE("loss " << first << " -> " << last);
  CHECK(std::abs(first - std::log(256.0)) < 0.5);
  CHECK(last < 2.5);
}
