// Streams and events, as torch.cuda's: for cuda (CUDA streams and events), sim and meta (a modelled GPU:
// stream_timeline.h says when their work completes).
//
// Every device has a default stream (id 0) and a pool of side streams: get_stream_from_pool hands them out
// round-robin, 32 per priority level, as PyTorch's torch.cuda.Stream() does, so the 33rd stream asked for
// is the first again. Each thread has a current stream per device (the default stream until set); tensors
// allocate from it and kernels run on it. The caching allocator keeps each stream's freed blocks for that
// stream alone, and a block another stream used (Tensor::record_stream) is reused only once that stream's
// work queued before the free has completed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/device_allocators.h"  // default_device
#include "bytegrad/memory/stream_timeline.h"

namespace bytegrad {

class Event;

class Stream {
 public:
  Stream() : device_(default_device()) {}  // the default stream of default_device()
  Stream(Device device, StreamId id, int priority = 0) : device_(device), id_(id), priority_(priority) {}

  Device device() const { return device_; }
  StreamId id() const { return id_; }  // as snapshots show it: the cudaStream_t on cuda; 0 for the default stream
  int priority() const { return priority_; }
  bool is_default() const { return id_ == 0; }
  void* native_handle() const;  // the cudaStream_t (nullptr for the default stream and on sim/meta)

  bool query() const;        // all work queued on it has completed
  void synchronize() const;  // waits until it has
  // Work queued on this stream from now on waits for `event` / for everything queued on `other` so far.
  void wait_event(const Event& event) const;
  void wait_stream(const Stream& other) const;
  Event record_event() const;  // a new event recorded on this stream

  std::string str() const;  // "Stream(device=sim, id=1, priority=0)"
  friend bool operator==(const Stream& a, const Stream& b) { return a.device_ == b.device_ && a.id_ == b.id_; }

 private:
  Device device_ = kSim;
  StreamId id_ = 0;
  int priority_ = 0;
};

// The number of priority levels and what each stream pool holds, as PyTorch 2.11 on the H100.
inline constexpr int kStreamPriorityLevels = 4;  // priorities 0 (lowest, the default) to -3
inline constexpr int kStreamsPerPool = 32;

Stream default_stream(Device device = default_device());
Stream current_stream(Device device = default_device());
// Makes `stream` its device's current stream on this thread (torch.cuda.set_stream).
void set_current_stream(const Stream& stream);
// The next stream of the pool for `priority` (0 lowest; negative higher; out-of-range values go to the
// nearest level), as torch.cuda.Stream(priority=...).
Stream get_stream_from_pool(Device device = default_device(), int priority = 0);
// Waits for all work on every stream of the device (torch.cuda.synchronize); nothing to wait for on cpu.
void synchronize(Device device = default_device());
// As in a fresh process: waits for all queued work and restarts the pool's round robin at its first stream
// (testing::FreshDevice).
void restart_streams(Device device);

// Makes a stream current on its device for the guard's lifetime (torch.cuda.stream(s) / CUDAStreamGuard).
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// torch.cuda.Event: made on its first record, on the device of the stream it is recorded on. Copies share
// the same event.
class Event {
 public:
  explicit Event(bool enable_timing = false) : enable_timing_(enable_timing) {}

  void record(const Stream& stream);
  void record();                          // on the current stream of default_device()
  bool query() const;                     // true before the first record
  void synchronize() const;               // returns at once before the first record
  void wait(const Stream& stream) const;  // stream.wait_event(*this)
  // Milliseconds from this event to `end` (both recorded with enable_timing, and completed); cuda only.
  double elapsed_time(const Event& end) const;
  bool is_recorded() const { return state_ != nullptr; }
  // The device it was first recorded on; none before that (torch.cuda.Event.device).
  std::optional<Device> device() const;
  std::string str() const;  // "Event(device=sim)", or "Event(uninitialized)" before the first record

 private:
  struct State;
  bool enable_timing_ = false;
  std::shared_ptr<State> state_;
};

// The device's timeline: what its streams and events are made of. Made on first use and kept for the
// process (a reset allocator keeps it).
StreamTimeline& stream_timeline(Device device);
std::shared_ptr<StreamTimeline> shared_stream_timeline(Device device);
// Work was queued on `device`'s current stream (kernel launches on sim and meta tell the model).
void note_launch(Device device);
// When work completes on a simulated device (sim or meta): stream_timeline.h's SimulatedTiming.
void set_simulated_timing(Device device, SimulatedTiming timing);
SimulatedTiming simulated_timing(Device device);

}  // namespace bytegrad
