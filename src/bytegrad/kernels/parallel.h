// Intra-op threads for the cpu and sim kernels: how many (PyTorch's torch.set_num_threads and
// get_num_threads), and the one loop that spreads a kernel over them.
//
// Built for a machine that other processes share. The calling thread always works; helper threads take
// chunks from a shared counter only once they actually run, so a helper that gets no core simply takes no
// chunk and the caller does the work itself (no thread waits for a descheduled one to start). Waits are
// passive (condition variables, no spinning), and a loop is split only when each chunk has at least a
// grain of work, so small tensors never pay for waking a thread.
#pragma once

#include <cstdint>
#include <functional>

namespace bytegrad {

// The number of threads a cpu or sim kernel may use, the calling thread included. Until set_num_threads is
// called: OMP_NUM_THREADS when it holds a positive number (as PyTorch reads it), else the processors this
// process may run on (its affinity mask, so a container's or taskset's limit counts, not the host's total).
int get_num_threads();

// Sets that number for every later kernel; 1 runs every kernel on the calling thread. Throws
// std::invalid_argument for a number below 1.
void set_num_threads(int num_threads);

namespace parallel {

// Calls body(chunk_begin, chunk_end) over [begin, end) cut into chunks, on up to get_num_threads() threads.
// Each chunk has at least `grain` indices (the last one takes the remainder), and every chunk boundary but
// `end` is begin + a multiple of `align`; with fewer than two grains of work, or when called from inside another
// parallel_for (or while another thread's is running), body(begin, end) runs once on the calling thread. Chunks run
// concurrently, so body must only write what its own chunk owns. The first exception a chunk throws is rethrown here
// after every chunk has finished.
void parallel_for(int64_t begin, int64_t end, int64_t grain, int64_t align,
                  const std::function<void(int64_t, int64_t)>& body);

}  // namespace parallel
}  // namespace bytegrad
