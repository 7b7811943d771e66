// Segments from a real GPU: cudaMalloc / cudaFree / cudaMemGetInfo.
#include <stdexcept>
#include <string>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/raw_memory.h"

#ifdef BYTEGRAD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace bytegrad {

#ifdef BYTEGRAD_HAVE_CUDA
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status));
}

class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int index) : index_(index) {}

  void* allocate(size_t bytes) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky error so the caller can flush the cache and retry
      return nullptr;
    }
    check(status, "cudaMalloc");
    return ptr;
  }

  void release(void* ptr, size_t) override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    check(cudaFree(ptr), "cudaFree");
  }

  Info info() override {
    check(cudaSetDevice(index_), "cudaSetDevice");
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return {free, total};
  }

 private:
  int index_;
};

}  // namespace

std::unique_ptr<RawMemory> make_cuda_raw_memory(int index) { return std::make_unique<CudaRawMemory>(index); }

int cuda_compute_capability_major(int index) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major;
}

DeviceLaunchLimits cuda_launch_limits(int index) {
  DeviceLaunchLimits limits;
  if (cudaDeviceGetAttribute(&limits.multiprocessor_count, cudaDevAttrMultiProcessorCount, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&limits.max_threads_per_multiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor,
                             index) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return limits;
}

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no GPU: report none
      return 0;
    }
    return n;
  }();
  return count;
}

#else

std::unique_ptr<RawMemory> make_cuda_raw_memory(int index) {
  throw std::runtime_error("cuda:" + std::to_string(index) +
                           " is not available: bytegrad was built without CUDA (nvcc was not found)");
}

int cuda_device_count() { return 0; }
int cuda_compute_capability_major(int) { return 0; }
DeviceLaunchLimits cuda_launch_limits(int) { return {}; }

#endif

}  // namespace bytegrad
