// masked_select (forward and backward), cross_entropy with class weights + label_smoothing + mean, SDPA with
// enable_gqa on the math backend, and randperm on cuda: the same values as on cpu (randperm: a permutation).
#include <algorithm>
#include <vector>

#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("masked_select on cuda: large, broadcast and strided inputs as on cpu, with gradients") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float16, ScalarType::int64}) {
    CAPTURE(scalar_type_name(dtype));
    // 100003 elements: many per thread of the one-block kernel; a (1, 37) mask broadcast; a transposed input.
    Pair x = on_both(random_pair({2703, 37}, ScalarType::float32, 10).cpu.to(dtype));
    const Tensor host_mask = randn({37}, TensorOptions{}.with_device(kCpu)) > 0.0;
    const Pair mask = on_both(host_mask);
    check_close(masked_select(x.gpu, mask.gpu), masked_select(x.cpu, mask.cpu), 0, 0, "broadcast mask");
    const Pair t = x.map([](const Tensor& v) { return v.t(); });  // (37, 2703)
    const Pair full_mask = on_both(randn({37, 2703}, TensorOptions{}.with_device(kCpu)) > 0.5);
    check_close(masked_select(t.gpu, full_mask.gpu), masked_select(t.cpu, full_mask.cpu), 0, 0, "transposed");
  }
  Pair x = random_pair({300, 40});
  x.cpu.requires_grad_(true);
  x.gpu.requires_grad_(true);
  const Pair mask = on_both(randn({300, 40}, TensorOptions{}.with_device(kCpu)) > 0.0);
  const Tensor yc = masked_select(x.cpu, mask.cpu), yg = masked_select(x.gpu, mask.gpu);
  const Tensor w = randn(yc.sizes(), TensorOptions{}.with_device(kCpu));
  sum(yc * w).backward();
  sum(yg * w.to(kCuda)).backward();
  check_close(x.gpu.grad(), x.cpu.grad(), 0, 0, "masked_select gradient");
}

TEST_CASE("cross_entropy with class weights, label_smoothing and mean on cuda as on cpu") {
  require_gpu();
  Pair logits = random_pair({64, 10});
  logits.cpu.requires_grad_(true);
  logits.gpu.requires_grad_(true);
  std::vector<int64_t> targets(64);
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = i % 7 == 0 ? -100 : static_cast<int64_t>(i % 10);
  const Pair target = on_both(from_vector(targets, {64}, TensorOptions{ScalarType::int64, kCpu}));
  const Pair weight = on_both(rand({10}, TensorOptions{ScalarType::float32, kCpu}));
  const Tensor lc = cross_entropy(logits.cpu, target.cpu, {.weight = weight.cpu, .label_smoothing = 0.1});
  const Tensor lg = cross_entropy(logits.gpu, target.gpu, {.weight = weight.gpu, .label_smoothing = 0.1});
  check_close(lg, lc, 1e-5, 1e-6, "loss");
  lc.backward();
  lg.backward();
  check_close(logits.gpu.grad(), logits.cpu.grad(), 1e-5, 1e-6, "gradient");
}

TEST_CASE("scaled_dot_product_attention enable_gqa (float32, math backend) on cuda as on cpu") {
  require_gpu();
  Pair q = random_pair({2, 8, 33, 16}), k = random_pair({2, 2, 40, 16}), v = random_pair({2, 2, 40, 24});
  for (Pair* p : {&q, &k, &v}) {
    p->cpu.requires_grad_(true);
    p->gpu.requires_grad_(true);
  }
  const Tensor yc = scaled_dot_product_attention(q.cpu, k.cpu, v.cpu, std::nullopt, 0.0, false, std::nullopt, true);
  const Tensor yg = scaled_dot_product_attention(q.gpu, k.gpu, v.gpu, std::nullopt, 0.0, false, std::nullopt, true);
  check_close(yg, yc, 1e-4, 1e-5, "output");
  sum(yc).backward();
  sum(yg).backward();
  check_close(q.gpu.grad(), q.cpu.grad(), 1e-4, 1e-5, "dq");
  check_close(k.gpu.grad(), k.cpu.grad(), 1e-4, 1e-5, "dk");
  check_close(v.gpu.grad(), v.cpu.grad(), 1e-4, 1e-5, "dv");
}

TEST_CASE("randperm on cuda: a permutation of 0 .. n-1 on the device") {
  require_gpu();
  for (int64_t n : {1, 1000, 100000}) {
    const Tensor p = randperm(n, TensorOptions{ScalarType::int64, kCuda});
    CHECK(p.device().type == DeviceType::cuda);
    std::vector<double> values = p.to(kCpu).tolist();
    std::sort(values.begin(), values.end());
    for (size_t i = 0; i < values.size(); ++i) REQUIRE(values[i] == static_cast<double>(i));
  }
}
