// FreshDevice: an empty allocator for a simulated device (sim or meta) for the length of a scope, so that
// a test's memory figures do not depend on what ran before it in the process (cached segments, peaks, the
// cuBLAS workspace a previous matrix product parked). The previous allocator is put back, untouched, when
// the scope ends; tensors made before the scope keep working and free into their own allocator.
//
//   {
//     bytegrad::testing::FreshDevice fresh(bytegrad::kSim);          // or (kMeta, a SimulatedCapacity)
//     auto x = bytegrad::randn({256, 256}, bytegrad::kSim);          // memory_allocated() == 262144
//   }
//
// Like a fresh process, the first matrix product in the scope parks the cuBLAS workspace (32 MiB on the
// modelled H100) unless set_blas_workspace_config(":0:0") (bytegrad/tensor/blas_workspace.h) turned it off.
// Tensors still alive when the scope ends keep their fresh allocator alive (it is not reinstalled).
// Not for cuda: a real GPU's memory belongs to one allocator.
#pragma once

#include <optional>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/raw_memory.h"

namespace bytegrad::testing {

class FreshDevice {
 public:
  // Throws std::invalid_argument for cpu and cuda, or for a bad BYTEGRAD_ALLOC_CONF (nothing changed).
  explicit FreshDevice(Device device = kSim, std::optional<SimulatedCapacity> capacity = std::nullopt);
  ~FreshDevice();
  FreshDevice(const FreshDevice&) = delete;
  FreshDevice& operator=(const FreshDevice&) = delete;

  Device device() const { return device_; }

 private:
  Device device_;
  SimulatedDeviceState previous_;
  const CachingAllocator* fresh_ = nullptr;
};

}  // namespace bytegrad::testing
