// A kernel that only keeps a stream busy for a number of GPU clock cycles (PyTorch's torch.cuda._sleep):
// for tests that need work still queued on a stream when the host reaches its next step.
#pragma once

#include <cstdint>

namespace bytegrad::cuda {

// Queues the spin on `stream` (a cudaStream_t; nullptr: the default stream) of the current device.
void spin_for_cycles(void* stream, int64_t cycles);

}  // namespace bytegrad::cuda
