// Programs with LayerNorm and a masked attention block. Transcribed from
// tools/probes/pytorch_extra_scenarios.py (x_layernorm_mlp, x_tiny_transformer_adamw and its Block).
#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/embedding.h"
#include "bytegrad/nn/layer_norm.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/optim/adam.h"
#include "programs/extra_programs.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::programs {

namespace {

// The Python Block: pre-norm causal self-attention written out with ops (qkv split, masked_fill, softmax),
// then a GELU MLP, each with a residual add.
class Block : public nn::Module {
 public:
  Block(int64_t c, int64_t heads, Device on) : heads_(heads) {
    // Registered (and so allocated and listed by parameters()) in __init__'s order.
    ln1_ = register_module("ln1", std::make_shared<nn::LayerNorm>(c, 1e-5, true, true, device(on)));
    qkv_ = register_module("qkv", std::make_shared<nn::Linear>(c, 3 * c, true, device(on)));
    proj_ = register_module("proj", std::make_shared<nn::Linear>(c, c, true, device(on)));
    ln2_ = register_module("ln2", std::make_shared<nn::LayerNorm>(c, 1e-5, true, true, device(on)));
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(c, 4 * c, true, device(on)));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(4 * c, c, true, device(on)));
  }

  Tensor forward(const Tensor&) override { throw std::invalid_argument("Block: forward needs a mask"); }

  // mask: bool (L, L), true where a query may not attend to a key.
  Tensor forward(const Tensor& input, const Tensor& mask) {
    const int64_t b = input.size(0), l = input.size(1), c = input.size(2), h = heads_, d = c / h;
    // q, k, v: views of one qkv output (ln1's output is kept by qkv's AddmmBackward0)
    std::vector<Tensor> qkv = (*qkv_)((*ln1_)(input)).split(c, -1);
    Tensor q = qkv[0].reshape({b, l, h, d}).transpose(1, 2);
    Tensor k = qkv[1].reshape({b, l, h, d}).transpose(1, 2);
    Tensor v = qkv[2].reshape({b, l, h, d}).transpose(1, 2);
    Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
    // att.masked_fill(mask, -inf).softmax(dim=-1): the masked copy is freed once softmax has its result,
    // then the scaled scores on rebinding.
    att = masked_fill(att, mask, -std::numeric_limits<double>::infinity()).softmax(-1);
    Tensor y = matmul(att, v).transpose(1, 2).reshape({b, l, c});  // the product freed after the copy
    Tensor x = input + (*proj_)(y);
    x = x + (*fc2_)(gelu((*fc1_)((*ln2_)(x))));
    return x;
  }

 private:
  int64_t heads_;
  std::shared_ptr<nn::LayerNorm> ln1_, ln2_;
  std::shared_ptr<nn::Linear> qkv_, proj_, fc1_, fc2_;
};

}  // namespace

void x_layernorm_mlp(ScenarioRecorder& r) {
  const Device on = r.device();
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(256, 512, true, device(on)),
      std::make_shared<nn::LayerNorm>(512, 1e-5, true, true, device(on)), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(512, 256, true, device(on)),
      std::make_shared<nn::LayerNorm>(256, 1e-5, true, true, device(on)), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(256, 1, true, device(on))});
  Tensor x = randn({1024, 256}, device(on));
  r.mark("setup");
  Tensor out = (*model)(x);
  r.mark("forward");  // each LayerNorm keeps its input, mean and rstd for backward
  out.mean().backward();
  r.mark("backward");
  {
    NoGradGuard no_grad;
    out = (*model)(x);  // the old out (and its graph) is freed when the new one is bound
  }
  r.mark("no_grad_forward");
}

void x_tiny_transformer_adamw(ScenarioRecorder& r) {
  const Device on = r.device();
  const int64_t vocab = 1000, c = 128, heads = 4, b = 8, l = 64;
  nn::Embedding emb(vocab, c, device(on));
  Block block(c, heads, on);
  nn::LayerNorm ln_f(c, 1e-5, true, true, device(on));
  nn::Linear head(c, vocab, false, device(on));
  std::vector<Tensor> params = emb.parameters();
  for (const nn::Module* m : std::initializer_list<const nn::Module*>{&block, &ln_f, &head})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  optim::AdamW opt(params, 1e-3);  // single-tensor AdamW (PyTorch: foreach=False), weight_decay 1e-2
  r.mark("model");
  const TensorOptions int64_on{ScalarType::int64, on};
  Tensor idx = randint(0, vocab, {b, l}, int64_on);
  Tensor tgt = randint(0, vocab, {b, l}, int64_on);
  Tensor mask = triu(ones({l, l}, TensorOptions{ScalarType::bool_, on}), 1);  // causal: true above the diagonal
  r.mark("data");
  for (int it = 0; it < 2; ++it) {
    const std::string i = std::to_string(it);
    Tensor x = block.forward(emb(idx), mask);
    r.mark("block" + i);
    Tensor logits = head(ln_f(x));
    r.mark("logits" + i);
    Tensor loss = cross_entropy(logits.reshape({b * l, vocab}), tgt.reshape({b * l}));
    r.mark("loss" + i);
    loss.backward();
    r.mark("backward" + i);
    opt.step();
    r.mark("step" + i);
    opt.zero_grad();
    x = Tensor();  // del x, logits, loss
    logits = Tensor();
    loss = Tensor();
    r.mark("end" + i);
  }
}

}  // namespace bytegrad::programs
