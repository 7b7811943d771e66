// nll_loss under autocast writes only the elements of its float32 cast that it reads (tensor/ops_loss.cpp,
// backend cast_target_elements): the kernel against its contract, and the loss, the gradient and every
// allocation equal to the whole cast's (forced by installing saved-tensor hooks, under which the cast is
// written whole).
#include <cstdint>
#include <memory>
#include <vector>

#include "bytegrad/autograd/saved_tensor_hooks.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"

namespace bytegrad::testing {
namespace {

TEST_CASE("cast_target_elements writes each row's target element, converted, and nothing else") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16}) {
    CAPTURE(dtype);
    Pair base = random_pair({37, 300}, dtype);
    const Tensor in = base.gpu.t();  // (300, 37) through a transpose
    std::vector<double> t(300);
    for (size_t i = 0; i < t.size(); ++i) t[i] = i % 11 == 0 ? -100.0 : static_cast<double>((i * 7) % 37);
    const Pair target = from_values(t, {300}, ScalarType::int64);
    Tensor out = full({300, 37}, 7.0, TensorOptions{}.with_device(kCuda));
    gpu().cast_target_elements(out.view_for_kernels(), in.view_for_kernels(), target.gpu_view(), -100);
    const std::vector<double> got = out.cpu().tolist();
    const std::vector<double> want = in.to(ScalarType::float32).cpu().tolist();
    int written = 0, wrong = 0;
    for (size_t i = 0; i < 300; ++i)
      for (size_t c = 0; c < 37; ++c) {
        const bool target_element = t[i] >= 0 && static_cast<size_t>(t[i]) == c;
        const double expected = target_element ? want[i * 37 + c] : 7.0;
        written += target_element ? 1 : 0;
        wrong += got[i * 37 + c] == expected ? 0 : 1;
      }
    CHECK(written == 300 - 28);  // rows 0, 11, ..., 297 (28 of them) ignored
    CHECK(wrong == 0);
  }
}

class KeepHooks final : public SavedTensorHooks {
 public:
  std::shared_ptr<void> pack(const Tensor& tensor) override { return std::make_shared<Tensor>(tensor); }
  Tensor unpack(const std::shared_ptr<void>& packed) override { return *static_cast<Tensor*>(packed.get()); }
};

struct LossRun {
  std::vector<double> loss, grad;
  int64_t peak = 0, allocated = 0;
};

LossRun cross_entropy_under_autocast(bool whole_cast) {
  const Tensor logits_f32 = randn({64, 1000}, TensorOptions{}.with_device(kCpu));
  std::vector<double> tv(64);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 9 == 0 ? -1.0 : static_cast<double>((i * 37) % 1000);
  const Tensor target = from_vector(tv, {64}, TensorOptions{}.with_dtype(ScalarType::int64).with_device(kCuda));
  Tensor logits = logits_f32.to(kCuda).to(ScalarType::bfloat16).detach().requires_grad_(true);
  synchronize(kCuda);
  reset_peak_memory_stats(kCuda);
  const int64_t before = memory_allocated(kCuda);
  LossRun run;
  {
    std::unique_ptr<SavedTensorHooksScope> hooks;
    if (whole_cast) hooks = std::make_unique<SavedTensorHooksScope>(std::make_shared<KeepHooks>());
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::cuda, ScalarType::bfloat16);
      loss = cross_entropy(logits, target, Reduction::mean, /*ignore_index=*/-1);
    }
    loss.backward();
    run.loss = loss.cpu().tolist();
  }
  run.grad = logits.grad().to(ScalarType::float32).cpu().tolist();
  run.peak = max_memory_allocated(kCuda) - before;
  run.allocated = memory_allocated(kCuda) - before;
  return run;
}

TEST_CASE("cross_entropy under bf16 autocast: the target-elements cast gives the whole cast's loss, gradient, memory") {
  require_gpu();
  manual_seed(3);
  const LossRun partial = cross_entropy_under_autocast(false);
  manual_seed(3);
  const LossRun whole = cross_entropy_under_autocast(true);
  CHECK(partial.loss == whole.loss);  // bit for bit: the same float32 values reach nll_loss
  CHECK(partial.grad == whole.grad);
  CHECK(partial.peak == whole.peak);
  CHECK(partial.allocated == whole.allocated);
  // The float32 cast (64 * 1000 * 4 = 256000 B) is part of the peak either way.
  CHECK(partial.peak >= 256000);
}

// tensor/gradient_reader.h on cuda: nll_loss_backward hands its gradient to the cast as packed rows
// (nll_loss_backward_rows, cast_nll_rows) unless a hook on the cast's output may read it.
LossRun packed_rows_backward(bool hooked, Reduction reduction, uint64_t& packed) {
  const Tensor logits_f32 = randn({300, 5003}, TensorOptions{}.with_device(kCpu));
  std::vector<double> tv(300);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 7 == 0 ? -1.0 : static_cast<double>((i * 131) % 5003);
  const Tensor target = from_vector(tv, {300}, TensorOptions{}.with_dtype(ScalarType::int64).with_device(kCuda));
  Tensor logits = logits_f32.to(kCuda).to(ScalarType::bfloat16).detach().requires_grad_(true);
  synchronize(kCuda);
  reset_peak_memory_stats(kCuda);
  const int64_t before = memory_allocated(kCuda);
  LossRun run;
  {
    const Tensor cast = log_softmax(logits, 1).to(ScalarType::float32);
    if (hooked) cast.register_hook([](const Tensor& g) { return g; });
    Tensor loss = nll_loss(cast, target, reduction, /*ignore_index=*/-1);
    if (reduction == Reduction::none) loss = loss.sum();
    const uint64_t handed = packed_gradients_handed(PackedGradient::nll_rows);
    loss.backward();
    packed = packed_gradients_handed(PackedGradient::nll_rows) - handed;
    run.loss = loss.cpu().tolist();
  }
  run.grad = logits.grad().to(ScalarType::float32).cpu().tolist();
  run.peak = max_memory_allocated(kCuda) - before;
  run.allocated = memory_allocated(kCuda) - before;
  return run;
}

TEST_CASE("the loss gradient as packed rows on cuda: the whole gradient's bits, peak and allocated") {
  require_gpu();
  for (const Reduction reduction : {Reduction::mean, Reduction::sum, Reduction::none}) {
    CAPTURE(static_cast<int>(reduction));
    uint64_t packed_count = 0, whole_count = 0;
    manual_seed(5);
    const LossRun packed = packed_rows_backward(false, reduction, packed_count);
    manual_seed(5);
    const LossRun whole = packed_rows_backward(true, reduction, whole_count);
    CHECK(packed_count == 1);
    CHECK(whole_count == 0);
    CHECK(packed.loss == whole.loss);
    CHECK(packed.grad == whole.grad);  // bit for bit
    CHECK(packed.peak == whole.peak);
    CHECK(packed.allocated == whole.allocated);
    CHECK(packed.peak >= 300 * 5003 * 4);  // the float32 gradient is allocated either way
  }
}

}  // namespace
}  // namespace bytegrad::testing
