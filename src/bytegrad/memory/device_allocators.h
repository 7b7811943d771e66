// The process's allocators, one per device: a caching allocator for every sim, meta and cuda device, and
// a plain counting allocator for cpu. Also the process's default device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/core/device.h"
#include "bytegrad/memory/raw_memory.h"

namespace bytegrad {

// The caching allocator of a sim, meta or cuda device, created on first use with BYTEGRAD_ALLOC_CONF.
// Throws std::invalid_argument for cpu, std::runtime_error for a cuda device that is not present.
CachingAllocator& caching_allocator(Device device);

// Gives a simulated device (sim or meta) a capacity: total memory and a driver/context reservation.
// Replaces the device's allocator (fresh statistics); throws std::logic_error if it still holds blocks.
void configure_simulated_device(Device device, SimulatedCapacity capacity);
// A fresh allocator for the device (statistics from zero), keeping its capacity; throws std::logic_error
// while blocks are allocated.
void reset_device(Device device);

// What a simulated device is: its allocator (null: made on first use) and its capacity.
struct SimulatedDeviceState {
  std::unique_ptr<CachingAllocator> allocator;
  SimulatedCapacity capacity;
};
// Installs `state` as the simulated device's and returns what it had, allocator and capacity, untouched:
// blocks still allocated in the returned allocator stay valid (their tensors free into it), so it can be
// installed again later. For scopes that need an empty device (testing::FreshDevice). `state.allocator`
// null makes a fresh one on first use with BYTEGRAD_ALLOC_CONF; throws std::invalid_argument for a device
// that is not sim or meta.
SimulatedDeviceState exchange_simulated_device(Device device, SimulatedDeviceState state);
// The capacity a simulated device has now (the modelled H100's unless configured).
SimulatedCapacity simulated_capacity(Device device);
// A fresh allocator for a simulated device with `capacity` and BYTEGRAD_ALLOC_CONF (not installed).
std::unique_ptr<CachingAllocator> make_simulated_allocator(Device device, SimulatedCapacity capacity);
// Keeps an allocator that still has blocks allocated alive until the process ends (tensors free into it);
// one with none is destroyed now.
void retire_allocator(std::unique_ptr<CachingAllocator> allocator);

// Host memory for cpu tensors: malloc'ed directly, never cached, but counted.
class HostAllocator {
 public:
  void* malloc(size_t bytes);
  void free(void* ptr, size_t bytes);
  int64_t memory_allocated() const;
  int64_t max_memory_allocated() const;

 private:
  mutable std::mutex mutex_;
  int64_t allocated_ = 0;
  int64_t peak_ = 0;
};
HostAllocator& host_allocator();

int cuda_device_count();                       // 0 when built without CUDA or when no GPU is visible
int cuda_compute_capability_major(int index);  // 0 when unknown

// cudaDeviceProp's multiProcessorCount and maxThreadsPerMultiProcessor: the real card's on cuda, the
// configured SimulatedCapacity's on sim and meta (an H100's by default); throws std::invalid_argument for cpu.
struct DeviceLaunchLimits {
  int multiprocessor_count = 0;
  int max_threads_per_multiprocessor = 0;
};
DeviceLaunchLimits device_launch_limits(Device device);
DeviceLaunchLimits cuda_launch_limits(int index);  // zeros when unknown
bool cuda_is_available();

// `cuda` when a GPU is present, else `sim`, unless set_default_device chose otherwise.
Device default_device();
void set_default_device(Device device);

// The CUDA driver's own allocations at a kernel launch or a new cuBLAS handle (raw_memory.h's DriverAllocation
// flags), noted to `device`'s allocator; nothing for cpu. Ops note them (tensor/device_backend.h).
void note_driver_allocations(Device device, uint32_t what);

}  // namespace bytegrad
