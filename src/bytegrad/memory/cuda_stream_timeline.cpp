// A real GPU's timeline (stream_timeline.h): CUDA streams and events. Stream ids are the cudaStream_t values
// (0: the legacy default stream), as PyTorch's snapshots show them.
#include <stdexcept>
#include <string>

#include "bytegrad/memory/stream_timeline.h"

#ifdef BYTEGRAD_HAVE_CUDA
#include "bytegrad/memory/cuda_runtime_check.h"
#endif

namespace bytegrad {

#ifdef BYTEGRAD_HAVE_CUDA
namespace {

// Stream ids and event handles are the CUDA objects' addresses.
cudaStream_t as_stream(StreamId id) { return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(id)); }
cudaEvent_t as_event(EventHandle event) { return reinterpret_cast<cudaEvent_t>(static_cast<uintptr_t>(event)); }

// Every call sets the device first, as PyTorch's CUDAGuard does: the thread may be on another GPU.
class CudaTimeline final : public StreamTimeline {
 public:
  explicit CudaTimeline(int index) : index_(index) {}

  StreamId create_stream(int priority) override {
    use_device();
    cudaStream_t stream = nullptr;
    cuda_runtime::check(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority),
                        "cudaStreamCreateWithPriority");
    return reinterpret_cast<uintptr_t>(stream);
  }
  void* native_stream(StreamId stream) const override { return as_stream(stream); }

  EventHandle create_event(bool enable_timing) override {
    use_device();
    cudaEvent_t event = nullptr;
    cuda_runtime::check(cudaEventCreateWithFlags(&event, enable_timing ? cudaEventDefault : cudaEventDisableTiming),
                        "cudaEventCreateWithFlags");
    return reinterpret_cast<uintptr_t>(event);
  }
  void destroy_event(EventHandle event) override { (void)cudaEventDestroy(as_event(event)); }
  void record(EventHandle event, StreamId stream) override {
    use_device();
    cuda_runtime::check(cudaEventRecord(as_event(event), as_stream(stream)), "cudaEventRecord");
  }
  bool query(EventHandle event) override {
    return cuda_runtime::is_done(cudaEventQuery(as_event(event)), "cudaEventQuery");
  }
  void synchronize(EventHandle event) override {
    cuda_runtime::check(cudaEventSynchronize(as_event(event)), "cudaEventSynchronize");
  }
  void wait(StreamId waiter, EventHandle event) override {
    use_device();
    cuda_runtime::check(cudaStreamWaitEvent(as_stream(waiter), as_event(event), 0), "cudaStreamWaitEvent");
  }
  double elapsed_ms(EventHandle start, EventHandle end) override {
    float ms = 0;
    cuda_runtime::check(cudaEventElapsedTime(&ms, as_event(start), as_event(end)), "cudaEventElapsedTime");
    return ms;
  }
  // The default stream's handle (nullptr) names the current device's: this device is made current first.
  bool query_stream(StreamId stream) override {
    use_device();
    return cuda_runtime::is_done(cudaStreamQuery(as_stream(stream)), "cudaStreamQuery");
  }
  void synchronize_stream(StreamId stream) override {
    use_device();
    cuda_runtime::check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
  }
  void synchronize_device() override {
    use_device();
    cuda_runtime::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  void use_device() const { cuda_runtime::check(cudaSetDevice(index_), "cudaSetDevice"); }
  int index_;
};

}  // namespace

std::unique_ptr<StreamTimeline> make_cuda_timeline(int device_index) {
  return std::make_unique<CudaTimeline>(device_index);
}

#else

std::unique_ptr<StreamTimeline> make_cuda_timeline(int device_index) {
  throw std::runtime_error("cuda:" + std::to_string(device_index) +
                           " is not available: bytegrad was built without CUDA (nvcc was not found)");
}

#endif

}  // namespace bytegrad
