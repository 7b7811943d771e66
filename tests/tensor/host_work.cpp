// Host work that starts PyTorch's CPU thread pool (memory/host_work.h), as the op layer notes it: at::parallel_for
// runs on the pool when its iterations exceed the grain and are more than one. Fills loop over elements with
// grain 32768 (at::internal::GRAIN_SIZE; TensorIterator stays serial at exactly 32768), tril and triu over
// matrices, then rows, with grain 0 (aten/src/ATen/native/TriangularOps.cpp).
#include "bytegrad/memory/host_work.h"
#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const TensorOptions kOnCpu = TensorOptions{}.with_device(kCpu);

bool pool_started_after(void (*work)()) {
  forget_host_work();
  work();
  const bool started = host_thread_pool_started();
  forget_host_work();
  return started;
}

}  // namespace

TEST_CASE("host work: what starts PyTorch's CPU thread pool") {
  // 128 x 256 = 32768 elements: the grain, not above it; one more row is.
  CHECK_FALSE(pool_started_after([] { (void)ones({128, 256}, kOnCpu); }));
  CHECK(pool_started_after([] { (void)ones({129, 256}, kOnCpu); }));
  CHECK_FALSE(pool_started_after([] { (void)zeros({64, 64}, kOnCpu); }));
  // nanoGPT's causal mask at block 64: ones(64, 64) is serial, tril over its 64 rows is not.
  CHECK(pool_started_after([] { (void)tril(ones({64, 64}, kOnCpu)); }));
  CHECK_FALSE(pool_started_after([] { (void)tril(ones({1, 64}, kOnCpu)); }));
  // Two matrices of one row: the loop over matrices runs in parallel.
  CHECK(pool_started_after([] { (void)triu(ones({2, 1, 8}, kOnCpu)); }));
  // Random fills are serial in PyTorch.
  CHECK_FALSE(pool_started_after([] { (void)randn({1024, 1024}, kOnCpu); }));
  // A meta device standing for the host counts (programs build there on meta); a measured one does not.
  CHECK(pool_started_after([] {
    (void)tril(ones({64, 64}, TensorOptions{}.with_device(Device{DeviceType::meta, kHostStandInMetaIndex})));
  }));
  CHECK_FALSE(pool_started_after([] { (void)tril(ones({64, 64}, TensorOptions{}.with_device(kMeta))); }));
  CHECK_FALSE(pool_started_after([] { (void)tril(ones({64, 64}, TensorOptions{}.with_device(kSim))); }));
}

// Host blocks as the op layer notes them for the host's address map (memory/host_work.h): a cpu tensor of 128
// KiB or more is its own mapping; freed before any device storage exists, it leaves a hole above the device's
// regions. 32768 floats = 131072 B: with glibc's 16-byte header, 33 pages = 135168 B.
TEST_CASE("host blocks: cpu tensors freed before the device's first storage count, later ones not") {
  forget_host_work();
  { Tensor parameter = empty({32768}, kOnCpu); }
  CHECK(host_freed_above_device() == 135168);
  { Tensor small = empty({1000}, kOnCpu); }  // 4000 B: the heap's
  CHECK(host_freed_above_device() == 135168);
  // A meta device standing for the host counts too; a measured one does not.
  { Tensor parameter = empty({32768}, TensorOptions{}.with_device(Device{DeviceType::meta, kHostStandInMetaIndex})); }
  CHECK(host_freed_above_device() == 2 * 135168);
  // After a device storage, host blocks are mapped below the device's regions.
  Tensor on_device = empty({4}, TensorOptions{}.with_device(kMeta));
  { Tensor later = empty({32768}, kOnCpu); }
  CHECK(host_freed_above_device() == 2 * 135168);
  forget_host_work();
}
