// "Training trains" for the GPT, shared by the sim suite (tests/optim/gpt_learns_text.cpp) and the GPU suite
// (tests/cuda/test_training.cpp): the tiny GPT learns two of Shakespeare's sonnets
// (tests/data/text/sonnets.txt, public domain), byte by byte, with nanoGPT's AdamW groups (foreach, lr
// 3e-3). The loss starts near ln(256) = 5.5 (uniform over bytes); the text's byte frequencies alone give 3.1
// (its unigram entropy), so a mean loss below 2.5 over the last 10 of 150 steps (8 random 64-byte windows
// each; 2.27 on sim when written) means the model uses the context.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/nn/init.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::testing {

struct TextLosses {
  double first = 0;  // the first batch's loss
  double last = 0;   // the mean of the last 10 batches' losses
};

// text_path: the sonnets (BYTEGRAD_TEST_DATA_DIR "/text/sonnets.txt" in the suites).
inline TextLosses train_tiny_gpt_on_text(Device d, const std::string& text_path, int steps = 150) {
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + text_path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  if (text.size() <= 1000) throw std::runtime_error(text_path + " is too short");

  manual_seed(1337);
  const int64_t block = 64, batch = 8;
  nn::GPT model({.n_layer = 2, .n_head = 2, .n_embd = 64, .vocab_size = 256, .block_size = block}, device(d));
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

  TextLosses losses;
  const TensorOptions int64_on_device{ScalarType::int64, d};
  for (int step = 0; step < steps; ++step) {
    // batch windows of block + 1 bytes at random offsets: inputs and the next bytes as targets
    const std::vector<double> starts = randint(0, static_cast<int64_t>(text.size()) - block - 1, {batch}).tolist();
    std::vector<double> x, y;
    for (double s : starts)
      for (int64_t i = 0; i < block; ++i) {
        x.push_back(static_cast<unsigned char>(text[static_cast<size_t>(s) + i]));
        y.push_back(static_cast<unsigned char>(text[static_cast<size_t>(s) + i + 1]));
      }
    nn::GPT::Output out =
        model.forward(from_vector(x, {batch, block}, int64_on_device), from_vector(y, {batch, block}, int64_on_device));
    const double loss = out.loss.item();
    if (step == 0) losses.first = loss;
    if (step >= steps - 10) losses.last += loss / 10;
    out.loss.backward();
    opt.step();
    opt.zero_grad();
  }
  return losses;
}

}  // namespace bytegrad::testing
