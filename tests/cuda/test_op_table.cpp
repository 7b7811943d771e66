// Every row of the op table on cuda: the sample (tests/support/op_samples.h) gives the same result as on cpu
// (within the dtype's tolerance), and differentiable rows give the same gradients.
#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/op_samples.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// Values of a result on the host in float64 (bool and integer results compare exactly).
Tensor on_host(const Tensor& t) { return t.to(kCpu); }

}  // namespace

TEST_CASE("every row of the op table runs on cuda as on cpu, values and gradients") {
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    CAPTURE(info.name);
    REQUIRE(op_samples().count(op) == 1);
    const OpSample& sample = op_samples().at(op);
    std::vector<Tensor> cpu_inputs = sample_inputs(sample, kCpu);
    std::vector<Tensor> gpu_inputs = sample_inputs(sample, kCuda);
    const bool differentiable = info.differentiable;
    if (differentiable)
      for (size_t k = 0; k < sample.differentiable_inputs; ++k) {
        cpu_inputs[k].requires_grad_(true);
        gpu_inputs[k].requires_grad_(true);
      }
    const Tensor cpu_out = sample.call(cpu_inputs);
    const Tensor gpu_out = sample.call(gpu_inputs);
    check_close(on_host(gpu_out), on_host(cpu_out), 1e-9, 1e-12, std::string(info.name));
    if (!differentiable) continue;
    CHECK(gpu_out.grad_fn_name() == info.node);
    manual_seed(5);
    const Tensor weights = randn(cpu_out.sizes(), TensorOptions{cpu_out.dtype(), cpu_out.device()});
    sum(cpu_out * weights).backward();
    sum(gpu_out * weights.to(gpu_out.device())).backward();
    for (size_t k = 0; k < sample.differentiable_inputs; ++k) {
      CAPTURE(k);
      check_close(on_host(gpu_inputs[k].grad()), cpu_inputs[k].grad(), 1e-9, 1e-12, std::string(info.name) + " grad");
    }
  }
}
