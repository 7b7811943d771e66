// The backend ops call: the device's kernels (kernels/backend.h), with the CUDA driver's own allocations at
// kernel launches (memory/raw_memory.h's DriverAllocation) noted to the device's allocator. PyTorch's
// process makes them the first time it launches a kind of kernel, and they take addresses that later
// segments would otherwise get. Every backend call on sim, meta and cuda notes what PyTorch's kernel for it
// makes, so the placement model sees them where PyTorch's process does; the kernels themselves only compute.
// Which of PyTorch's kernels make which allocations was measured on the H100
// (tools/probes/driver_first_launch_probe.py); the table is in driver_allocations.cpp.
#pragma once

#include "bytegrad/core/device.h"
#include "bytegrad/kernels/backend.h"
#include "bytegrad/memory/device_allocators.h"  // note_driver_allocations, for launches outside a backend call

namespace bytegrad {

// cpu: the CPU kernels as they are; sim, meta and cuda: their kernels, each call noted first to the
// allocator of the device of its first view.
KernelBackend& backend_for(Device device);

// A foreach batch on `device`'s backend for the scope's lifetime (KernelBackend::begin_foreach).
class ForeachBatch {
 public:
  explicit ForeachBatch(Device device) : backend_(backend_for(device)) { backend_.begin_foreach(); }
  ~ForeachBatch() noexcept(false) { backend_.end_foreach(); }  // launches what was held back
  ForeachBatch(const ForeachBatch&) = delete;
  ForeachBatch& operator=(const ForeachBatch&) = delete;

 private:
  KernelBackend& backend_;
};

}  // namespace bytegrad
