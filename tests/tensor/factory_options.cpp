// Factories' TensorOptions as torch's keyword arguments: randint's int64 default when only a device is
// given, and requires_grad, which this suite (the tensor layer alone, no autograd linked) must refuse.
#include <doctest/doctest.h>

#include "helpers.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"

using namespace bytegrad;
using namespace bytegrad::testing;

TEST_CASE("randint is int64 unless a dtype is given, as torch.randint") {
  fresh(kSim);
  {
    MemoryProbe p(kSim);
    const Tensor a = randint(0, 10, {4}, device(kSim));  // torch.randint(0, 10, (4,), device=...)
    CHECK(a.dtype() == ScalarType::int64);
    CHECK(a.device() == kSim);
    CHECK(p.requested_delta() == 4 * 8);  // int64: 32 bytes asked, one 512-byte block
    CHECK(p.allocated_delta_is(512));
    for (double v : a.tolist()) CHECK((v >= 0 && v < 10 && v == static_cast<int64_t>(v)));
    CHECK(randint(0, 10, {4}).dtype() == ScalarType::int64);
    CHECK(randint(0, 10, {4}, {.device = kSim}).dtype() == ScalarType::int64);
    CHECK(randint(0, 10, {4}, {.dtype = ScalarType::float32, .device = kSim}).dtype() == ScalarType::float32);
    CHECK(randint(0, 10, {4}, dtype(ScalarType::int32)).dtype() == ScalarType::int32);
  }
  // The other factories keep float32 as their default.
  CHECK(zeros({2}, device(kSim)).dtype() == ScalarType::float32);
  CHECK(randn({2}, device(kSim)).dtype() == ScalarType::float32);
  CHECK(TensorOptions{}.resolved_dtype() == ScalarType::float32);
  CHECK(TensorOptions{}.resolved_dtype(ScalarType::int64) == ScalarType::int64);
}

TEST_CASE("requires_grad without the autograd layer is refused before anything is allocated") {
  fresh(kSim);
  MemoryProbe p(kSim);
  const std::string e = error_of([] { randn({2, 3}, {.device = kSim, .requires_grad = true}); });
  CHECK(contains(e, "autograd"));
  CHECK(contains(error_of([] { zeros({2}, device(kSim).with_requires_grad()); }), "bytegrad_autograd"));
  CHECK(p.allocated_delta_is(0));
  CHECK(p.peak_allocated_delta_is(0));
  // Asking for false is the default and always fine.
  CHECK(zeros({2}, device(kSim).with_requires_grad(false)).defined());
}
