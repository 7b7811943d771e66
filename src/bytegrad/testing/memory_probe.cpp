#include "bytegrad/testing/memory_probe.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/reports/memory_story.h"

namespace bytegrad::testing {

MemoryProbe::MemoryProbe(Device device) : device_(device) {
  if (!device.uses_caching_allocator())
    throw std::invalid_argument("MemoryProbe(" + device.str() + "): " + device.str() +
                                " memory is not cached; probe a cuda, sim or meta device");
  CachingAllocator& a = caching_allocator(device);
  // An observer of the history: other probes, stories and record_history calls leave its reading alone.
  history_start_ = a.attach_history_observer();
  allocator_id_ = a.id();
  a.reset_peak_stats();
  start_allocated_ = a.memory_allocated();
  start_reserved_ = a.memory_reserved();
  start_blocks_ = stat("allocation.all.current");
  start_requested_ = stat("requested_bytes.all.current");
}

MemoryProbe::~MemoryProbe() {
  CachingAllocator& a = caching_allocator(device_);
  if (a.id() == allocator_id_) a.detach_history_observer();
}

CachingAllocator& MemoryProbe::allocator() const {
  CachingAllocator& a = caching_allocator(device_);
  if (a.id() != allocator_id_)
    throw std::logic_error("MemoryProbe on " + device_.str() +
                           ": the device was given another allocator since the probe began (FreshDevice, "
                           "reset_device or configure_simulated_device); make the probe after it");
  return a;
}

int64_t MemoryProbe::stat(const char* key) const { return caching_allocator(device_).memory_stats().at(key); }

int64_t MemoryProbe::allocated_delta() const { return allocator().memory_allocated() - start_allocated_; }
int64_t MemoryProbe::reserved_delta() const { return allocator().memory_reserved() - start_reserved_; }
int64_t MemoryProbe::peak_allocated_delta() const { return allocator().max_memory_allocated() - start_allocated_; }
int64_t MemoryProbe::blocks_delta() const {
  allocator();
  return stat("allocation.all.current") - start_blocks_;
}
int64_t MemoryProbe::requested_delta() const {
  allocator();
  return stat("requested_bytes.all.current") - start_requested_;
}

std::vector<MemoryEvent> MemoryProbe::events() const {
  CachingAllocator& a = allocator();
  const MemorySnapshot snap = a.snapshot();
  const std::vector<TraceEntry>& trace = snap.trace;
  std::map<uintptr_t, std::pair<int64_t, std::string>> made;  // address -> (block bytes, op) of blocks made since
  std::vector<MemoryEvent> events;
  const size_t first = history_start_ > snap.trace_start ? static_cast<size_t>(history_start_ - snap.trace_start) : 0;
  for (size_t i = std::min(first, trace.size()); i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action == TraceAction::alloc) {
      const auto block = static_cast<int64_t>(traced_block_bytes(a, e));
      std::string op = e.tag.empty() ? "untagged" : e.tag;
      made[e.address] = {block, op};
      events.push_back({MemoryEvent::Kind::alloc, static_cast<int64_t>(e.size), block, std::move(op), e.address});
    } else if (e.action == TraceAction::free_requested) {
      auto it = made.find(e.address);
      MemoryEvent event{MemoryEvent::Kind::free, static_cast<int64_t>(e.size), 0, "earlier", e.address};
      if (it != made.end()) {
        event.block_bytes = it->second.first;
        event.op = it->second.second;
        made.erase(it);
      } else {
        event.block_bytes = static_cast<int64_t>(traced_block_bytes(a, e));
      }
      events.push_back(std::move(event));
    }
  }
  return events;
}

std::string MemoryProbe::live_blocks_by_op() const {
  std::map<std::string, int64_t> bytes_by_op;
  std::map<uintptr_t, const MemoryEvent*> live;
  const std::vector<MemoryEvent> all = events();
  for (const MemoryEvent& e : all) {
    if (e.kind == MemoryEvent::Kind::alloc) live[e.address] = &e;
    else if (e.op == "earlier") bytes_by_op["earlier"] -= e.block_bytes;
    else live.erase(e.address);
  }
  for (const auto& [address, e] : live) bytes_by_op[e->op] += e->block_bytes;
  std::vector<std::pair<std::string, int64_t>> sorted(bytes_by_op.begin(), bytes_by_op.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    return (x.second < 0 ? -x.second : x.second) > (y.second < 0 ? -y.second : y.second);
  });
  std::string text;
  for (const auto& [op, bytes] : sorted)
    text += fmt::format("{}{}{} {}", text.empty() ? "" : ", ", bytes >= 0 ? "+" : "", bytes,
                        op == "earlier" ? "freed from before the probe" : op);
  return text.empty() ? "none" : text;
}

DeltaCheck MemoryProbe::check(const char* what, int64_t expected, int64_t actual) const {
  DeltaCheck result;
  result.passed = expected == actual;
  result.message =
      fmt::format("{} on {}: expected {}, got {}", what, device_.str(), human_bytes(expected), human_bytes(actual));
  if (!result.passed) {
    const int64_t difference = actual - expected;
    result.message += fmt::format(", {} {}; blocks made since the probe and still live, by op: {}",
                                  human_bytes(difference < 0 ? -difference : difference),
                                  difference > 0 ? "more" : "less", live_blocks_by_op());
  }
  return result;
}

DeltaCheck MemoryProbe::allocated_delta_is(int64_t expected) const {
  return check("allocated delta", expected, allocated_delta());
}
DeltaCheck MemoryProbe::reserved_delta_is(int64_t expected) const {
  return check("reserved delta", expected, reserved_delta());
}
DeltaCheck MemoryProbe::peak_allocated_delta_is(int64_t expected) const {
  return check("peak allocated delta", expected, peak_allocated_delta());
}

}  // namespace bytegrad::testing
