#include "bytegrad/nn/init.h"

#include <atomic>
#include <cmath>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/allocation_context.h"

namespace bytegrad::nn::init {

namespace {

std::atomic<RandomFillObserver> random_fill_observer{nullptr};

template <typename Draw>
const Tensor& fill_with(const char* op, const Tensor& t, Draw draw) {
  check_random_floating(op, t.dtype());
  if (RandomFillObserver observer = random_fill_observer.load()) observer(t);
  // PyTorch's uniform_/normal_ run curand's kernels on the device, whose module globals the driver allocates.
  if (t.numel() != 0) note_driver_allocations(t.device(), kModuleGlobals);
  if (t.is_meta()) return t;  // no values to write, and none drawn (as the random factories on meta)
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (double& v : values) v = draw();
  fill_from_host(t, values);
  return t;
}

}  // namespace

Tensor empty_parameter(const Shape& sizes, TensorOptions options) {
  AllocationScope scope("parameter");
  return empty(sizes, options);
}

const Tensor& uniform_(const Tensor& t, double bound) {
  return fill_with("uniform_", t, [bound] { return (2.0 * random_uniform() - 1.0) * bound; });
}

const Tensor& normal_(const Tensor& t, double mean, double std) {
  return fill_with("normal_", t, [mean, std] { return mean + std * random_normal(); });
}

void set_random_fill_observer(RandomFillObserver observer) { random_fill_observer.store(observer); }

double fan_in_bound(int64_t fan_in) { return fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0; }

}  // namespace bytegrad::nn::init
