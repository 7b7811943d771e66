// The devices the suites run on, and their allocators' figures.
#pragma once

#include <cstdint>
#include <string>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/blas_workspace.h"

namespace bytegrad::testing {

// A device whose allocator starts from zero: the BLAS workspaces this thread parked there are released
// first (they live until cleared, as in PyTorch). Every tensor of the previous test must be gone.
inline Device fresh(Device device) {
  clear_blas_workspaces();
  reset_device(device);
  return device;
}

inline int64_t allocated(Device device = kSim) { return caching_allocator(device).memory_allocated(); }
inline int64_t max_allocated(Device device = kSim) { return caching_allocator(device).max_memory_allocated(); }
inline int64_t stat(Device device, const std::string& key) { return caching_allocator(device).memory_stats().at(key); }

// The sim shorthands of the autograd and nn suites.
inline void fresh_sim() { fresh(kSim); }
inline int64_t peak(Device device = kSim) { return max_allocated(device); }

}  // namespace bytegrad::testing
