// Waiting for a device's queued work, so a host clock measures the work itself.
#pragma once

#include "bytegrad/core/device.h"

#ifdef BYTEGRAD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace bytegrad::bench {

inline void synchronize(Device d) {
#ifdef BYTEGRAD_HAVE_CUDA
  if (d.type == DeviceType::cuda) cudaDeviceSynchronize();
#else
  (void)d;
#endif
}

}  // namespace bytegrad::bench
