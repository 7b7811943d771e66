// A program whose tensors outlive main: namespace-scope tensors (one made inside an AllocationScope with a
// long tag as the program's last allocation, and a module's parameters) are freed during static
// destruction, after the library's function-local statics first used in main are gone. The first of those
// frees records the pending peak's largest blocks, reading each block's allocation tag: before the fix the
// interned tag was already destroyed (ASan: heap-use-after-free in BlockCategories::ledger_block, from
// CachingAllocator::free, from ~Tensor at exit). No tensor here is made before main: one made then would
// build the intern table first, and so outlive it. Passing is exiting with status 0.
#include <cstdio>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/tensor/ops.h"

using namespace bytegrad;

namespace {

std::shared_ptr<nn::Linear> module_global;
Tensor plain_global;
Tensor tagged_global;

}  // namespace

int main() {
  module_global = std::make_shared<nn::Linear>(16, 8, true, TensorOptions{ScalarType::float32, kSim});
  plain_global = ones({256, 256}, TensorOptions{ScalarType::float32, kSim});
  {
    // Longer than a std::string keeps inline: its text lives in a heap block of the intern table.
    AllocationScope scope("a tag made in main, long enough to live on the heap");
    tagged_global = plain_global * 2.0;  // the last allocation: a new peak, pending until the next free
  }
  // The Linear's 8 * 16 * 4 = 512 B weight and 32 B bias (a 512-byte block each); then
  // 256 * 256 * 4 = 262144 B twice: all still allocated when main returns.
  const int64_t expected = 512 + 512 + 2 * 262144;
  const int64_t allocated = memory_allocated(kSim);
  std::printf("allocated at the end of main: %lld B (expected %lld B)\n", static_cast<long long>(allocated),
              static_cast<long long>(expected));
  return allocated == expected ? 0 : 1;
}
