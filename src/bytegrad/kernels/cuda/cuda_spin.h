// A kernel that only keeps a stream busy for a number of GPU clock cycles (PyTorch's torch.cuda._sleep):
// for tests that need work still queued on a stream when the host reaches its next step.
#pragma once

#include <cstdint>

namespace bytegrad::cuda {

// Queues the spin on `stream` (a cudaStream_t of device `device`; nullptr: that device's default stream).
void spin_for_cycles(int device, void* stream, int64_t cycles);

}  // namespace bytegrad::cuda
