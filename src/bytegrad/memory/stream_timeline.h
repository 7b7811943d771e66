// What work queued on a device's streams has finished: the question the caching allocator asks before it
// reuses a block other streams used (record_stream), and what Stream and Event (streams.h) answer users.
// A real GPU answers it with CUDA streams and events. sim and meta run every kernel at once on the host, so
// they answer from a model of a GPU working through each stream's queue in order (SimulatedTimeline):
// by default a kernel is still running until the program waits for it (a synchronize, an Event's or a
// Stream's synchronize, a copy to the host, empty_cache, an out-of-memory retry), which is what PyTorch shows
// on the H100 whenever the GPU has more queued than the host can outrun (tools/probes/stream_probe.py).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bytegrad/memory/history.h"  // StreamId

namespace bytegrad {

using EventHandle = uint64_t;  // a timeline's event; 0 is never one

class StreamTimeline {
 public:
  virtual ~StreamTimeline() = default;
  // A new stream (cudaStreamCreateWithPriority, non-blocking); `priority` 0 is the lowest, negative higher.
  virtual StreamId create_stream(int priority) = 0;
  // The cudaStream_t behind a stream (nullptr: the default stream, or a simulated device).
  virtual void* native_stream(StreamId /*stream*/) const { return nullptr; }
  // Work was queued on `stream` (a kernel, a copy): the simulated timeline counts it; a GPU needs no telling.
  virtual void launched(StreamId /*stream*/) {}

  virtual EventHandle create_event(bool enable_timing) = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // The event completes once all work queued on `stream` so far has.
  virtual void record(EventHandle event, StreamId stream) = 0;
  // Whether it has completed (true for an event never recorded).
  virtual bool query(EventHandle event) = 0;
  virtual void synchronize(EventHandle event) = 0;
  // Work queued on `waiter` from now on starts only after `event` completes (cudaStreamWaitEvent).
  virtual void wait(StreamId waiter, EventHandle event) = 0;
  // Milliseconds between two completed events made with enable_timing (cudaEventElapsedTime).
  virtual double elapsed_ms(EventHandle start, EventHandle end) = 0;

  virtual bool query_stream(StreamId stream) = 0;  // all work queued on it has completed
  virtual void synchronize_stream(StreamId stream) = 0;
  virtual void synchronize_device() = 0;
};

// When queued work completes on sim and meta.
enum class SimulatedTiming {
  // Default. The GPU is behind the host: queued work completes only when the program waits for it
  // (synchronize, a copy to the host, Event/Stream synchronize, empty_cache, an out-of-memory retry).
  work_pending_until_waited,
  // The GPU is infinitely fast: work completes as it is queued (what a host-bound program sees).
  work_done_at_launch,
};
std::string_view simulated_timing_name(SimulatedTiming timing);

// The model for sim and meta. Each stream is a queue of work items (kernels, copies, waits on events); an
// event is a position in one stream's queue; a stream completes up to a position only with everything the
// waits before it depend on.
class SimulatedTimeline final : public StreamTimeline {
 public:
  explicit SimulatedTimeline(SimulatedTiming timing = SimulatedTiming::work_pending_until_waited) : timing_(timing) {}
  void set_timing(SimulatedTiming timing);  // queued work completes now when switching to work_done_at_launch
  SimulatedTiming timing() const;

  StreamId create_stream(int priority) override;
  void launched(StreamId stream) override;
  EventHandle create_event(bool enable_timing) override;
  void destroy_event(EventHandle event) override;
  void record(EventHandle event, StreamId stream) override;
  bool query(EventHandle event) override;
  void synchronize(EventHandle event) override;
  void wait(StreamId waiter, EventHandle event) override;
  double elapsed_ms(EventHandle start, EventHandle end) override;
  bool query_stream(StreamId stream) override;
  void synchronize_stream(StreamId stream) override;
  void synchronize_device() override;

 private:
  struct Dependency {
    uint64_t waiter_position;  // the wait's own item in the waiter's queue
    StreamId stream;           // what it waits for: `stream` up to `position`
    uint64_t position;
  };
  struct Queue {
    StreamId id = 0;
    uint64_t queued = 0;     // items ever queued
    uint64_t completed = 0;  // items completed, in order
    std::vector<Dependency> dependencies;
  };
  struct Point {
    bool live = true;  // made and not destroyed
    bool recorded = false;
    StreamId stream = 0;
    uint64_t position = 0;
  };
  Queue& queue(StreamId stream);  // created on first use (the default stream, 0, always exists)
  void complete(StreamId stream, uint64_t position);
  uint64_t queue_item(StreamId stream);
  const Point& point(EventHandle event) const;

  mutable std::mutex mutex_;
  SimulatedTiming timing_;
  std::vector<Queue> queues_;
  std::vector<Point> events_;  // EventHandle h is events_[h - 1]
  std::vector<EventHandle> free_events_;
};

// A real GPU's streams and events (CUDA runtime); throws std::runtime_error when built without CUDA.
std::unique_ptr<StreamTimeline> make_cuda_timeline(int device_index);

}  // namespace bytegrad
