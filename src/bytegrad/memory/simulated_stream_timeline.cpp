// SimulatedTimeline (stream_timeline.h): sim's and meta's streams as queues of work items, and events as
// positions in them.
#include <stdexcept>

#include "bytegrad/memory/stream_timeline.h"

namespace bytegrad {

std::string_view simulated_timing_name(SimulatedTiming timing) {
  switch (timing) {
    case SimulatedTiming::work_pending_until_waited: return "work_pending_until_waited";
    case SimulatedTiming::work_done_at_launch: return "work_done_at_launch";
  }
  return "unknown";
}

void SimulatedTimeline::set_timing(SimulatedTiming timing) {
  std::lock_guard lock(mutex_);
  timing_ = timing;
  if (timing_ == SimulatedTiming::work_done_at_launch)
    for (Queue& q : queues_) complete(q.id, q.queued);
}

SimulatedTiming SimulatedTimeline::timing() const {
  std::lock_guard lock(mutex_);
  return timing_;
}

SimulatedTimeline::Queue& SimulatedTimeline::queue(StreamId stream) {
  if (queues_.empty()) queues_.push_back(Queue{});  // the default stream
  if (stream >= queues_.size()) throw std::invalid_argument("stream " + std::to_string(stream) + " does not exist");
  return queues_[stream];
}

StreamId SimulatedTimeline::create_stream(int /*priority*/) {
  std::lock_guard lock(mutex_);
  queue(0);
  Queue q;
  q.id = queues_.size();
  queues_.push_back(q);
  return q.id;
}

uint64_t SimulatedTimeline::queue_item(StreamId stream) {
  Queue& q = queue(stream);
  const uint64_t position = ++q.queued;
  if (timing_ == SimulatedTiming::work_done_at_launch) complete(stream, position);
  return position;
}

void SimulatedTimeline::launched(StreamId stream) {
  std::lock_guard lock(mutex_);
  queue_item(stream);
}

// Completes the stream's items up to `position`, and first whatever the waits among them wait for.
void SimulatedTimeline::complete(StreamId stream, uint64_t position) {
  Queue& q = queue(stream);
  if (q.completed >= position) return;
  const uint64_t from = q.completed;
  q.completed = position;  // set first: a cycle of waits ends here
  for (size_t i = 0; i < queues_[stream].dependencies.size(); ++i) {
    const Dependency d = queues_[stream].dependencies[i];
    if (d.waiter_position > from && d.waiter_position <= position) complete(d.stream, d.position);
  }
  std::erase_if(queues_[stream].dependencies, [&](const Dependency& d) { return d.waiter_position <= position; });
}

EventHandle SimulatedTimeline::create_event(bool /*enable_timing*/) {
  std::lock_guard lock(mutex_);
  if (!free_events_.empty()) {
    EventHandle event = free_events_.back();
    free_events_.pop_back();
    events_[event - 1] = Point{};
    return event;
  }
  events_.push_back(Point{});
  return events_.size();
}

void SimulatedTimeline::destroy_event(EventHandle event) {
  std::lock_guard lock(mutex_);
  point(event);
  events_[event - 1].live = false;
  free_events_.push_back(event);
}

const SimulatedTimeline::Point& SimulatedTimeline::point(EventHandle event) const {
  if (event == 0 || event > events_.size() || !events_[event - 1].live)
    throw std::invalid_argument("event " + std::to_string(event) + " is not a live event of this device");
  return events_[event - 1];
}

void SimulatedTimeline::record(EventHandle event, StreamId stream) {
  std::lock_guard lock(mutex_);
  point(event);
  events_[event - 1] = Point{true, true, stream, queue(stream).queued};
}

bool SimulatedTimeline::query(EventHandle event) {
  std::lock_guard lock(mutex_);
  const Point& p = point(event);
  return !p.recorded || queue(p.stream).completed >= p.position;
}

void SimulatedTimeline::synchronize(EventHandle event) {
  std::lock_guard lock(mutex_);
  const Point p = point(event);
  if (p.recorded) complete(p.stream, p.position);
}

void SimulatedTimeline::wait(StreamId waiter, EventHandle event) {
  std::lock_guard lock(mutex_);
  const Point p = point(event);
  if (!p.recorded || queue(p.stream).completed >= p.position) return;  // nothing to wait for
  const uint64_t position = ++queue(waiter).queued;
  queues_[waiter].dependencies.push_back({position, p.stream, p.position});
  if (timing_ == SimulatedTiming::work_done_at_launch) complete(waiter, position);
}

double SimulatedTimeline::elapsed_ms(EventHandle /*start*/, EventHandle /*end*/) {
  throw std::logic_error("Event::elapsed_time: sim and meta run no GPU, so there is no GPU time to measure");
}

bool SimulatedTimeline::query_stream(StreamId stream) {
  std::lock_guard lock(mutex_);
  const Queue& q = queue(stream);
  return q.completed >= q.queued;
}

void SimulatedTimeline::synchronize_stream(StreamId stream) {
  std::lock_guard lock(mutex_);
  complete(stream, queue(stream).queued);
}

void SimulatedTimeline::synchronize_device() {
  std::lock_guard lock(mutex_);
  queue(0);
  for (size_t i = 0; i < queues_.size(); ++i) complete(i, queues_[i].queued);
}

}  // namespace bytegrad
