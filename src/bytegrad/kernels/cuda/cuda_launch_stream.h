// The stream a backend call's kernels, copies and cuBLAS calls run on: the current stream (memory/streams.h)
// of the call's device, set by the cuda backend's device guard for the length of the call. nullptr is the
// legacy default stream, PyTorch's default stream too.
#pragma once

#include <cuda_runtime_api.h>

namespace bytegrad::cuda {

cudaStream_t launch_stream();

// Sets launch_stream() for its lifetime, restoring the previous one after.
class LaunchStreamScope {
 public:
  explicit LaunchStreamScope(cudaStream_t stream);
  ~LaunchStreamScope();
  LaunchStreamScope(const LaunchStreamScope&) = delete;
  LaunchStreamScope& operator=(const LaunchStreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace bytegrad::cuda
