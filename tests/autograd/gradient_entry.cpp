// Gradients entering autograd (validate_gradient.h): what the engine adapts as PyTorch's does, with
// values and sim memory; the refusals are rows of the bad-input suite (tests/bad_inputs/autograd_rows.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/saved_tensor_hooks.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/devices.h"
#include "tests/support/error_text.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const TensorOptions sim_f32{ScalarType::float32, kSim};

// A hand-written node returning a fixed gradient for its one input.
class FixedGradient final : public Node {
 public:
  explicit FixedGradient(Tensor gradient) : gradient_(std::move(gradient)) {}
  std::string name() const override { return "FixedGradientBackward"; }
  TensorList apply(TensorList&&) override { return {gradient_}; }

 private:
  Tensor gradient_;
};

}  // namespace

TEST_CASE("backward(gradient) of another dtype is converted to the root's dtype") {
  fresh_sim();
  {
    Tensor x = ones({3, 4}, sim_f32).requires_grad_();
    Tensor y = x * 2.0;
    Tensor g = arange(12.0, TensorOptions{ScalarType::float64, kSim}).view({3, 4});
    // x, y: 3*4*4 = 48 B each, g: 3*4*8 = 96 B; each a 512-byte block
    CHECK(allocated() == 3 * 512);
    caching_allocator(kSim).reset_peak_stats();
    y.backward(g);
    // during backward: g converted to float32 (512, held until backward returns) and MulBackward0's
    // g * 2.0 (512), which becomes x.grad
    CHECK(peak() == 3 * 512 + 512 + 512);
    CHECK(allocated() == 3 * 512 + 512);
    CHECK(x.grad().dtype() == ScalarType::float32);
    const std::vector<double> grad = x.grad().tolist();
    for (size_t i = 0; i < grad.size(); ++i) CHECK(grad[i] == 2.0 * static_cast<double>(i));
  }
  CHECK(allocated() == 0);
  // PyTorch converts float16 and integer gradients as well (probed: all give float32 gradients of 2).
  for (ScalarType dtype : {ScalarType::float16, ScalarType::int64}) {
    CAPTURE(scalar_type_name(dtype));
    Tensor x = ones({2, 3}, sim_f32).requires_grad_();
    (x * 2.0).backward(ones({2, 3}, TensorOptions{dtype, kSim}));
    CHECK(x.grad().dtype() == ScalarType::float32);
    for (double v : x.grad().tolist()) CHECK(v == 2.0);
  }
}

TEST_CASE("backward(gradient) with a 0-d gradient on another device moves it to the root's device") {
  fresh_sim();
  {
    Tensor x = ones({3, 4}, sim_f32).requires_grad_();
    Tensor loss = sum(x * 3.0);       // the product (512) is not kept: a product by a number saves nothing
    CHECK(allocated() == 512 + 512);  // x and the 0-d loss
    caching_allocator(kSim).reset_peak_stats();
    loss.backward(scalar_tensor(0.5, TensorOptions{ScalarType::float64, kCpu}));
    // the 0-d gradient converted on cpu, then moved to sim (512); SumBackward0 expands it (a view);
    // MulBackward0's grad * 3.0 (3*4*4 = 48 B, a 512-byte block) becomes x.grad
    CHECK(peak() == 2 * 512 + 512 + 512);
    CHECK(allocated() == 2 * 512 + 512);
    for (double v : x.grad().tolist()) CHECK(v == 1.5);
  }
}

TEST_CASE("a node's gradient that the input's shape broadcasts to is summed down; another device is refused") {
  fresh_sim();
  {
    Tensor x = ones({3, 4}, sim_f32).requires_grad_();
    auto node = std::make_shared<FixedGradient>(ones({2, 3, 4}, sim_f32));
    node->next_edges.push_back(gradient_edge(x));
    Tensor out = x.detach().clone();
    set_history(out, node, 0);
    sum(out).backward();
    for (double v : x.grad().tolist()) CHECK(v == 2.0);  // two [3, 4] layers of ones, summed

    auto wrong_device = std::make_shared<FixedGradient>(ones({3, 4}, device(kCpu)));
    wrong_device->next_edges.push_back(gradient_edge(x));
    Tensor other = x.detach().clone();
    set_history(other, wrong_device, 0);
    try {
      sum(other).backward();
      FAIL("expected an error");
    } catch (const std::runtime_error& e) {
      CHECK(contains(e.what(),
                     "Function FixedGradientBackward returned an invalid gradient at index 0 - expected device sim "
                     "but got cpu"));
    }
    for (double v : x.grad().tolist()) CHECK(v == 2.0);  // untouched by the refused backward
  }
}

TEST_CASE("set_grad takes a gradient of the tensor's dtype, device and size, and nothing else") {
  fresh_sim();
  {
    Tensor w = zeros({2, 3}, TensorOptions{ScalarType::float64, kSim}).requires_grad_();
    w.set_grad(full({2, 3}, 0.25, TensorOptions{ScalarType::float64, kSim}));
    CHECK(allocated() == 2 * 512);  // w and its .grad: 2*3*8 = 48 B each
    CHECK_THROWS_AS(w.set_grad(full({2, 3}, 1.0, sim_f32)), std::invalid_argument);
    CHECK_THROWS_AS(w.set_grad(full({2, 3}, 1.0, TensorOptions{ScalarType::float64, kCpu})), std::invalid_argument);
    CHECK(allocated() == 2 * 512);  // the refused gradients were temporaries; .grad is the first one
    for (double v : w.grad().tolist()) CHECK(v == 0.25);
    w.set_grad(Tensor());
    CHECK(!w.grad().defined());
    CHECK(allocated() == 512);
  }
}

namespace {

// Keeps each saved tensor on cpu and gives a new sim copy back; the unpack numbered `fail_at` (from 0)
// gives back an undefined tensor instead.
class OffloadingHooks final : public SavedTensorHooks {
 public:
  explicit OffloadingHooks(int fail_at) : fail_at_(fail_at) {}
  std::shared_ptr<void> pack(const Tensor& t) override { return std::make_shared<Tensor>(t.detach().to(kCpu)); }
  Tensor unpack(const std::shared_ptr<void>& packed) override {
    if (unpacks_++ == fail_at_) return Tensor();
    return static_cast<const Tensor*>(packed.get())->to(kSim);
  }

 private:
  int fail_at_;
  int unpacks_ = 0;
};

}  // namespace

TEST_CASE("an unpack hook's undefined tensor is named; what the hooks gave back is freed when backward fails") {
  fresh_sim();
  {
    Tensor x = ones({3, 4}, sim_f32).requires_grad_();
    Tensor a = full({3, 4}, 2.0, sim_f32).requires_grad_();
    Tensor loss;
    {
      SavedTensorHooksScope hooks(std::make_shared<OffloadingHooks>(/*fail_at=*/1));
      loss = sum(x * a);  // MulBackward0 saves self (x) and other (a), both offloaded to cpu
    }
    // x, a, the 0-d loss: a 512-byte block each (the product was a temporary)
    CHECK(allocated() == 3 * 512);
    caching_allocator(kSim).reset_peak_stats();
    try {
      loss.backward();
      FAIL("expected an error");
    } catch (const std::runtime_error& e) {
      CHECK(contains(e.what(),
                     "the unpack hook returned an undefined tensor for the saved tensor 'other' of "
                     "MulBackward0 (a float32 tensor of shape [3, 4])"));
    }
    // During backward: the root gradient (512) and the sim copy of `self` the unpack hook made (512). Both are
    // gone once backward has failed, although the graph (and its packed cpu copies) is still alive.
    CHECK(peak() == 3 * 512 + 512 + 512);
    CHECK(allocated() == 3 * 512);
    CHECK(!x.grad().defined());
    CHECK(!a.grad().defined());
  }
  CHECK(allocated() == 0);
}
