#include "bytegrad/memory/streams.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace bytegrad {

namespace {

// A device's streams: its timeline and the pool, made whole on first use in PyTorch's order (for each
// index, every priority level), so that stream ids compare as PyTorch's do.
struct DeviceStreams {
  std::shared_ptr<StreamTimeline> timeline;
  std::array<std::array<StreamId, kStreamsPerPool>, kStreamPriorityLevels> pool{};
  std::array<uint32_t, kStreamPriorityLevels> next{};  // round-robin counters
  bool pool_made = false;
};

struct Registry {
  std::mutex mutex;
  std::map<Device, DeviceStreams> devices;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: tensors may outlive static destructors
  return *instance;
}

void require_stream_device(Device device) {
  if (device.type == DeviceType::cpu)
    throw std::invalid_argument("streams: cpu has no streams (use cuda, sim or meta)");
  if (device.type == DeviceType::cuda && device.index >= cuda_device_count())
    throw std::invalid_argument("streams: " + device.str() + " is not available: " +
                                std::to_string(cuda_device_count()) + " CUDA device(s) visible");
}

DeviceStreams& device_streams(Registry& r, Device device) {
  require_stream_device(device);
  DeviceStreams& d = r.devices[device];
  if (!d.timeline) {
    if (device.type == DeviceType::cuda) d.timeline = make_cuda_timeline(device.index);
    else d.timeline = std::make_shared<SimulatedTimeline>();
  }
  return d;
}

// The current stream of each device this thread has set one for.
thread_local std::vector<Stream> current_streams;

}  // namespace

// ------------------------------------------------------------------------------------------- timelines

std::shared_ptr<StreamTimeline> shared_stream_timeline(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return device_streams(r, device).timeline;
}

StreamTimeline& stream_timeline(Device device) { return *shared_stream_timeline(device); }

void note_launch(Device device) {
  if (device.type != DeviceType::sim && device.type != DeviceType::meta) return;  // a GPU keeps its own
  stream_timeline(device).launched(current_stream(device).id());
}

namespace {
SimulatedTimeline& simulated(Device device) {
  if (device.type != DeviceType::sim && device.type != DeviceType::meta)
    throw std::invalid_argument("simulated timing: " + device.str() + " is not a simulated device (sim or meta)");
  return static_cast<SimulatedTimeline&>(stream_timeline(device));
}
}  // namespace

void set_simulated_timing(Device device, SimulatedTiming timing) { simulated(device).set_timing(timing); }
SimulatedTiming simulated_timing(Device device) { return simulated(device).timing(); }

// ---------------------------------------------------------------------------------------------- streams

void* Stream::native_handle() const { return stream_timeline(device_).native_stream(id_); }
bool Stream::query() const { return stream_timeline(device_).query_stream(id_); }
void Stream::synchronize() const { stream_timeline(device_).synchronize_stream(id_); }

void Stream::wait_event(const Event& event) const { event.wait(*this); }

void Stream::wait_stream(const Stream& other) const {
  if (other.device() != device_)
    throw std::invalid_argument("Stream::wait_stream: " + other.str() + " is on another device than " + str());
  Event event;
  event.record(other);
  wait_event(event);
}

Event Stream::record_event() const {
  Event event;
  event.record(*this);
  return event;
}

std::string Stream::str() const {
  return "Stream(device=" + device_.str() + ", id=" + std::to_string(id_) + ", priority=" + std::to_string(priority_) +
         ")";
}

Stream default_stream(Device device) {
  require_stream_device(device);
  return Stream(device, 0, 0);
}

Stream current_stream(Device device) {
  for (const Stream& s : current_streams)
    if (s.device() == device) return s;
  return default_stream(device);
}

void set_current_stream(const Stream& stream) {
  require_stream_device(stream.device());
  for (Stream& s : current_streams) {
    if (s.device() == stream.device()) {
      s = stream;
      return;
    }
  }
  current_streams.push_back(stream);
}

Stream get_stream_from_pool(Device device, int priority) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  DeviceStreams& d = device_streams(r, device);
  if (!d.pool_made) {
    for (int i = 0; i < kStreamsPerPool; ++i)
      for (int level = 0; level < kStreamPriorityLevels; ++level) d.pool[level][i] = d.timeline->create_stream(-level);
    d.pool_made = true;
  }
  const int level = std::clamp(-priority, 0, kStreamPriorityLevels - 1);
  const uint32_t index = d.next[level]++ % kStreamsPerPool;
  return Stream(device, d.pool[level][index], -level);
}

void synchronize(Device device) {
  if (device.type != DeviceType::cpu) stream_timeline(device).synchronize_device();  // cpu work never waits
}

void restart_streams(Device device) {
  synchronize(device);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  device_streams(r, device).next = {};
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}

// The constructor made an entry for the device: restoring it only assigns, so nothing can throw here.
StreamGuard::~StreamGuard() {
  for (Stream& s : current_streams)
    if (s.device() == previous_.device()) s = previous_;
}

// ----------------------------------------------------------------------------------------------- events

// Owns one event of a timeline; never copied (the event is destroyed once).
struct Event::State {
  State(Device d, std::shared_ptr<StreamTimeline> t, bool enable_timing)
      : device(d), timeline(std::move(t)), handle(timeline->create_event(enable_timing)) {}
  ~State() {
    try {
      timeline->destroy_event(handle);
    } catch (...) {  // a destructor must not throw; the handle is the timeline's own, so this cannot fail
    }
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  Device device;
  std::shared_ptr<StreamTimeline> timeline;  // kept: the event outlives no timeline
  EventHandle handle;
};

void Event::record(const Stream& stream) {
  if (!state_) {
    state_ = std::make_shared<State>(stream.device(), shared_stream_timeline(stream.device()), enable_timing_);
  } else if (state_->device != stream.device()) {
    throw std::invalid_argument("Event::record: the event was made on " + state_->device.str() +
                                " and cannot be recorded on " + stream.str());
  }
  state_->timeline->record(state_->handle, stream.id());
}

void Event::record() { record(current_stream()); }

bool Event::query() const { return !state_ || state_->timeline->query(state_->handle); }

void Event::synchronize() const {
  if (state_) state_->timeline->synchronize(state_->handle);
}

void Event::wait(const Stream& stream) const {
  if (!state_) return;  // nothing recorded: nothing to wait for
  if (state_->device != stream.device())
    throw std::invalid_argument("Event::wait: the event is on " + state_->device.str() + ", the stream " +
                                stream.str());
  state_->timeline->wait(stream.id(), state_->handle);
}

std::optional<Device> Event::device() const {
  if (!state_) return std::nullopt;
  return state_->device;
}

std::string Event::str() const {
  return state_ ? "Event(device=" + state_->device.str() + ")" : "Event(uninitialized)";
}

double Event::elapsed_time(const Event& end) const {
  if (!enable_timing_ || !end.enable_timing_)
    throw std::invalid_argument("Event::elapsed_time: both events must be made with enable_timing=true");
  if (!state_ || !end.state_) throw std::invalid_argument("Event::elapsed_time: both events must be recorded first");
  if (state_->device != end.state_->device)
    throw std::invalid_argument("Event::elapsed_time: the events are on different devices");
  return state_->timeline->elapsed_ms(state_->handle, end.state_->handle);
}

}  // namespace bytegrad
