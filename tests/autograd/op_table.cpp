// Tests driven by the op table (core/op_table.h): every row has a sample (tests/support/op_samples.h),
// runs on cpu, sim and meta with the same results, records the node its row names, and is either
// gradchecked (grad rows) or refused with a message naming the table (no_grad rows whose result could
// carry a gradient).
#include <stdexcept>
#include <string>

#include "bytegrad/autograd/engine.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"
#include "tests/support/op_samples.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("every row of the op table has a sample that runs alike on cpu, sim and meta") {
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    CAPTURE(info.name);
    REQUIRE_MESSAGE(op_samples().count(op) == 1, "no sample for this row in tests/support/op_samples.h");
    const OpSample& sample = op_samples().at(op);

    const Tensor on_cpu = sample.call(sample_inputs(sample, kCpu));
    const Tensor on_sim = sample.call(sample_inputs(sample, kSim));
    // to(device) moves cpu's result to sim and sim's to cpu: compare values and shapes, not devices.
    CHECK(on_sim.sizes() == on_cpu.sizes());
    CHECK(on_sim.dtype() == on_cpu.dtype());
    CHECK(on_sim.tolist() == on_cpu.tolist());
    if (op == OpId::masked_select) {  // its size is the mask's count of true values, which meta lacks: refused
      CHECK_THROWS_WITH(sample.call(sample_inputs(sample, kMeta)), doctest::Contains("meta tensor does not have"));
      continue;
    }
    const Tensor on_meta = sample.call(sample_inputs(sample, kMeta));
    CHECK(on_meta.sizes() == on_cpu.sizes());
    CHECK(on_meta.dtype() == on_cpu.dtype());
    CHECK(on_meta.device().type == DeviceType::meta);
  }
}

TEST_CASE("every differentiable row records its node and matches finite differences on cpu and sim") {
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (!info.differentiable) continue;
    CAPTURE(info.name);
    const OpSample& sample = op_samples().at(op);
    REQUIRE(sample.differentiable_inputs > 0);
    for (Device device : {kCpu, kSim}) {
      CAPTURE(device.str());
      std::vector<Tensor> inputs = sample_inputs(sample, device);
      std::vector<Tensor> differentiable(inputs.begin(), inputs.begin() + sample.differentiable_inputs);
      const std::vector<Tensor> constants(inputs.begin() + sample.differentiable_inputs, inputs.end());
      for (Tensor& x : differentiable) x.requires_grad_(true);
      std::vector<Tensor> all = differentiable;
      all.insert(all.end(), constants.begin(), constants.end());
      const Tensor out = sample.call(all);
      CHECK(out.grad_fn_name() == info.node);

      // A fixed random weighting makes the output one number without losing any element's gradient.
      manual_seed(5);
      const Tensor weights = randn(out.sizes(), TensorOptions{out.dtype(), out.device()});
      for (Tensor& x : differentiable) x = x.detach();
      check_gradients(
          [&](const std::vector<Tensor>& v) {
            std::vector<Tensor> args = v;
            args.insert(args.end(), constants.begin(), constants.end());
            return sum(sample.call(args) * weights).to(ScalarType::float64);
          },
          differentiable, sample.gradcheck_tolerance);
    }
  }
}

TEST_CASE("a no_grad row whose result could need a gradient refuses a graph, naming the op table") {
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    if (info.differentiable) continue;
    CAPTURE(info.name);
    const OpSample& sample = op_samples().at(op);
    std::vector<Tensor> inputs = sample_inputs(sample, kCpu);
    const Tensor plain = sample.call(inputs);
    bool graph_refused = false;
    std::string message;
    for (size_t k = 0; k < sample.differentiable_inputs; ++k) inputs[k].requires_grad_(true);
    try {
      const Tensor out = sample.call(inputs);
      CHECK_FALSE(out.requires_grad());  // bool and integer results never carry a gradient
    } catch (const std::logic_error& e) {
      graph_refused = true;
      message = e.what();
    }
    if (is_floating_point(plain.dtype()) && sample.differentiable_inputs > 0) {
      CHECK(graph_refused);
      CHECK(message.find("not differentiable") != std::string::npos);
      CHECK(message.find("core/op_table.h") != std::string::npos);
    } else {
      CHECK_FALSE(graph_refused);
    }
  }
}
