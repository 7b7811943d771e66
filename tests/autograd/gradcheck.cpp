// Every differentiable op's gradient against central finite differences, in float64 on cpu and sim.
#include "bytegrad/autograd/engine.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

TensorOptions f64(Device d) { return TensorOptions{ScalarType::float64, d}; }

Tensor r(const Shape& s, Device d = kCpu) { return randn(s, f64(d)); }

// A positive tensor, for log/sqrt/div.
Tensor pos(const Shape& s, Device d = kCpu) { return rand(s, f64(d)) + 0.5; }

}  // namespace

TEST_CASE("pointwise gradients match finite differences") {
  manual_seed(1);
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    check_gradients([](auto& v) { return sum(v[0] + v[1] * 2.0); }, {r({3, 4}, d), r({3, 4}, d)});
    check_gradients([](auto& v) { return sum(add(v[0], v[1], 0.5)); }, {r({3, 4}, d), r({4}, d)});  // broadcast
    check_gradients([](auto& v) { return sum(sub(v[0], v[1], 3.0)); }, {r({2, 3}, d), r({2, 3}, d)});
    check_gradients([](auto& v) { return sum((2.0 - v[0]) * v[1]); }, {r({5}, d), r({5}, d)});
    check_gradients([](auto& v) { return sum(v[0] / v[1]); }, {r({4}, d), pos({4}, d)});
    check_gradients([](auto& v) { return sum(v[0] / 3.0 + v[0] * 0.25 - 1.0); }, {r({4}, d)});
    check_gradients([](auto& v) { return sum(-v[0] * v[0]); }, {r({4}, d)});
    check_gradients([](auto& v) { return sum(exp(v[0])); }, {r({4}, d)});
    check_gradients([](auto& v) { return sum(log(v[0])); }, {pos({4}, d)});
    check_gradients([](auto& v) { return sum(sqrt(v[0])); }, {pos({4}, d)});
    check_gradients([](auto& v) { return sum(pow(v[0], 3.0)); }, {r({4}, d)});
    check_gradients([](auto& v) { return sum(sigmoid(v[0])); }, {r({6}, d)});
    check_gradients([](auto& v) { return sum(tanh(v[0])); }, {r({6}, d)});
    check_gradients([](auto& v) { return sum(gelu(v[0])); }, {r({6}, d)});
    check_gradients([](auto& v) { return sum(relu(v[0]) * v[0]); }, {r({6}, d)});
  }
}

TEST_CASE("reduction, product and view gradients match finite differences") {
  manual_seed(2);
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    check_gradients([](auto& v) { return mean(v[0] * v[0]); }, {r({3, 4}, d)});
    check_gradients([](auto& v) { return sum(sum(v[0], {1}) * v[1]); }, {r({3, 4}, d), r({3}, d)});
    check_gradients([](auto& v) { return sum(mean(v[0], {0}, true) * v[1]); }, {r({3, 4}, d), r({1, 4}, d)});
    check_gradients([](auto& v) { return sum(mm(v[0], v[1]) * v[2]); }, {r({3, 4}, d), r({4, 2}, d), r({3, 2}, d)});
    check_gradients([](auto& v) { return sum(mm(v[0].t(), v[1])); }, {r({4, 3}, d), r({4, 2}, d)});
    check_gradients([](auto& v) { return sum(addmm(v[0], v[1], v[2], 0.5, 2.0) * v[1].sum()); },
                    {r({2}, d), r({3, 4}, d), r({4, 2}, d)});
    check_gradients([](auto& v) { return sum(linear(v[0], v[1], v[2]) * linear(v[0], v[1], v[2])); },
                    {r({5, 3}, d), r({2, 3}, d), r({2}, d)});
    check_gradients([](auto& v) { return sum(matmul(v[0], v[1]) * 0.5); }, {r({2, 3, 4}, d), r({2, 4, 5}, d)});
    check_gradients([](auto& v) { return sum(matmul(v[0], v[1])); }, {r({2, 3, 4}, d), r({4, 5}, d)});
    check_gradients([](auto& v) { return sum(bmm(v[0], v[1]) * bmm(v[0], v[1])); }, {r({2, 3, 4}, d), r({2, 4, 2}, d)});
    check_gradients([](auto& v) { return sum(v[0].transpose(0, 1).reshape({-1}) * v[1]); }, {r({2, 3}, d), r({6}, d)});
    check_gradients(
        [](auto& v) {
          return sum(v[0].permute({2, 0, 1}).contiguous() * v[1]);
        },
        {r({2, 3, 4}, d), r({4, 2, 3}, d)});
    check_gradients([](auto& v) { return sum(v[0].select(1, 2) * v[0].slice(0, 1, 3).sum()); }, {r({3, 4}, d)});
    check_gradients(
        [](auto& v) {
          return sum(v[0].unsqueeze(0).expand({3, 2, 4}) * v[1]);
        },
        {r({2, 4}, d), r({3, 2, 4}, d)});
    check_gradients(
        [](auto& v) {
          auto rows = v[0].unbind(0);
          return sum(stack({rows[2], rows[0]}, 1) * v[1]);
        },
        {r({3, 4}, d), r({4, 2}, d)});
    check_gradients(
        [](auto& v) {
          return sum(cat({v[0], v[1]}, 1) * cat({v[1], v[0]}, 1));
        },
        {r({2, 3}, d), r({2, 3}, d)});
    const Device other = d == kCpu ? kSim : kCpu;
    check_gradients([&](auto& v) { return sum(v[0].to(other).to(d) * v[0]); }, {r({2, 3}, d)});  // to(device)
  }
}

TEST_CASE("nn op gradients match finite differences") {
  manual_seed(3);
  for (Device d : {kCpu, kSim}) {
    CAPTURE(d.str());
    Tensor w = r({4, 5}, d);
    check_gradients([&](auto& v) { return sum(softmax(v[0], 1) * w); }, {r({4, 5}, d)});
    check_gradients([&](auto& v) { return sum(log_softmax(v[0], 0) * w); }, {r({4, 5}, d)});
    Tensor mask = gt(r({4, 5}, d), 0.0);
    check_gradients([&](auto& v) { return sum(masked_fill(v[0], mask, 2.0) * w); }, {r({4, 5}, d)});
    check_gradients([&](auto& v) { return sum(where(mask, v[0], v[1]) * w); }, {r({4, 5}, d), r({4, 5}, d)});
    Tensor idx = from_vector({2, 0, 2}, {3}, TensorOptions{ScalarType::int64, d});
    Tensor weights = r({3, 5}, d);
    check_gradients([&](auto& v) { return sum(index_select(v[0], 0, idx) * weights); }, {r({4, 5}, d)});
    check_gradients([&](auto& v) { return sum(embedding(v[0], idx) * embedding(v[0], idx)); }, {r({4, 5}, d)});
  }
}
