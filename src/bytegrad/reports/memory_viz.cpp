#include "bytegrad/reports/memory_viz.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "bytegrad/core/json.h"

namespace bytegrad {

namespace {

constexpr uint64_t kExactDoubleLimit = uint64_t{1} << 53;  // integers below this survive a JS double
constexpr uint64_t kShiftAlignment = uint64_t{2} << 20;

using Out = std::back_insert_iterator<std::string>;

// The one-frame stack standing for a tag; [] for no tag.
void write_frames(std::string& out, std::string_view tag) {
  if (tag.empty()) {
    out += "[]";
    return;
  }
  out += R"([{"filename": "bytegrad", "line": 0, "name": )";
  json::append_quoted(out, tag);
  out += "}]";
}

bool has_address(TraceAction action) { return action != TraceAction::oom && action != TraceAction::snapshot; }
bool has_category(TraceAction action) {
  return action == TraceAction::alloc || action == TraceAction::free_requested || action == TraceAction::free_completed;
}

// PyTorch's key for an entry of roundup_power2_divisions: the interval's lower bound in MiB.
std::string roundup_key(size_t interval) { return std::to_string(uint64_t{1} << interval); }

// What to subtract from a device's addresses so that all are below 2^53 (0 when they already are).
uint64_t address_shift(const MemorySnapshot& snap) {
  uint64_t low = std::numeric_limits<uint64_t>::max(), high = 0;
  auto cover = [&](uint64_t address, uint64_t size) {
    low = std::min(low, address);
    high = std::max(high, address + size);
  };
  for (const SegmentInfo& s : snap.segments) cover(s.address, s.total_size);
  for (const TraceEntry& e : snap.trace)
    if (has_address(e.action)) cover(e.address, e.size);
  if (high < kExactDoubleLimit) return 0;
  const uint64_t shift = low / kShiftAlignment * kShiftAlignment;
  if (high - shift >= kExactDoubleLimit)
    throw std::range_error(fmt::format(
        "memory_viz: device {} uses addresses from {:#x} to {:#x}, a range too wide for the viewer's doubles",
        snap.device_index, low, high));
  return shift;
}

void write_segments(std::string& out, const MemorySnapshot& snap, uint64_t shift, bool& first) {
  // The tag of each block still live at the end of the history: the alloc that made it.
  std::unordered_map<uintptr_t, const std::string*> live_tags;
  for (const TraceEntry& e : snap.trace) {
    if (e.action == TraceAction::alloc) live_tags[e.address] = &e.tag;
    else if (e.action == TraceAction::free_completed) live_tags.erase(e.address);
  }
  for (const SegmentInfo& s : snap.segments) {
    out += first ? "\n" : ",\n";
    first = false;
    fmt::format_to(Out(out),
                   R"({{"device": {}, "address": {}, "total_size": {}, "allocated_size": {}, "active_size": {}, )"
                   R"("requested_size": {}, "stream": {}, "segment_type": "{}", "segment_pool_id": [{}, {}], )"
                   R"("is_expandable": {}, "frames": [], "blocks": [)",
                   snap.device_index, s.address - shift, s.total_size, s.allocated_size, s.active_size,
                   s.requested_size, s.stream, s.pool == PoolKind::large ? "large" : "small", s.pool_id.first,
                   s.pool_id.second, s.is_expandable);
    for (size_t i = 0; i < s.blocks.size(); ++i) {
      const BlockInfo& b = s.blocks[i];
      fmt::format_to(Out(out), R"({}{{"address": {}, "size": {}, "requested_size": {}, "state": "{}", "frames": )",
                     i ? ",\n  " : "\n  ", b.address - shift, b.size, b.requested_size, block_state_name(b.state));
      std::string_view tag;
      if (b.state != BlockState::inactive)
        if (auto it = live_tags.find(b.address); it != live_tags.end()) tag = *it->second;
      write_frames(out, tag);
      out += '}';
    }
    out += "]}";
  }
}

void write_trace(std::string& out, const MemorySnapshot& snap, uint64_t shift) {
  out += '[';
  bool first = true;
  for (const TraceEntry& e : snap.trace) {
    if (e.action == TraceAction::category) continue;  // bytegrad's own action: not one the viewer knows
    fmt::format_to(Out(out), R"({}{{"action": "{}", )", first ? "\n" : ",\n", trace_action_name(e.action));
    first = false;
    if (e.action == TraceAction::oom) {
      fmt::format_to(Out(out), R"("device_free": {}, )", e.device_free);
    } else {
      fmt::format_to(Out(out), R"("addr": {}, )", has_address(e.action) ? e.address - shift : e.address);
    }
    fmt::format_to(Out(out), R"("size": {}, "stream": {}, "time_us": {}, "frames": )", e.size, e.stream, e.time_us);
    write_frames(out, e.tag);
    // The viewer colours blocks by their alloc's category and draws a legend of every category it meets;
    // entries about no block say "unknown", which the viewer needs once categories exist at all.
    out += R"(, "category": ")";
    out += has_category(e.action) ? category_name(e.category) : std::string_view("unknown");
    out += R"(", "compile_context": "N/A"})";
  }
  out += ']';
}

void write_settings(std::string& out, const AllocatorConfig& config) {
  out += R"({"PYTORCH_CUDA_ALLOC_CONF": )";
  json::append_quoted(out, config.raw);
  const int64_t max_split =
      config.max_split_size == std::numeric_limits<size_t>::max() ? -1 : static_cast<int64_t>(config.max_split_size);
  fmt::format_to(Out(out),
                 R"(, "max_split_size": {}, "garbage_collection_threshold": {}, "expandable_segments": {}, )"
                 R"("release_lock_on_cudamalloc": false, "roundup_power2_divisions": {{)",
                 max_split, config.garbage_collection_threshold, config.expandable_segments);
  for (size_t i = 0; i < kRoundupPower2Intervals; ++i)
    fmt::format_to(Out(out), R"({}"{}": {})", i ? ", " : "", roundup_key(i), config.roundup_power2_divisions[i]);
  out += "}}";
}

std::string to_json(const std::vector<const MemorySnapshot*>& snapshots) {
  std::map<int, const MemorySnapshot*> by_device;
  for (const MemorySnapshot* snap_ptr : snapshots) {
    const MemorySnapshot& snap = *snap_ptr;
    if (snap.device_index < 0)
      throw std::invalid_argument(fmt::format("memory_viz: negative device index {}", snap.device_index));
    if (!by_device.emplace(snap.device_index, &snap).second)
      throw std::invalid_argument(
          fmt::format("memory_viz: two snapshots of device {}; the viewer tells devices apart by index only, so export "
                      "them to separate files",
                      snap.device_index));
  }
  std::map<int, uint64_t> shifts;
  for (const auto& [device, snap] : by_device) shifts[device] = address_shift(*snap);

  std::string out = "{\"segments\": [";
  bool first = true;
  for (const auto& [device, snap] : by_device) write_segments(out, *snap, shifts[device], first);
  out += "],\n\"device_traces\": [";
  const int devices = by_device.empty() ? 0 : by_device.rbegin()->first + 1;
  for (int device = 0; device < devices; ++device) {
    if (device) out += ",\n";
    auto it = by_device.find(device);
    if (it == by_device.end()) out += "[]";
    else write_trace(out, *it->second, shifts[device]);
  }
  out += "],\n\"allocator_settings\": ";
  write_settings(out, by_device.empty() ? AllocatorConfig{} : by_device.begin()->second->settings);
  out += "}\n";
  return out;
}

}  // namespace

std::string memory_viz_json(const std::vector<MemorySnapshot>& snapshots) {
  std::vector<const MemorySnapshot*> pointers;
  pointers.reserve(snapshots.size());
  for (const MemorySnapshot& snap : snapshots) pointers.push_back(&snap);
  return to_json(pointers);
}

std::string memory_viz_json(const MemorySnapshot& snapshot) { return to_json({&snapshot}); }

std::string memory_viz_json(CachingAllocator& allocator) {
  const MemorySnapshot snapshot = allocator.snapshot();
  return to_json({&snapshot});
}

namespace {

void write_file(const std::string& path, const std::string& json) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw std::runtime_error("memory_viz: cannot open " + path + " for writing");
  file.write(json.data(), static_cast<std::streamsize>(json.size()));
  file.close();
  if (!file) throw std::runtime_error("memory_viz: cannot write " + path);
}

}  // namespace

void dump_memory_viz(const std::string& path, const std::vector<MemorySnapshot>& snapshots) {
  write_file(path, memory_viz_json(snapshots));
}

void dump_memory_viz(const std::string& path, CachingAllocator& allocator) {
  write_file(path, memory_viz_json(allocator));
}

}  // namespace bytegrad
