// LayerNorm: PyTorch's allocation events for every "layernorm" probe (tests/data/pytorch_probes/events.jsonl,
// made by tools/probes/pytorch_event_probe.py layernorm_cases(): forward, backward and no_grad forward of
// torch.nn.LayerNorm on an H100) replayed on sim and meta; gradients against finite differences in float64;
// the functional form against a float64 reference written with plain ops; errors.
#include <map>
#include <regex>
#include <sstream>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/layer_norm.h"
#include "nn_helpers.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/pytorch_probes.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

using Events = AllocationEvents;

struct LayerNormCase {
  std::string name;
  Shape shape, normalized_shape;
  bool affine = true, bias = true, xgrad = true;
  ScalarType dtype = ScalarType::float32;
  Events forward, backward, no_grad_forward;
};

Shape parse_ints(const std::string& text) {
  Shape out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

Events parse_events(const Json& events, const std::string& key) {
  const Json* list = events.find(key);
  REQUIRE(list != nullptr);
  return events_of(*list);
}

std::vector<LayerNormCase> read_layernorm_cases() {
  static const std::regex case_re(
      R"re((layernorm \[([0-9, ]*)\] norm=(\(([0-9, ]*)\)|[0-9]+) affine=(True|False) bias=(True|False) (f32|bf16) xgrad=(True|False)))re");
  std::vector<LayerNormCase> cases;
  for (const Json& row : probe_rows("layernorm")) {
    const std::string& name = row["case"].string();
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_match(name, m, case_re), name);
    LayerNormCase c;
    c.name = m[1];
    c.shape = parse_ints(m[2]);
    c.normalized_shape = m[4].matched ? parse_ints(m[4]) : Shape{std::stoll(m[3])};
    c.affine = m[5] == "True";
    c.bias = m[6] == "True";
    c.dtype = m[7] == "f32" ? ScalarType::float32 : ScalarType::bfloat16;
    c.xgrad = m[8] == "True";
    c.forward = parse_events(row["events"], "forward");
    c.backward = parse_events(row["events"], "backward");
    c.no_grad_forward = parse_events(row["events"], "no_grad_forward");
    cases.push_back(std::move(c));
  }
  return cases;
}

// Runs one probe as the probe script does: LayerNorm(norm, affine, bias), x (requires grad per the case),
// g; forward, backward(g), then a no_grad forward whose output is still held when recording stops. Values
// do not change allocations, so inputs are filled with constants (randn of 33M elements per case is slow).
struct Replayed {
  Events forward, backward, no_grad_forward;
};
Replayed replay(const LayerNormCase& c, Device d) {
  Replayed out;
  nn::LayerNorm ln(c.normalized_shape, 1e-5, c.affine, c.bias, TensorOptions{c.dtype, d});
  Tensor x = full(c.shape, 0.5, TensorOptions{c.dtype, d});
  x.requires_grad_(c.xgrad);
  Tensor g = full(c.shape, 1.0, TensorOptions{c.dtype, d});
  Tensor y;
  out.forward = allocation_events(d, [&] { y = ln(x); });
  out.backward = allocation_events(d, [&] { y.backward(g); });
  Tensor y2;
  out.no_grad_forward = allocation_events(d, [&] {
    NoGradGuard no_grad;
    y2 = ln(x);
  });
  return out;
}

}  // namespace

TEST_CASE("LayerNorm: every PyTorch layernorm probe, event for event, on sim and meta") {
  const std::vector<LayerNormCase> cases = read_layernorm_cases();
  REQUIRE(cases.size() == 120);
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    int matched = 0, bf16 = 0;
    for (const LayerNormCase& c : cases) {
      CAPTURE(c.name);
      clear_blas_workspaces();
      reset_device(d);
      const Replayed r = replay(c, d);
      CHECK(r.forward == c.forward);
      CHECK(r.backward == c.backward);
      CHECK(r.no_grad_forward == c.no_grad_forward);
      if (r.forward == c.forward && r.backward == c.backward && r.no_grad_forward == c.no_grad_forward) {
        ++matched;
        bf16 += c.dtype == ScalarType::bfloat16;
      }
    }
    reset_device(d);
    MESSAGE(matched << " of " << cases.size() << " layernorm probes match on " << d.str() << " (" << bf16
                    << " of them bfloat16), forward, backward and no_grad forward");
    CHECK(matched == static_cast<int>(cases.size()));
  }
}

TEST_CASE("layer_norm: forward matches a float64 reference; mean and rstd shapes and dtypes") {
  manual_seed(21);
  for (const auto& shapes :
       std::vector<std::pair<Shape, Shape>>{{{4, 6}, {6}}, {{2, 3, 5}, {3, 5}}, {{7}, {7}}, {{2, 2, 3, 4}, {4}}}) {
    const Shape shape = shapes.first, norm = shapes.second;
    CAPTURE(shape_str(shape));
    Tensor x = randn(shape, f64()) * 3.0 + 10.0;  // a large common offset: the two-pass variance handles it
    Tensor w = randn(norm, f64()), b = randn(norm, f64());
    LayerNormResult r = native_layer_norm(x, norm, w, b, 1e-5);
    Shape dims;
    for (size_t i = 0; i < norm.size(); ++i) dims.push_back(static_cast<int64_t>(shape.size() - norm.size() + i));
    Tensor mu = mean(x, dims, true);
    Tensor var = mean((x - mu) * (x - mu), dims, true);
    Tensor expected = (x - mu) / sqrt(var + 1e-5) * w + b;
    const std::vector<double> a = r.output.tolist(), e = expected.tolist();
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(e[i]).epsilon(1e-10));
    CHECK(r.mean.sizes() == mu.sizes());
    CHECK(r.rstd.sizes() == mu.sizes());
    CHECK(r.mean.dtype() == ScalarType::float64);
    const std::vector<double> m1 = r.mean.tolist(), m2 = mu.tolist();
    for (size_t i = 0; i < m1.size(); ++i) CHECK(m1[i] == doctest::Approx(m2[i]).epsilon(1e-12));
  }
  // float32 and bfloat16 inputs keep float32 statistics (PyTorch's accumulate type on CUDA)
  Tensor xf = randn({3, 8});
  CHECK(native_layer_norm(xf, {8}, std::nullopt, std::nullopt, 1e-5).rstd.dtype() == ScalarType::float32);
  Tensor xb = randn({3, 8}, dtype(ScalarType::bfloat16));
  LayerNormResult rb = native_layer_norm(xb, {8}, std::nullopt, std::nullopt, 1e-5);
  CHECK(rb.mean.dtype() == ScalarType::float32);
  CHECK(rb.output.dtype() == ScalarType::bfloat16);
  // a non-contiguous input is normalized as its values (copied first)
  Tensor xt = randn({8, 3}, f64()).t();
  const std::vector<double> t1 = layer_norm(xt, {8}).tolist(), t2 = layer_norm(xt.contiguous(), {8}).tolist();
  CHECK(t1 == t2);
}

TEST_CASE("layer_norm: input, weight and bias gradients match finite differences (float64)") {
  manual_seed(22);
  for (const auto& shapes : std::vector<std::pair<Shape, Shape>>{
           {{3, 5}, {5}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {3, 4}}, {{6}, {6}}, {{2, 2, 2, 3}, {2, 2, 3}}}) {
    const Shape shape = shapes.first, norm = shapes.second;
    CAPTURE(shape_str(shape));
    CAPTURE(shape_str(norm));
    Tensor out_weights = randn(shape, f64());
    // all three
    check_gradients([&](auto& v) { return sum(layer_norm(v[0], norm, v[1], v[2], 1e-5) * out_weights); },
                    {randn(shape, f64()), randn(norm, f64()), randn(norm, f64())});
    // weight only (no bias), and no affine at all
    check_gradients([&](auto& v) { return sum(layer_norm(v[0], norm, v[1], std::nullopt, 1e-3) * out_weights); },
                    {randn(shape, f64()), randn(norm, f64())});
    check_gradients([&](auto& v) { return sum(layer_norm(v[0], norm) * out_weights); }, {randn(shape, f64())});
  }
}

TEST_CASE("LayerNorm module: ones/zeros parameters, named like torch's, gradients match finite differences") {
  manual_seed(23);
  nn::LayerNorm ln(Shape{3, 4}, 1e-5, true, true, f64());
  const auto names = ln.named_parameters();
  REQUIRE(names.size() == 2);
  CHECK(names[0].first == "weight");
  CHECK(names[1].first == "bias");
  CHECK(ln.weight().tolist() == std::vector<double>(12, 1.0));
  CHECK(ln.bias().tolist() == std::vector<double>(12, 0.0));
  CHECK(nn::LayerNorm(8, 1e-5, true, false).named_parameters().size() == 1);
  CHECK(nn::LayerNorm(8, 1e-5, false).named_parameters().empty());
  // Perturb the parameters away from ones/zeros so the weight gradient is exercised at a generic point.
  {
    NoGradGuard no_grad;
    ln.weight().copy_(randn({3, 4}, f64()));
    ln.bias().copy_(randn({3, 4}, f64()));
  }
  Tensor x = randn({2, 3, 4}, f64());
  Tensor w = randn({2, 3, 4}, f64());
  check_parameter_gradients(ln, [&] { return sum(ln(x) * w); });
  check_gradients([&](auto& v) { return sum(ln(v[0]) * w); }, {x});
  // Only what needs a gradient is computed: x without requires_grad gets none, parameters do.
  ln.zero_grad();
  Tensor x2 = randn({2, 3, 4}, f64());
  sum(ln(x2)).backward();
  CHECK(!x2.grad().defined());
  CHECK(ln.weight().grad().defined());
}

TEST_CASE("layer_norm: the graph keeps mean and rstd until backward (saved tensors named as PyTorch's)") {
  Tensor x = randn({4, 8}).requires_grad_(true);
  nn::LayerNorm ln(8);
  Tensor y = ln(x);
  CHECK(y.grad_fn_name() == "NativeLayerNormBackward0");
  sum(y).backward();
  CHECK(x.grad().sizes() == Shape{4, 8});
  CHECK(ln.weight().grad().sizes() == Shape{8});
  CHECK(ln.bias().grad().sizes() == Shape{8});
  CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("NativeLayerNormBackward0"), std::runtime_error);
}

TEST_CASE("layer_norm: bad input is a clear error naming the problem") {
  Tensor x = randn({4, 8}, device(kCpu));
  CHECK_THROWS_WITH_AS(layer_norm(x, {7}),
                       doctest::Contains("expected input with shape [*, 7], but got input of size [4, 8]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(x, {4, 8, 1}), doctest::Contains("normalized_shape=[4, 8, 1]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(x, {}), doctest::Contains("at least 1-dimensional"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(x, {8}, ones({4}, device(kCpu))),
                       doctest::Contains("expected weight to be of same shape as normalized_shape, but got weight of "
                                         "shape [4] and normalized_shape = [8]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(x, {8}, ones({8}, device(kCpu)), zeros({2, 4}, device(kCpu))),
                       doctest::Contains("bias"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(x, {8}, ones({8}, TensorOptions{ScalarType::float64, kCpu})),
                       doctest::Contains("dtype mismatch"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(x, {8}, ones({8}, device(kSim))), doctest::Contains("same device"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({4, 8}, TensorOptions{ScalarType::int64, kCpu}), {8}),
                       doctest::Contains("floating-point"), std::invalid_argument);
  CHECK_THROWS_AS(nn::LayerNorm(Shape{}), std::invalid_argument);
  CHECK_THROWS_AS(nn::LayerNorm(8, 1e-5, true, true, dtype(ScalarType::int32)), std::invalid_argument);
}
