// What the stream and MemPool probes (tools/probes/stream_probe.py, mempool_probe.py) record, read back and
// put in one form both sides compare in: a mark's memory_stats figures, the allocator's trace, streams
// numbered by first appearance in the trace, addresses as (n-th segment allocated, offset in it).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/caching_allocator.h"
#include "bytegrad/memory/history.h"
#include "bytegrad/memory/memory_functions.h"

namespace bytegrad::probe_data {

// The memory_stats keys of a mark, with the probe's JSON names.
inline const std::vector<std::pair<const char*, const char*>>& mark_figures() {
  static const std::vector<std::pair<const char*, const char*>> keys = {
      {"allocated_bytes.all.current", "allocated"},
      {"reserved_bytes.all.current", "reserved"},
      {"active_bytes.all.current", "active"},
      {"inactive_split_bytes.all.current", "inactive_split"},
      {"num_sync_all_streams", "num_sync_all_streams"},
      {"num_alloc_retries", "num_alloc_retries"},
      {"num_ooms", "num_ooms"},
      {"num_device_alloc", "num_device_alloc"},
      {"num_device_free", "num_device_free"}};
  return keys;
}

// This device's figures now, by memory_stats key.
inline std::map<std::string, int64_t> figures_now(Device device) {
  auto stats = memory_stats(device);
  std::map<std::string, int64_t> out;
  for (const auto& [key, json_name] : mark_figures()) out[key] = stats[key];
  return out;
}

// A probe mark's figures, by memory_stats key.
inline std::map<std::string, int64_t> figures_of(const json::Value& mark) {
  std::map<std::string, int64_t> out;
  for (const auto& [key, json_name] : mark_figures()) out[key] = mark[json_name].integer();
  return out;
}

// A probe's trace: [action, offset from its lowest segment, size, stream ordinal] entries. Any base keeps the
// offsets apart.
inline std::vector<TraceEntry> trace_of(const json::Value& trace) {
  constexpr uint64_t kBase = uint64_t{1} << 40;
  std::vector<TraceEntry> out;
  for (const json::Value& e : trace.items) {
    TraceEntry entry{};
    bool known = false;
    for (TraceAction a :
         {TraceAction::alloc, TraceAction::free_requested, TraceAction::free_completed, TraceAction::segment_alloc,
          TraceAction::segment_free, TraceAction::segment_map, TraceAction::segment_unmap, TraceAction::oom}) {
      if (trace_action_name(a) == e[0].string()) {
        entry.action = a;
        known = true;
      }
    }
    REQUIRE_MESSAGE(known, "unknown action " << e[0].string());
    entry.address = kBase + e[1].unsigned_integer();
    entry.size = e[2].unsigned_integer();
    entry.stream = e[3].unsigned_integer();
    out.push_back(entry);
  }
  return out;
}

// A probe's recordings of one program: the lines of tests/data/pytorch_probes/<file> (JSON lines) whose
// "program" is `program`, in file order.
inline std::vector<json::Value> program_recordings(const std::string& file, const std::string& program) {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/" + file);
  REQUIRE_MESSAGE(in.good(), "cannot read " << file);
  std::vector<json::Value> out;
  std::string line;
  while (std::getline(in, line)) {
    json::Value v = json::parse(line);
    if (v["program"].string() == program) out.push_back(std::move(v));
  }
  return out;
}

// The allocator's trace as the probes keep it: PyTorch's actions (no snapshot or category entries).
inline std::vector<TraceEntry> trace_now(Device device) {
  std::vector<TraceEntry> out;
  for (const TraceEntry& e : caching_allocator(device).snapshot().trace)
    if (e.action != TraceAction::snapshot && e.action != TraceAction::category) out.push_back(e);
  return out;
}

// Streams numbered by first appearance in the trace, 0 the default stream: a stream's id (a cudaStream_t
// on cuda) says nothing about when it was made, so the probes' numbering by sorted ids is renumbered too.
class StreamNumbers {
 public:
  explicit StreamNumbers(const std::vector<TraceEntry>& trace) {
    for (const TraceEntry& e : trace) (*this)(e.stream);
  }
  int operator()(uint64_t id) { return numbers_.emplace(id, static_cast<int>(numbers_.size())).first->second; }

 private:
  std::map<uint64_t, int> numbers_{{0, 0}};
};

// One line per entry: action, where (n-th segment allocated or mapped, offset; "-" for an oom), size, stream.
inline std::string normalized_trace(const std::vector<TraceEntry>& trace, StreamNumbers& streams) {
  struct Segment {
    uint64_t start, end;
    bool live;
  };
  std::vector<Segment> segments;
  std::ostringstream out;
  for (const TraceEntry& e : trace) {
    std::string where = "-";
    if (e.action == TraceAction::segment_alloc || e.action == TraceAction::segment_map)
      segments.push_back({e.address, e.address + e.size, true});
    for (size_t i = 0; i < segments.size() && e.action != TraceAction::oom; ++i) {
      if (segments[i].live && e.address >= segments[i].start && e.address < segments[i].end) {
        where = "seg" + std::to_string(i) + "+" + std::to_string(e.address - segments[i].start);
        // Its addresses may come back.
        if (e.action == TraceAction::segment_free || e.action == TraceAction::segment_unmap) segments[i].live = false;
        break;
      }
    }
    out << trace_action_name(e.action) << " " << where << " " << e.size << " stream" << streams(e.stream) << "\n";
  }
  return out.str();
}

}  // namespace bytegrad::probe_data
