// The CUDA driver's own allocations at kernel launches (memory/raw_memory.h's DriverAllocation): PyTorch's
// process makes them the first time it launches a kind of kernel, and they take addresses that later
// segments would otherwise get. Every backend call on sim, meta and cuda reports what PyTorch's kernel for
// it makes, so the placement model sees them where PyTorch's process does.
#pragma once

#include <cstdint>

#include "bytegrad/core/device.h"
#include "bytegrad/kernels/backend.h"
#include "bytegrad/memory/raw_memory.h"  // DriverAllocation

namespace bytegrad {

// A new backend, alive for the process, that reports each call to its device's caching allocator (the
// device of the call's first view) and then runs it on `inner`; callers keep it. Which of PyTorch's kernels make which allocations was measured on the H100
// (tools/probes/driver_first_launch_probe.py); the table is in driver_allocations.cpp.
KernelBackend& with_driver_allocations(KernelBackend& inner);

// For launches that do not go through a backend call (random numbers, drawn on the host here, by curand
// kernels in PyTorch): `what` is DriverAllocation flags. Nothing for cpu.
void note_driver_allocations(Device device, uint32_t what);

}  // namespace bytegrad
