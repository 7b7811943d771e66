#include "bytegrad/nn/init.h"

#include <atomic>
#include <cmath>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/random.h"

namespace bytegrad::nn::init {

namespace {

std::atomic<RandomFillObserver> random_fill_observer{nullptr};

// The checks and driver allocations of a fill, then `fill` (a tensor-layer fill from the process generator).
template <typename Fill>
const Tensor& fill_with(const char* op, const Tensor& t, Fill fill) {
  check_random_floating(op, t.dtype());
  if (RandomFillObserver observer = random_fill_observer.load()) observer(t);
  // PyTorch's uniform_/normal_ run curand's kernels on the device, whose module globals the driver allocates.
  if (t.numel() != 0) note_driver_allocations(t.device(), kModuleGlobals);
  if (t.is_meta()) return t;  // no values to write, and none drawn (as the random factories on meta)
  fill();
  return t;
}

}  // namespace

Tensor empty_parameter(const Shape& sizes, TensorOptions options) {
  AllocationScope scope("parameter");
  return empty(sizes, options);
}

const Tensor& uniform_(const Tensor& t, double bound) {
  return fill_with("uniform_", t, [&] { uniform_fill_(t, -bound, bound); });
}

const Tensor& normal_(const Tensor& t, double mean, double std) {
  return fill_with("normal_", t, [&] { normal_fill_(t, mean, std); });
}

void set_random_fill_observer(RandomFillObserver observer) { random_fill_observer.store(observer); }

double fan_in_bound(int64_t fan_in) { return fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0; }

}  // namespace bytegrad::nn::init
