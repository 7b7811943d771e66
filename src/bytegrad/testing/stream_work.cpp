#include "bytegrad/testing/stream_work.h"

#include <stdexcept>

#ifdef BYTEGRAD_HAVE_CUDA
#include "bytegrad/kernels/cuda/cuda_spin.h"
#endif

namespace bytegrad::testing {

void queue_busy_work(const Stream& stream) {
  switch (stream.device().type) {
    case DeviceType::cuda:
#ifdef BYTEGRAD_HAVE_CUDA
      // About a second on an H100 (1.98 GHz): far longer than the host needs to reach its next step.
      cuda::spin_for_cycles(stream.device().index, stream.native_handle(), 2'000'000'000);
      return;
#else
      break;
#endif
    case DeviceType::sim:
    case DeviceType::meta: stream_timeline(stream.device()).launched(stream.id()); return;
    case DeviceType::cpu: break;
  }
  throw std::invalid_argument("queue_busy_work: " + stream.device().str() + " has no streams to keep busy");
}

}  // namespace bytegrad::testing
