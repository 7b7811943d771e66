// A consumer's program: one header each for the library and the test helpers, one figure checked by
// arithmetic. Exits 1 when a figure is wrong.
#include <cstdio>

#include <bytegrad/bytegrad.h>
#include <bytegrad/testing.h>

int main() {
  using namespace bytegrad;
  testing::FreshDevice fresh(kMeta);
  testing::MemoryProbe probe(kMeta);
  Tensor x = zeros({1024, 1024}, device(kMeta));  // 1024 * 1024 * 4 = 4194304 B
  const auto check = probe.allocated_delta_is(4194304);
  std::printf("%s\n", check.message.c_str());
  return check ? 0 : 1;
}
