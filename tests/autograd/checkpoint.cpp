// Non-reentrant activation checkpointing: same gradients, fewer saved bytes, recomputation in backward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bytegrad/autograd/checkpoint.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/saved_tensor_hooks.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/checkpoint_sequential.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/sequential.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// Linear(64,128) ReLU Linear(128,128) ReLU Linear(128,128) ReLU Linear(128,4), parameters from one seed.
std::shared_ptr<nn::Sequential> make_model(Device d) {
  manual_seed(7);
  auto lin = [d](int64_t i, int64_t o) { return std::make_shared<nn::Linear>(i, o, true, device(d)); };
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      lin(64, 128), std::make_shared<nn::ReLU>(), lin(128, 128), std::make_shared<nn::ReLU>(), lin(128, 128),
      std::make_shared<nn::ReLU>(), lin(128, 4)});
}

}  // namespace

TEST_CASE("checkpoint_sequential gives the same gradients as the plain model") {
  auto plain = make_model(kCpu);
  auto checkpointed = make_model(kCpu);
  manual_seed(8);
  Tensor x = randn({32, 64}, device(kCpu));
  sum((*plain)(x) * (*plain)(x)).backward();
  Tensor y = nn::checkpoint_sequential(*checkpointed, 2, x);
  sum(y * y).backward();
  auto a = plain->parameters(), b = checkpointed->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<double> ga = a[i].grad().tolist(), gb = b[i].grad().tolist();
    REQUIRE(ga.size() == gb.size());
    for (size_t j = 0; j < ga.size(); ++j) CHECK(gb[j] == doctest::Approx(ga[j]).epsilon(1e-5));
  }
}

TEST_CASE("a checkpointed segment keeps none of its inner activations until backward") {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
  fresh_sim();
  {
    auto model = make_model(kSim);
    Tensor x = randn({32, 64}, device(kSim));
    const int64_t base = allocated();
    // 7 modules, 2 segments of 3: modules 0-2 are checkpointed, 3-6 run normally.
    Tensor plain_out = (*model)(x);
    const int64_t plain = allocated() - base;
    plain_out = Tensor();
    Tensor ckpt_out = nn::checkpoint_sequential(*model, 2, x);
    const int64_t checkpointed = allocated() - base;
    // Without checkpointing, the first ReLU's output (32*128*4 = 16384 bytes) is kept, saved by that ReLU
    // and by the second Linear; inside the checkpointed segment nothing is kept.
    CHECK(plain - checkpointed == 32 * 128 * 4);
    caching_allocator(kSim).record_history(true);
    sum(ckpt_out).backward();
    // The recomputation re-ran the segment's first Linear (an allocation tagged "linear" during backward,
    // 32*128*4 bytes) and its ReLU; it stopped (PyTorch's early stop) when the second Linear's addmm saved
    // its inputs, the last of the tensors the forward saved, before that addmm allocated its output: as
    // PyTorch's autograd, bytegrad saves an op's inputs before its kernel runs.
    int64_t recomputed = 0;
    for (const TraceEntry& e : caching_allocator(kSim).snapshot().trace)
      if (e.action == TraceAction::alloc && e.size == 32 * 128 * 4 && e.tag == "linear") ++recomputed;
    caching_allocator(kSim).record_history(false);
    CHECK(recomputed == 1);
  }
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

namespace {

// Records memory_allocated() at every pack: what the op had allocated when each saved tensor was saved.
class PackLog final : public SavedTensorHooks {
 public:
  std::vector<int64_t> allocated_at_pack;
  std::shared_ptr<void> pack(const Tensor& t) override {
    allocated_at_pack.push_back(allocated());
    return std::make_shared<Tensor>(t);
  }
  Tensor unpack(const std::shared_ptr<void>& packed) override { return *static_cast<const Tensor*>(packed.get()); }
};

}  // namespace

// PyTorch's generated autograd code saves an op's inputs before its kernel runs and its outputs after; so
// does bytegrad (tensor/autograd_hook.h's OpRecording), which is what lets a checkpoint's early stop end a
// recomputation before the output of the op that saves the last tensor is allocated.
TEST_CASE("saved-tensor hooks see an op's saved inputs before its output exists, its saved outputs after") {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
  fresh_sim();
  {
    Tensor a = randn({64, 32}, device(kSim)).requires_grad_(true);
    Tensor b = randn({32, 16}, device(kSim)).requires_grad_(true);
    Tensor bias = randn({16}, device(kSim)).requires_grad_(true);
    auto log = std::make_shared<PackLog>();
    const int64_t before = allocated();
    Tensor out, e;
    {
      SavedTensorHooksScope scope(log);
      out = addmm(bias, a, b);  // saves mat1 and mat2 (inputs): both before the 64x16 output
      e = exp(out);             // saves its result (an output): after it
    }
    REQUIRE(log->allocated_at_pack.size() == 3);
    CHECK(log->allocated_at_pack[0] == before);
    CHECK(log->allocated_at_pack[1] == before);
    CHECK(log->allocated_at_pack[2] == before + 2 * 64 * 16 * 4);
    sum(e).backward();  // the hooks give the tensors back
    CHECK(a.grad().defined());
  }
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

// PyTorch recomputes a checkpointed function in every backward pass that needs its saved tensors: a graph
// kept with retain_graph=true differentiates twice, each time with the same values and the same memory.
TEST_CASE("a retained checkpointed graph differentiates twice, recomputing each time") {
  fresh_sim();
  {
    Tensor x = (randn({64, 64}, device(kSim)) * 0.5).requires_grad_();
    // exp(x * x): MulBackward0 saves x twice (the input, kept by the checkpoint anyway), ExpBackward0 its
    // result; none of them is kept in the forward.
    Tensor loss = sum(checkpoint([](const Tensor& in) { return exp(in * in); }, x));
    const int64_t x_bytes = 64 * 64 * 4;  // 16384, a multiple of 512: each 64x64 block is exactly that
    CHECK(allocated() == x_bytes + 512);  // x and the 0-d loss
    const std::vector<double> xs = x.tolist();

    // Each backward: the root gradient (512); the recomputation's x * x (16384) and exp of it (16384),
    // where it stops (the last saved tensor is back) and drops x * x; ExpBackward0's grad * result (16384);
    // MulBackward0's two products (2 * 16384) while its incoming gradient is alive: 512 + 3 * 16384 above
    // the start. What is left is x's gradient (the first backward's result becomes x.grad; the second's is
    // added into it and freed).
    const int64_t backward_peak = 512 + 3 * x_bytes;
    caching_allocator(kSim).reset_peak_stats();
    loss.backward(Tensor(), /*retain_graph=*/true);
    CHECK(peak() - (x_bytes + 512) == backward_peak);
    CHECK(allocated() == x_bytes + 512 + x_bytes);
    const std::vector<double> once = x.grad().tolist();

    caching_allocator(kSim).reset_peak_stats();
    loss.backward();
    CHECK(peak() - (2 * x_bytes + 512) == backward_peak);
    CHECK(allocated() == x_bytes + 512 + x_bytes);
    const std::vector<double> twice = x.grad().tolist();

    REQUIRE(once.size() == xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      const double expected = 2.0 * xs[i] * std::exp(xs[i] * xs[i]);  // d/dx exp(x^2)
      CHECK(once[i] == doctest::Approx(expected).epsilon(1e-5));
      CHECK(twice[i] == doctest::Approx(2.0 * expected).epsilon(1e-5));
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("a recomputation that differs from the forward is named, and what it recomputed is freed at once") {
  fresh_sim();
  {
    Tensor x = ones({64, 64}, device(kSim)).requires_grad_();
    auto calls = std::make_shared<int>(0);
    // exp(rows) * exp(rows) of all 64 rows in the forward, of 32 in the recomputation: the saved tensors
    // (ExpBackward0's result, MulBackward0's two factors, all the same exp) have other shapes; the
    // recomputation allocated its exp (32*64*4 = 8192 B) before that was found.
    Tensor loss = sum(checkpoint(
        [calls](const Tensor& in) {
          Tensor e = exp(in.narrow(0, 0, (*calls)++ == 0 ? 64 : 32));
          return e * e;
        },
        x));
    const int64_t before = 64 * 64 * 4 + 512;  // x and the 0-d loss (exp and the product are not kept)
    CHECK(allocated() == before);
    caching_allocator(kSim).reset_peak_stats();
    try {
      loss.backward();
      FAIL("expected an error");
    } catch (const std::runtime_error& e) {
      CAPTURE(e.what());
      CHECK(contains(e.what(), "the recomputation differs from the forward pass"));
      CHECK(contains(e.what(),
                     "tensor at position 0:\nsaved metadata: {shape: [64, 64], dtype: float32, device: "
                     "sim}\nrecomputed metadata: {shape: [32, 64], dtype: float32, device: sim}"));
      CHECK(contains(e.what(), "tensor at position 2:"));
    }
    // The graph is still alive, yet nothing of the failed backward is: the root gradient (512) and the
    // recomputed exp (8192) are gone.
    CHECK(peak() == before + 512 + 8192);
    CHECK(allocated() == before);
    CHECK(!x.grad().defined());
  }
  CHECK(allocated() == 0);
}

TEST_CASE("a checkpointed dropout drops the same elements when recomputed (the generator's state is kept)") {
  // f(x) = dropout(x * x, 0.5): its backward needs dropout's mask and x. Checkpointed, the mask is recomputed
  // in backward; PyTorch (preserve_rng_state) restores the generator so the recomputation draws the forward's
  // mask, and puts the generator back afterwards.
  auto f = [](const Tensor& x) { return dropout(x * x, 0.5); };
  const auto opts = TensorOptions{ScalarType::float32, kSim};

  manual_seed(11);
  Tensor x_plain = rand({64, 32}, opts).requires_grad_();
  manual_seed(12);
  Tensor y_plain = f(x_plain);
  y_plain.sum().backward();

  manual_seed(11);
  Tensor x_ckpt = rand({64, 32}, opts).requires_grad_();
  manual_seed(12);
  Tensor y_ckpt = checkpoint(f, x_ckpt);
  manual_seed(99);  // draws between forward and backward must not change the recomputation
  (void)rand({5}, opts);
  const RngState before_backward = get_rng_state();
  y_ckpt.sum().backward();

  CHECK(y_ckpt.tolist() == y_plain.tolist());
  CHECK(x_ckpt.grad().tolist() == x_plain.grad().tolist());
  // A real mask: some elements dropped, some kept (scaled by 1 / (1 - 0.5) = 2).
  const std::vector<double> g = x_ckpt.grad().tolist();
  CHECK(std::count(g.begin(), g.end(), 0.0) > 0);
  CHECK(std::count(g.begin(), g.end(), 0.0) < static_cast<std::ptrdiff_t>(g.size()));
  // The generator is where backward found it.
  CHECK(get_rng_state().engine == before_backward.engine);
}

TEST_CASE("get_rng_state / set_rng_state draw the same values again") {
  manual_seed(3);
  const RngState state = get_rng_state();
  const std::vector<double> first = rand({16}, TensorOptions{ScalarType::float32, kCpu}).tolist();
  set_rng_state(state);
  CHECK(rand({16}, TensorOptions{ScalarType::float32, kCpu}).tolist() == first);
  CHECK_THROWS_AS(set_rng_state(RngState{"not a state"}), std::invalid_argument);
}
