// 16-bit SDPA with enable_gqa on cuda (bytegrad's cuDNN path with grouped heads, the SIMT kernels of
// cuda_attention.cu indexing key/value head h / (Hq / Hkv)) against the math path with key and value repeated
// on cpu, forward and backward; and GradScaler on cuda (the check, the unscale and the scale update on the
// device) against the same loop on sim: values, step decisions, scale, growth tracker and allocation events.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/optim/grad_scaler.h"
#include "bytegrad/optim/sgd.h"
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("scaled_dot_product_attention enable_gqa in bf16 and fp16 on cuda: the cuDNN path as the math path") {
  require_gpu();
  struct Case {
    int64_t b, hq, hk, l, d;
  };
  for (const ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16})
    for (const Case c : {Case{2, 8, 2, 64, 64}, Case{1, 4, 1, 33, 16}, Case{1, 6, 2, 40, 128}, Case{1, 8, 8, 24, 32}})
      for (const bool causal : {false, true}) {
        const std::string what = std::string(scalar_type_name(dtype)) + " [" + std::to_string(c.b) + "," +
                                 std::to_string(c.hq) + "," + std::to_string(c.hk) + "," + std::to_string(c.l) + "," +
                                 std::to_string(c.d) + "]" + (causal ? " causal" : "");
        CAPTURE(what);
        // The 16-bit values on the host, then float32 leaves for the reference (the math path upcasts anyway).
        const Tensor q16 = random_pair({c.b, c.hq, c.l, c.d}).cpu.to(dtype);
        const Tensor k16 = random_pair({c.b, c.hk, c.l, c.d}).cpu.to(dtype);
        const Tensor v16 = random_pair({c.b, c.hk, c.l, c.d}).cpu.to(dtype);
        Tensor qg = q16.to(kCuda).requires_grad_(), kg = k16.to(kCuda).requires_grad_(),
               vg = v16.to(kCuda).requires_grad_();
        Tensor qc = q16.to(ScalarType::float32).requires_grad_(), kc = k16.to(ScalarType::float32).requires_grad_(),
               vc = v16.to(ScalarType::float32).requires_grad_();
        const Tensor yg = scaled_dot_product_attention(qg, kg, vg, std::nullopt, 0.0, causal, std::nullopt, true);
        CHECK(yg.grad_fn_name() == "ScaledDotProductCudnnAttentionBackward0");
        const int64_t g = c.hq / c.hk;
        const Tensor yc =
            scaled_dot_product_attention_math(qc, repeat_interleave(kc, g, 1), repeat_interleave(vc, g, 1), causal);
        check_close(yg.to(ScalarType::float32), yc, 2e-2, 2e-2, "output");
        const Tensor w = random_pair(yc.sizes()).cpu;
        sum(yc * w).backward();
        sum(yg * w.to(dtype).to(kCuda)).backward();
        // dk and dv: the sums over each group's query heads (repeat_interleave's gradient on cpu).
        check_close(qg.grad().to(ScalarType::float32), qc.grad(), 3e-2, 3e-2, "dq");
        check_close(kg.grad().to(ScalarType::float32), kc.grad(), 3e-2, 5e-2, "dk");
        check_close(vg.grad().to(ScalarType::float32), vc.grad(), 3e-2, 5e-2, "dv");
      }
}

namespace {

// One scaler loop of `steps` on device d: p (1000 floats, or bf16) with loss = sum(p * w); the gradient is
// poisoned with inf or NaN at the steps listed. Returns everything the loop observed.
struct LoopResult {
  std::vector<bool> stepped;
  std::vector<double> scales, trackers, params, last_grad;
  std::vector<AllocationEvents> events;
};

LoopResult scaler_loop(Device d, ScalarType grad_dtype) {
  manual_seed(5);
  const Tensor host_p = randn({1000}, TensorOptions{ScalarType::float32, kCpu});
  const Tensor host_w = randn({1000}, TensorOptions{ScalarType::float32, kCpu}) * 3.0;
  Tensor p = host_p.to(grad_dtype).to(d).requires_grad_();
  const Tensor w = host_w.to(grad_dtype).to(d);
  optim::SGD opt({p}, 0.01);
  optim::GradScaler scaler(d.type, 1024.0, 2.0, 0.5, /*growth_interval=*/2);
  LoopResult r;
  for (int step = 0; step < 7; ++step) {
    opt.zero_grad();
    scaler.scale((p * w).sum()).backward();
    if (step == 2 || step == 5) {
      NoGradGuard no_grad;
      const double poison =
          step == 2 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
      p.grad().slice(0, 700, 701).fill_(poison);
    }
    r.events.push_back(allocation_events(d, [&] { r.stepped.push_back(scaler.step(opt)); }));
    r.events.push_back(allocation_events(d, [&] { scaler.update(); }));
    r.scales.push_back(scaler.get_scale());
    r.trackers.push_back(scaler.state_dict()["_growth_tracker"].number());
  }
  r.params = p.detach().to(ScalarType::float32).to(kCpu).tolist();
  r.last_grad = p.grad().to(ScalarType::float32).to(kCpu).tolist();
  return r;
}

}  // namespace

TEST_CASE("GradScaler on cuda: the check, unscale and update on the device, as on sim") {
  require_gpu();
  for (const ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16}) {
    CAPTURE(scalar_type_name(dtype));
    const LoopResult sim = scaler_loop(kSim, dtype), gpu = scaler_loop(kCuda, dtype);
    CHECK(gpu.stepped == sim.stepped);
    CHECK(gpu.stepped == std::vector<bool>{true, true, false, true, true, false, true});
    CHECK(gpu.scales == sim.scales);
    CHECK(gpu.trackers == sim.trackers);
    CHECK(gpu.events == sim.events);
    REQUIRE(gpu.params.size() == sim.params.size());
    for (size_t i = 0; i < sim.params.size(); ++i) {
      CHECK(gpu.params[i] == doctest::Approx(sim.params[i]).epsilon(1e-5));
      CHECK(gpu.last_grad[i] == doctest::Approx(sim.last_grad[i]).epsilon(1e-5));
    }
  }
  // The kernels alone: found_inf set by a NaN and left set, every value multiplied; the update on the device.
  const Tensor g = from_vector({1.0, 2.0, std::nan(""), 4.0}, {4}, TensorOptions{ScalarType::float32, kCuda});
  const Tensor found_inf = zeros({1}, TensorOptions{ScalarType::float32, kCuda});
  const Tensor inv_scale = full({1}, 0.25, TensorOptions{ScalarType::float32, kCuda});
  amp_foreach_non_finite_check_and_unscale_({g}, found_inf, inv_scale);
  CHECK(found_inf.item() == 1.0);
  const std::vector<double> unscaled = g.to(kCpu).tolist();
  CHECK(unscaled[0] == 0.25);
  CHECK(unscaled[3] == 1.0);
  CHECK(std::isnan(unscaled[2]));
  const Tensor finite = from_vector({8.0}, {1}, TensorOptions{ScalarType::float32, kCuda});
  amp_foreach_non_finite_check_and_unscale_({finite}, found_inf, inv_scale);
  CHECK(found_inf.item() == 1.0);  // never reset
  const Tensor scale = full({}, 3.0e38, TensorOptions{ScalarType::float32, kCuda});
  const Tensor tracker = full({}, 1.0, TensorOptions{ScalarType::int32, kCuda});
  const Tensor none_found = zeros({}, TensorOptions{ScalarType::float32, kCuda});
  amp_update_scale_(scale, tracker, none_found, 2.0, 0.5, 2);  // 6e38 is past float32: the scale is kept
  CHECK(scale.item() == static_cast<double>(3.0e38f));
  CHECK(tracker.item() == 0.0);
  amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2);
  CHECK(scale.item() == static_cast<double>(static_cast<float>(static_cast<double>(3.0e38f) * 0.5)));
}
