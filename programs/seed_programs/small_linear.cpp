// seed002: a 440-byte layer "takes" 2 MiB of the card.
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/linear.h"
#include "programs/seed_programs.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::programs {

void run_seed002_small_linear(ScenarioRecorder& r) {
  // m = nn.Linear(10, 10); m.cuda(): built on the host, then weight (10, 10) and bias (10) are moved, 400
  // and 40 bytes requested, each rounded up to a 512-byte block, carved from one new 2 MiB small-pool
  // segment (the rest of it stays cached: inactive_split).
  auto m = std::make_unique<nn::Linear>(10, 10, true, device("cpu"));
  m->to(r.device());
  r.mark("linear10x10_cuda");

  Tensor t = tensor({1.0}, device("cpu")).to(r.device());  // torch.tensor([1.0]).cuda(): one 512-byte block
  r.mark("tensor_1");

  m.reset();  // del m, t: the blocks return to the cache, the segment stays
  t = Tensor();
  r.mark("deleted");

  caching_allocator(r.device()).empty_cache();  // torch.cuda.empty_cache(): the free segment goes back
  r.mark("empty_cache");
}

}  // namespace bytegrad::programs
