// What a libtorch program writes compiles and does what libtorch (and PyTorch) does: printing, item<T>(),
// sum/mean/max over one dimension, arange's dtype rule, module holders and variadic Sequential,
// named_modules, apply, tensor and module hooks, InferenceMode, the dtype constants; and the ops added for
// it (rsqrt, cos, sin) against values worked out by hand.
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/activation.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/nn/module_holder.h"
#include "bytegrad/nn/sequential.h"
#include "nn_helpers.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

Tensor grid(TensorOptions options = TensorOptions{ScalarType::float32, kSim}) {  // [[1, 2, 3], [4, 5, 6]]
  return tensor({{1, 2, 3}, {4, 5, 6}}, options);
}

// A user's own module, held as libtorch's TORCH_MODULE holds one.
class TwoLayerImpl : public nn::Module {
 public:
  TwoLayerImpl()
      : fc1(register_module("fc1", std::make_shared<nn::Linear>(3, 4))),
        fc2(register_module("fc2", std::make_shared<nn::Linear>(4, 2))) {}
  Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};
BYTEGRAD_MODULE(TwoLayer);

}  // namespace

// A module from the activation template is one line (docs/adding-an-op.md, "A module").
namespace bytegrad::nn {
BYTEGRAD_ACTIVATION_MODULE(Cosine, cos);
}  // namespace bytegrad::nn

TEST_CASE("libtorch spellings: operator<<, item<T>, sum/mean/max over one dimension, dtype constants") {
  const Tensor x = grid();
  std::ostringstream printed;
  printed << x;
  CHECK(printed.str() == "tensor([[1., 2., 3.],\n        [4., 5., 6.]], device='sim')");  // PyTorch's repr
  std::ostringstream half;
  half << x.to(kHalf);
  CHECK(half.str().find("dtype=float16") != std::string::npos);  // PyTorch: dtype=torch.float16

  CHECK(x.sum().item<float>() == 21.0F);
  CHECK(x.sum().item<int64_t>() == 21);
  static_assert(std::is_same_v<decltype(x.sum().item<int>()), int>);
  CHECK_THROWS_WITH_AS(full({}, 300.0, device(kSim)).item<uint8_t>(), doctest::Contains("8-bit unsigned"),
                       std::invalid_argument);

  CHECK(x.sum(1).tolist() == std::vector<double>{6, 15});  // 1+2+3, 4+5+6
  CHECK(x.sum(0, /*keepdim=*/true).sizes() == Shape{1, 3});
  CHECK(sum(x, -1).tolist() == std::vector<double>{6, 15});
  CHECK(x.mean(1).tolist() == std::vector<double>{2, 5});
  CHECK(mean(x, 0).tolist() == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(x.sum(Shape{}).item() == 21.0);  // a braced or Shape argument still means dims

  auto [values, indices] = x.max(1);
  CHECK(values.tolist() == std::vector<double>{3, 6});
  CHECK(indices.dtype() == kLong);
  CHECK(indices.tolist() == std::vector<double>{2, 2});
  const std::tuple<Tensor, Tensor> as_tuple = x.min(0);  // libtorch's std::tuple
  CHECK(std::get<0>(as_tuple).tolist() == std::vector<double>{1, 2, 3});
  CHECK(std::get<1>(as_tuple).tolist() == std::vector<double>{0, 0, 0});

  CHECK(kFloat == ScalarType::float32);
  CHECK(kFloat16 == ScalarType::float16);
  CHECK(kHalf == kFloat16);
  CHECK(kBFloat16 == ScalarType::bfloat16);
  CHECK(kLong == ScalarType::int64);
  CHECK(zeros({2}, dtype(kBFloat16).with_device(kSim)).dtype() == ScalarType::bfloat16);
}

TEST_CASE("arange follows torch.arange's dtype rule: integers give int64, any floating bound float32") {
  const Tensor ints = arange(12, device(kSim));
  CHECK(ints.dtype() == ScalarType::int64);
  CHECK(ints.nbytes() == 12 * 8);  // 96: int64 elements
  CHECK(ints.tolist().back() == 11);
  CHECK(arange(2, 10, 3, device(kSim)).dtype() == ScalarType::int64);
  CHECK(arange(12.0, device(kSim)).dtype() == ScalarType::float32);
  const Tensor quarters = arange(0, 1, 0.25, device(kSim));
  CHECK(quarters.dtype() == ScalarType::float32);
  CHECK(quarters.tolist() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(0, 5.0, 1, device(kSim)).dtype() == ScalarType::float32);
  CHECK(arange(12, dtype(kHalf).with_device(kSim)).dtype() == ScalarType::float16);  // a given dtype wins
}

TEST_CASE("module holders: model(x) and model->forward(x); Sequential from module values; TORCH_MODULE") {
  manual_seed(3);
  nn::Sequential seq(nn::Linear(3, 4), nn::ReLU(), std::make_shared<nn::Linear>(4, 2));
  REQUIRE(seq.size() == 3);
  CHECK(seq.named_parameters().size() == 4);
  CHECK(seq.named_parameters()[2].first == "2.weight");
  const Tensor x = randn({5, 3});
  const Tensor y = seq(x);
  CHECK(y.sizes() == Shape{5, 2});

  nn::ModuleHolder<nn::Module> model = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::Tanh());
  CHECK(model(x).sizes() == Shape{5, 4});
  CHECK(model->forward(x).tolist() == model(x).tolist());
  const std::shared_ptr<nn::Module> shared = model;  // converts back where libtorch code wants the pointer
  CHECK(shared.get() == model.get());

  nn::ModuleHolder<nn::Linear> fc(3, 2);
  CHECK(fc->weight().sizes() == Shape{2, 3});
  nn::Sequential nested(fc, nn::SiLU());  // a holder is shared, not copied
  CHECK(nested[0].get() == fc.get());

  TwoLayer net;
  CHECK(net(x).sizes() == Shape{5, 2});
  CHECK(net->fc1->weight().sizes() == Shape{4, 3});
  CHECK(net->parameters().size() == 4);
}

TEST_CASE("named_modules, modules and apply visit the tree as torch.nn.Module does") {
  nn::Sequential inner(nn::Linear(2, 2), nn::ReLU());
  auto inner_ptr = std::make_shared<nn::Sequential>(std::move(inner));
  nn::Sequential outer(inner_ptr, nn::Linear(2, 1), inner_ptr);  // the same module twice: listed once
  std::vector<std::string> names;
  for (const auto& [name, m] : outer.named_modules()) names.push_back(name + ":" + nn::module_class_name(*m));
  CHECK(names == std::vector<std::string>{":Sequential", "0:Sequential", "0.0:Linear", "0.1:ReLU", "1:Linear"});
  CHECK(outer.named_modules("model", false).front().first == "model.0");
  CHECK(outer.modules().size() == 5);

  // PyTorch's apply: each distinct child's subtree first, then the module itself (libtorch: itself first).
  std::vector<std::string> visited;
  outer.apply([&](nn::Module& m) { visited.push_back(nn::module_class_name(m)); });
  CHECK(visited == std::vector<std::string>{"Linear", "ReLU", "Sequential", "Linear", "Sequential"});
  outer.apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard no_grad;
      linear->weight().fill_(0.5);
    }
  });
  CHECK(outer.named_parameters()[0].second.tolist() == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}

TEST_CASE("tensor hooks: register_hook sees and may replace the gradient, on leaves and non-leaves") {
  Tensor w = tensor({1.0, 2.0, 3.0}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
  std::vector<double> seen;
  RemovableHandle look = w.register_hook([&](const Tensor& g) { seen = g.tolist(); });
  RemovableHandle doubled = w.register_hook([](const Tensor& g) { return g * 2.0; });
  (w * w).sum().backward();  // d/dw sum(w^2) = 2w
  CHECK(seen == std::vector<double>{2, 4, 6});
  CHECK(w.grad().tolist() == std::vector<double>{4, 8, 12});  // doubled before AccumulateGrad

  doubled.remove();
  doubled.remove();  // twice does nothing
  w.set_grad(Tensor());
  (w * w).sum().backward();
  CHECK(w.grad().tolist() == std::vector<double>{2, 4, 6});
  look.remove();

  // A non-leaf: the hook changes what flows on to the leaf.
  Tensor a = tensor({1.0, -1.0}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
  Tensor h = a * 3.0;
  h.register_hook([](const Tensor& g) { return g + 1.0; });
  h.sum().backward();
  CHECK(a.grad().tolist() == std::vector<double>{6, 6});  // (1 + 1) * 3

  CHECK_THROWS_WITH_AS(ones({2}, device(kSim)).register_hook([](const Tensor&) {}),
                       doctest::Contains("doesn't require gradient"), std::runtime_error);
}

TEST_CASE("tensor hooks: a looking hook leaves AccumulateGrad's steal, and allocations, as without it") {
  // PyTorch steals a gradient nothing else holds; a hook that only looks holds nothing after it returns.
  const auto events_with_hook = [](bool hooked) {
    Tensor w = zeros({256}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
    if (hooked) w.register_hook([](const Tensor&) {});
    Tensor y = w * 2.0;
    return allocation_events(kSim, [&] { y.sum().backward(); });
  };
  CHECK(events_with_hook(true) == events_with_hook(false));
}

TEST_CASE("module hooks: forward pre-hooks and forward hooks with removable handles") {
  nn::Linear fc(2, 2);
  {
    NoGradGuard no_grad;
    fc.weight().copy_(tensor({{1.0, 0.0}, {0.0, 1.0}}));
    fc.bias().zero_();
  }
  const Tensor x = tensor({{1.0, 2.0}});
  std::vector<std::string> calls;
  RemovableHandle pre = fc.register_forward_pre_hook([&](nn::Module&, const Tensor& input) {
    calls.push_back("pre");
    return input * 10.0;  // replaces the input
  });
  RemovableHandle post = fc.register_forward_hook([&](nn::Module& m, const Tensor& input, const Tensor& output) {
    calls.push_back("post " + nn::module_class_name(m));
    CHECK(input.tolist() == std::vector<double>{10, 20});
    CHECK(output.tolist() == std::vector<double>{10, 20});
  });
  RemovableHandle negate = fc.register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& output) -> std::optional<Tensor> { return -output; });
  CHECK(fc(x).tolist() == std::vector<double>{-10, -20});
  CHECK(calls == std::vector<std::string>{"pre", "post Linear"});
  CHECK(fc.forward(x).tolist() == std::vector<double>{1, 2});  // forward() itself runs no hooks
  pre.remove();
  negate.remove();
  post.remove();
  CHECK(fc(x).tolist() == std::vector<double>{1, 2});
}

TEST_CASE("InferenceMode records nothing, as no_grad, and allocates what no_grad allocates") {
  Tensor w = randn({64, 64}, device(kSim)).requires_grad_();
  const auto run = [&] { return allocation_events(kSim, [&] { (void)(w * 2.0).relu().sum(); }); };
  AllocationEvents inference, no_grad;
  {
    InferenceMode guard;
    CHECK(!grad_mode_enabled());
    CHECK(!(w * 2.0).requires_grad());
    inference = run();
  }
  CHECK(grad_mode_enabled());
  {
    NoGradGuard guard;
    no_grad = run();
  }
  CHECK(inference == no_grad);
  {
    InferenceMode off(false);
    CHECK(grad_mode_enabled());
  }
}

TEST_CASE("rsqrt, cos and sin: values by hand and gradients against finite differences") {
  const Tensor x = tensor({0.25, 1.0, 4.0}, TensorOptions{ScalarType::float64, kSim});
  CHECK(rsqrt(x).tolist() == std::vector<double>{2.0, 1.0, 0.5});  // 1 / sqrt(x)
  CHECK(x.rsqrt().tolist() == std::vector<double>{2.0, 1.0, 0.5});
  const double pi = std::acos(-1.0);
  const Tensor angles = tensor({0.0, pi / 2, pi}, TensorOptions{ScalarType::float64, kSim});
  const std::vector<double> c = cos(angles).tolist(), s = sin(angles).tolist();
  CHECK(c[0] == 1.0);
  CHECK(std::fabs(c[1]) < 1e-15);
  CHECK(c[2] == -1.0);
  CHECK(s[0] == 0.0);
  CHECK(s[1] == 1.0);
  CHECK(std::fabs(s[2]) < 1e-15);

  Tensor leaf = tensor({0.25, 1.0, 4.0}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
  Tensor r = rsqrt(leaf);
  CHECK(r.grad_fn_name() == "RsqrtBackward0");
  r.sum().backward();
  CHECK(leaf.grad().tolist() == std::vector<double>{-4.0, -0.5, -0.0625});  // -0.5 * x^(-3/2)
  CHECK(cos(leaf).grad_fn_name() == "CosBackward0");
  CHECK(sin(leaf).grad_fn_name() == "SinBackward0");

  manual_seed(5);
  const Tensor w = randn({3, 4}, f64());
  check_gradients([&](auto& v) { return sum(rsqrt(v[0]) * w); }, {rand({3, 4}, f64()) + 0.5});
  check_gradients([&](auto& v) { return sum(cos(v[0]) * w); }, {randn({3, 4}, f64())});
  check_gradients([&](auto& v) { return sum(sin(v[0]) * w); }, {randn({3, 4}, f64())});
  CHECK_THROWS_AS(cos(ones({2}, dtype(kLong).with_device(kSim))), std::invalid_argument);  // floating only

  nn::Cosine cosine;  // the one-line module
  CHECK(cosine(angles).tolist() == cos(angles).tolist());
  CHECK(cosine.parameters().empty());
}

TEST_CASE("rsqrt, cos and sin backward allocate as derivatives.yaml's formulas compute (sim)") {
  // n = 1024 float32 elements: 4096 bytes each. cos: sin(self), its negation, the gradient, then the two
  // temporaries freed; sin: cos(self), the gradient, cos freed; rsqrt: -0.5 * grad and result^3, the
  // gradient, both freed. PyTorch's recording (op_table_events.jsonl) is compared in test_programs.
  const int64_t n = 4096;
  const auto backward_events = [](Tensor (*op)(const Tensor&)) {
    Tensor x = (rand({1024}, device(kSim)) + 0.5).detach().requires_grad_();
    Tensor y = op(x);
    const Tensor g = ones_like(y);
    return allocation_events(kSim, [&] { y.backward(g); });
  };
  using E = AllocationEvents;
  CHECK(backward_events(&cos) == E{{"alloc", n}, {"alloc", n}, {"alloc", n}, {"free", n}, {"free", n}});
  CHECK(backward_events(&sin) == E{{"alloc", n}, {"alloc", n}, {"free", n}});
  CHECK(backward_events(&rsqrt) == E{{"alloc", n}, {"alloc", n}, {"alloc", n}, {"free", n}, {"free", n}});
}

TEST_CASE("cross_entropy with label_smoothing: PyTorch's mixture by hand, ignore_index, gradients") {
  // Row 0: logits (0, ln 2, ln 3) give probabilities (1/6, 2/6, 3/6); target 2. nll = -ln(1/2) = ln 2; the
  // smoothing term -sum(log p) = ln 6 + ln 3 + ln 2 = ln 36. With s = 0.3 and C = 3:
  // 0.7 * ln 2 + (0.3 / 3) * ln 36. Row 1 is ignored (target -100): both terms leave it out of the mean.
  const Tensor logits = tensor({{0.0, std::log(2.0), std::log(3.0)}, {5.0, -1.0, 2.0}}, f64());
  const Tensor target = from_vector({2, -100}, {2}, TensorOptions{ScalarType::int64, kCpu});
  const double want = 0.7 * std::log(2.0) + 0.1 * std::log(36.0);
  CHECK(std::fabs(cross_entropy(logits, target, Reduction::mean, -100, 0.3).item() - want) < 1e-12);
  CHECK(std::fabs(cross_entropy(logits, target, Reduction::sum, -100, 0.3).item() - want) < 1e-12);
  const std::vector<double> per_row = cross_entropy(logits, target, Reduction::none, -100, 0.3).tolist();
  CHECK(std::fabs(per_row[0] - want) < 1e-12);
  CHECK(per_row[1] == 0.0);
  CHECK(cross_entropy(logits, target, Reduction::mean, -100, 0.0).item() ==
        cross_entropy(logits, target).item());  // no smoothing: nll_loss(log_softmax) alone
  CHECK_THROWS_WITH_AS(cross_entropy(logits, target, Reduction::mean, -100, 1.5),
                       doctest::Contains("label_smoothing must be between 0.0 and 1.0"), std::invalid_argument);

  manual_seed(7);
  const Tensor classes = from_vector({1, 0, 3, 2}, {4}, TensorOptions{ScalarType::int64, kCpu});
  for (Reduction reduction : {Reduction::mean, Reduction::sum}) {
    check_gradients([&](auto& v) { return cross_entropy(v[0], classes, reduction, -100, 0.2); },
                    {randn({4, 5}, f64())});
  }
  check_gradients([&](auto& v) { return sum(cross_entropy(v[0], classes, Reduction::none, -100, 0.2)); },
                  {randn({4, 5}, f64())});
}

TEST_CASE("leaky_relu and nn::LeakyReLU: values by hand, gradients, node") {
  const Tensor x = tensor({-2.0, -0.5, 0.0, 3.0}, f64());
  CHECK(leaky_relu(x).tolist() == std::vector<double>{-0.02, -0.005, 0.0, 3.0});  // x * 0.01 below 0
  CHECK(leaky_relu(x, 0.5).tolist() == std::vector<double>{-1.0, -0.25, 0.0, 3.0});
  nn::LeakyReLU module(0.5);
  CHECK(module(x).tolist() == leaky_relu(x, 0.5).tolist());
  CHECK(module.parameters().empty());
  Tensor leaf = tensor({-2.0, 3.0}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
  Tensor y = leaky_relu(leaf, 0.25);
  CHECK(y.grad_fn_name() == "LeakyReluBackward0");
  y.sum().backward();
  CHECK(leaf.grad().tolist() == std::vector<double>{0.25, 1.0});
  manual_seed(9);
  const Tensor w = randn({3, 4}, f64());
  check_gradients([&](auto& v) { return sum(leaky_relu(v[0], 0.1) * w); }, {randn({3, 4}, f64())});
  CHECK_THROWS_AS(leaky_relu(ones({2}, dtype(kLong))), std::invalid_argument);
}

TEST_CASE("binary_cross_entropy_with_logits: values by hand, reductions, gradients of input and target") {
  // x = 0: log_sigmoid(0) = -ln 2, so the loss is (1 - t) * 0 + ln 2 = ln 2 whatever t.
  // x = ln 3, t = 1: -log_sigmoid(ln 3) = -ln(3/4) = ln 4 - ln 3. x = -ln 3, t = 0: x - log_sigmoid(x) =
  // -ln 3 - ln(1/4) = ln 4 - ln 3.
  const double l3 = std::log(3.0), want = std::log(4.0) - l3;
  const Tensor x = tensor({0.0, l3, -l3}, f64()), t = tensor({0.3, 1.0, 0.0}, f64());
  const std::vector<double> none = binary_cross_entropy_with_logits(x, t, Reduction::none).tolist();
  CHECK(std::fabs(none[0] - std::log(2.0)) < 1e-15);
  CHECK(std::fabs(none[1] - want) < 1e-15);
  CHECK(std::fabs(none[2] - want) < 1e-15);
  const double total = std::log(2.0) + 2 * want;
  CHECK(std::fabs(binary_cross_entropy_with_logits(x, t, Reduction::sum).item() - total) < 1e-14);
  CHECK(std::fabs(binary_cross_entropy_with_logits(x, t).item() - total / 3) < 1e-14);
  // Large logits stay finite (log_sigmoid's stable form).
  CHECK(binary_cross_entropy_with_logits(tensor({-200.0, 200.0}, f64()), tensor({1.0, 0.0}, f64()), Reduction::sum)
            .item() == 400.0);
  CHECK_THROWS_WITH_AS(binary_cross_entropy_with_logits(x, tensor({1.0}, f64())),
                       doctest::Contains("must be the same as input size"), std::invalid_argument);

  Tensor logits = tensor({0.5, -1.0}, TensorOptions{ScalarType::float32, kSim}).requires_grad_();
  Tensor loss = binary_cross_entropy_with_logits(logits, tensor({1.0, 0.0}, device(kSim)));
  CHECK(loss.grad_fn_name() == "BinaryCrossEntropyWithLogitsBackward0");
  manual_seed(13);
  for (Reduction reduction : {Reduction::mean, Reduction::sum}) {
    check_gradients([&](auto& v) { return binary_cross_entropy_with_logits(v[0], v[1], reduction); },
                    {randn({3, 4}, f64()), rand({3, 4}, f64())});
  }
  check_gradients([&](auto& v) { return sum(binary_cross_entropy_with_logits(v[0], v[1], Reduction::none)); },
                  {randn({3, 4}, f64()), rand({3, 4}, f64())});
}

TEST_CASE("repeat_interleave: values, shapes, one allocation, gradients") {
  const Tensor x = tensor({{1.0, 2.0}, {3.0, 4.0}}, f64());
  CHECK(repeat_interleave(x, 2).tolist() == std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4});  // flattened
  CHECK(repeat_interleave(x, 2, 0).tolist() == std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4});
  const Tensor columns = repeat_interleave(x, 3, -1);
  CHECK(columns.sizes() == Shape{2, 6});
  CHECK(columns.tolist() == std::vector<double>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4});
  CHECK(repeat_interleave(x, 0, 1).sizes() == Shape{2, 0});
  CHECK_THROWS_WITH_AS(repeat_interleave(x, -1), doctest::Contains("non-negative"), std::invalid_argument);
  // The clone is the only allocation: 64 * 32 float32 repeated twice = 64 * 64 * 4 = 16384 bytes.
  const Tensor big = randn({64, 32}, device(kSim));
  CHECK(allocation_events(kSim, [&] { (void)repeat_interleave(big, 2, 1); }) ==
        AllocationEvents{{"alloc", 16384}, {"free", 16384}});
  manual_seed(17);
  const Tensor w = randn({3, 8}, f64());
  check_gradients([&](auto& v) { return sum(repeat_interleave(v[0], 2, 1) * w); }, {randn({3, 4}, f64())});
}
