// seed003's own card ran out of memory at code A's sixth tensor with (PyTorch 1.x wording):
//   "Tried to allocate 916.00 MiB (GPU 0; 6.00 GiB total capacity; 4.47 GiB already allocated;
//    186.44 MiB free; 4.47 GiB reserved in total by PyTorch)"
// A simulated card with the same total and the same memory held outside PyTorch fails at the same tensor.
#include "bytegrad/memory/device_allocators.h"
#include "programs/seed_programs.h"

namespace bytegrad::programs {

SimulatedCapacity seed003_card() {
  // 6.00 GiB total: 6 * 2^30 = 6442450944.
  // Each tensor: 960,000,000 bytes, rounded to 2 MiB multiples = 458 * 2097152 = 960495616 = 916.00 MiB.
  // 4.47 GiB allocated = five of them = 4802478080 (4.4727 GiB), all reserved.
  // 186.44 MiB free beside those five: free lies in [186.435, 186.445) MiB = [195488317, 195498803] bytes,
  // so the context and other processes held 6442450944 - 4802478080 - free bytes. 1444474880 (352655
  // pages of 4 KiB, 1377.56 MiB: the seed's 448 MiB context plus what else ran on that card) leaves
  // free = 195497984 = 186.44 MiB, less than the 916 MiB the sixth tensor needs.
  return SimulatedCapacity{.total_bytes = 6442450944, .context_bytes = 1444474880};
}

void run_seed003_code_a_small_card(ScenarioRecorder& r) {
  configure_simulated_device(r.device(), seed003_card());
  run_seed003_code_a(r);
}

}  // namespace bytegrad::programs
