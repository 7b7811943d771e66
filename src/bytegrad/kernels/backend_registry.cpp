#include <stdexcept>

#include "bytegrad/kernels/backend.h"
#include "bytegrad/kernels/driver_allocations.h"

namespace bytegrad {

KernelBackend& cpu_backend();
KernelBackend& meta_backend();
#ifdef BYTEGRAD_HAVE_CUDA
KernelBackend& cuda_backend();
#endif

KernelBackend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::cpu: return cpu_backend();
    // The simulated cards and the GPU report the CUDA driver's allocations at kernel launches to their
    // placement model (driver_allocations.h).
    case DeviceType::sim: {
      static KernelBackend& sim = with_driver_allocations(cpu_backend());
      return sim;
    }
    case DeviceType::meta: {
      static KernelBackend& meta = with_driver_allocations(meta_backend());
      return meta;
    }
    case DeviceType::cuda: {
#ifdef BYTEGRAD_HAVE_CUDA
      static KernelBackend& cuda = with_driver_allocations(cuda_backend());
      return cuda;
#else
      throw std::runtime_error(device.str() + ": bytegrad was built without CUDA");
#endif
    }
  }
  throw std::logic_error("backend_for: unknown device type");
}

}  // namespace bytegrad
