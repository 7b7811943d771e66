// seed003: what randn of growing sizes does to reserved memory, why code B (reassigning one name) keeps a
// steady footprint while code A (six live tensors) grows, and what empty_cache gives back. Transcribed from
// shared/golden/scenarios.py, which ran it under a 6 GiB memory fraction on the 80 GiB card.
#include <string>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/out_of_memory.h"
#include "programs/seed_programs.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::programs {

void run_seed003_code_a(ScenarioRecorder& r, const Shape& big) {
  const TensorOptions on = device(r.device());
  // Each tensor stays referenced, so each needs a segment of its own; a failure leaves the earlier ones.
  std::vector<Tensor> keep;
  try {
    for (int i = 1; i <= 6; ++i) {
      keep.push_back(randn(big, on));
      r.mark("A_alloc" + std::to_string(i));
    }
  } catch (const OutOfMemoryError& e) {
    r.mark("A_oom", e.what(), e.has_report() ? e.report().str() : "");
  }
  keep.clear();
  caching_allocator(r.device()).empty_cache();
  r.mark("A_cleared");
}

void run_seed003_randn(ScenarioRecorder& r, const Seed003Shapes& shapes) {
  const Shape& big = shapes.big;
  CachingAllocator& allocator = caching_allocator(r.device());
  const TensorOptions on = device(r.device());
  // set_per_process_memory_fraction(6 GiB / total): the cap counts segments, not tensors.
  allocator.set_memory_fraction(6.0 * (1 << 30) / static_cast<double>(allocator.mem_get_info().total));

  Tensor x = randn({2, 3}, on);
  r.mark("small_2x3");
  // `x = randn(...)` builds the new tensor before the assignment releases the old one, in C++ as in
  // Python: the peak holds both.
  x = randn(big, on);
  r.mark("big1");
  x = randn({200, 300}, on);  // 240,000 bytes from the small segment; the big block stays cached
  r.mark("big_then_200x300");
  x = Tensor();  // del x
  allocator.empty_cache();
  r.mark("reset");

  // Code B: each new tensor exists while the previous one is still held, so two segments suffice and
  // serve every later assignment from the cache.
  for (int i = 1; i <= 6; ++i) {
    x = randn(big, on);
    r.mark("B_assign" + std::to_string(i));
  }
  x = Tensor();  // x = 1: nothing refers to the tensor any more
  r.mark("B_x_eq_1");
  allocator.empty_cache();
  r.mark("B_empty_cache");

  run_seed003_code_a(r, big);  // six live tensors: 5.37 GiB, under the 6 GiB cap on this card

  // A bigger tensor after a big one: the cached 916 MiB block cannot hold it, so a second segment joins.
  x = randn(big, on);
  x = randn(shapes.bigger, on);
  r.mark("bigger_after_big");
}

void run_seed003_code_a(ScenarioRecorder& r) { run_seed003_code_a(r, Seed003Shapes{}.big); }
void run_seed003_randn(ScenarioRecorder& r) { run_seed003_randn(r, Seed003Shapes{}); }

}  // namespace bytegrad::programs
