// A unit test of exact memory behaviour, as you would write one for your own model: an empty allocator for
// the test (FreshDevice: no order dependence), deltas from a probe (MemoryProbe), figures from arithmetic.
//   build/examples/memory_test
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <bytegrad/bytegrad.h>
#include <bytegrad/testing.h>

using namespace bytegrad;
using bytegrad::testing::FreshDevice;
using bytegrad::testing::MemoryProbe;

TEST_CASE("a Linear layer's forward keeps its output; backward leaves one gradient per parameter") {
  FreshDevice fresh(kSim);                         // every test starts from an empty simulated H100
  set_blas_workspace_config(":0:0");               // and without the 32 MiB cuBLAS workspace
  nn::Linear layer(256, 128, true, device(kSim));  // weight 128*256*4 = 131072 B, bias 128*4 = 512 B
  Tensor x = randn({64, 256}, device(kSim));       // 64*256*4 = 65536 B

  MemoryProbe probe(kSim);
  Tensor y = layer.forward(x);  // 64*128*4 = 32768 B
  CHECK(probe.allocated_delta_is(32768));
  Tensor loss = y.sum();  // one float in a 512-byte block
  CHECK(probe.allocated_delta_is(32768 + 512));
  loss.backward();
  // weight.grad 131072 + bias.grad 512; y and the loss stay alive (we hold them)
  CHECK(probe.allocated_delta_is(32768 + 512 + 131072 + 512));
  set_blas_workspace_config(std::nullopt);
}
