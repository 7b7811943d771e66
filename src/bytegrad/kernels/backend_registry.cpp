#include <stdexcept>

#include "bytegrad/kernels/backend.h"

namespace bytegrad {

KernelBackend& cpu_backend();
KernelBackend& meta_backend();
#ifdef BYTEGRAD_HAVE_CUDA
KernelBackend& cuda_backend();
#endif

KernelBackend& backend_for(Device device) {
  switch (device.type) {
    case DeviceType::cpu:
    case DeviceType::sim: return cpu_backend();
    case DeviceType::meta: return meta_backend();
    case DeviceType::cuda:
#ifdef BYTEGRAD_HAVE_CUDA
      return cuda_backend();
#else
      throw std::runtime_error(device.str() + ": bytegrad was built without CUDA");
#endif
  }
  throw std::logic_error("backend_for: unknown device type");
}

}  // namespace bytegrad
