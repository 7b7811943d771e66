#include "bytegrad/reports/memory_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/outside_allocator.h"
#include "bytegrad/reports/memory_report_page.h"

namespace bytegrad {

// ------------------------------------------------------------------------------ the allocator's state

int64_t AllocatorState::allocated() const {
  int64_t sum = 0;
  for (const auto& [address, b] : blocks) sum += static_cast<int64_t>(b.size);
  return sum;
}

int64_t AllocatorState::reserved() const {
  int64_t sum = 0;
  for (const auto& [address, s] : segments) sum += static_cast<int64_t>(s.size);
  return sum;
}

int64_t AllocatorState::pending_bytes() const {
  int64_t sum = 0;
  for (const auto& [address, b] : pending) sum += static_cast<int64_t>(b.size);
  return sum;
}

namespace {

size_t index_of(MemoryCategory c) { return static_cast<size_t>(c); }

// Pages mapped into an expandable segment: a range of its own, joined to the mapped ranges of the same stream
// it touches (the snapshot lists each contiguous mapped range as one segment).
void map_range(AllocatorState& state, uintptr_t address, size_t size, StreamId stream) {
  StateSegment range{address, size, true, stream};
  auto next = state.segments.find(address + size);
  if (next != state.segments.end() && next->second.expandable && next->second.stream == stream) {
    range.size += next->second.size;
    state.segments.erase(next);
  }
  auto it = state.segments.lower_bound(address);
  if (it != state.segments.begin()) {
    auto prev = std::prev(it);
    if (prev->second.expandable && prev->second.stream == stream && prev->first + prev->second.size == address) {
      prev->second.size += range.size;
      return;
    }
  }
  state.segments[address] = range;
}

void unmap_range(AllocatorState& state, uintptr_t address, size_t size) {
  auto it = state.segments.upper_bound(address);
  if (it == state.segments.begin()) return;
  --it;
  const StateSegment whole = it->second;
  if (address + size > whole.address + whole.size) return;  // not inside one mapped range: leave it be
  state.segments.erase(it);
  if (address > whole.address)
    state.segments[whole.address] = {whole.address, address - whole.address, true, whole.stream};
  const uintptr_t end = address + size, whole_end = whole.address + whole.size;
  if (end < whole_end) state.segments[end] = {end, whole_end - end, true, whole.stream};
}

void add_block(AllocatorState& state, StateBlock block) {
  state.bytes[index_of(block.category)] += static_cast<int64_t>(block.size);
  state.blocks[block.address] = std::move(block);
}

void remove_block(AllocatorState& state, uintptr_t address) {
  auto it = state.blocks.find(address);
  if (it == state.blocks.end()) return;
  state.bytes[index_of(it->second.category)] -= static_cast<int64_t>(it->second.size);
  state.blocks.erase(it);
}

// free_requested: the block leaves the allocated bytes; a deferred free (record_stream) waits for its
// free_completed as a pending block.
void request_free(AllocatorState& state, const TraceEntry& e) {
  if (!e.free_deferred) {
    remove_block(state, e.address);
    return;
  }
  auto it = state.blocks.find(e.address);
  StateBlock block =
      it != state.blocks.end() ? it->second : StateBlock{e.address, e.block_size, e.size, e.category, "", e.stream};
  remove_block(state, e.address);
  state.pending[e.address] = std::move(block);
}

// Undoing free_requested: the pending block is live again.
void unrequest_free(AllocatorState& state, const TraceEntry& e) {
  auto it = state.pending.find(e.address);
  StateBlock block =
      it != state.pending.end() ? it->second : StateBlock{e.address, e.block_size, e.size, e.category, "", e.stream};
  if (it != state.pending.end()) state.pending.erase(it);
  block.category = e.category;  // the category it had when freed
  add_block(state, std::move(block));
}

void set_category(AllocatorState& state, uintptr_t address, MemoryCategory category) {
  auto it = state.blocks.find(address);
  if (it == state.blocks.end()) return;
  state.bytes[index_of(it->second.category)] -= static_cast<int64_t>(it->second.size);
  state.bytes[index_of(category)] += static_cast<int64_t>(it->second.size);
  it->second.category = category;
}

// Undoes one entry: the state just after it becomes the state just before it.
void undo_trace_entry(AllocatorState& state, const TraceEntry& e) {
  switch (e.action) {
    case TraceAction::alloc: remove_block(state, e.address); break;
    case TraceAction::free_requested: unrequest_free(state, e); break;
    case TraceAction::free_completed:
      state.pending[e.address] = {e.address, e.block_size, e.size, e.category, "", e.stream};
      break;
    case TraceAction::category: set_category(state, e.address, e.previous_category); break;
    case TraceAction::segment_alloc: state.segments.erase(e.address); break;
    case TraceAction::segment_free: state.segments[e.address] = {e.address, e.size, false, e.stream}; break;
    case TraceAction::segment_map: unmap_range(state, e.address, e.size); break;
    case TraceAction::segment_unmap: map_range(state, e.address, e.size, e.stream); break;
    case TraceAction::oom:
    case TraceAction::snapshot: break;
  }
}

}  // namespace

void apply_trace_entry(AllocatorState& state, const TraceEntry& e) {
  switch (e.action) {
    case TraceAction::alloc: add_block(state, {e.address, e.block_size, e.size, e.category, e.tag, e.stream}); break;
    case TraceAction::free_requested: request_free(state, e); break;
    case TraceAction::free_completed: state.pending.erase(e.address); break;
    case TraceAction::category: set_category(state, e.address, e.category); break;
    case TraceAction::segment_alloc: state.segments[e.address] = {e.address, e.size, false, e.stream}; break;
    case TraceAction::segment_free: state.segments.erase(e.address); break;
    case TraceAction::segment_map: map_range(state, e.address, e.size, e.stream); break;
    case TraceAction::segment_unmap: unmap_range(state, e.address, e.size); break;
    case TraceAction::oom:
    case TraceAction::snapshot: break;
  }
}

AllocatorState allocator_state_before_history(const MemorySnapshot& snapshot) {
  AllocatorState state;
  // The end: the snapshot's segments and live blocks, each live block named by the alloc that made it; blocks
  // whose free waits on other streams are pending.
  std::unordered_map<uintptr_t, const std::string*> live_tags;
  for (const TraceEntry& e : snapshot.trace) {
    if (e.action == TraceAction::alloc) live_tags[e.address] = &e.tag;
    else if (e.action == TraceAction::free_requested) live_tags.erase(e.address);
  }
  for (const SegmentInfo& s : snapshot.segments) {
    state.segments[s.address] = {s.address, s.total_size, s.is_expandable, s.stream};
    for (const BlockInfo& b : s.blocks) {
      if (b.state == BlockState::inactive) continue;
      auto tag = live_tags.find(b.address);
      StateBlock block{b.address, b.size, b.requested_size, b.category, tag == live_tags.end() ? "" : *tag->second,
                       s.stream};
      if (b.state == BlockState::active_pending_free) state.pending[b.address] = std::move(block);
      else add_block(state, std::move(block));
    }
  }
  for (auto it = snapshot.trace.rbegin(); it != snapshot.trace.rend(); ++it) undo_trace_entry(state, *it);
  return state;
}

AllocatorState allocator_state_after(const MemorySnapshot& snapshot, size_t index) {
  if (index >= snapshot.trace.size())
    throw std::out_of_range(
        fmt::format("allocator_state_after: entry {} of a history of {}", index, snapshot.trace.size()));
  AllocatorState state = allocator_state_before_history(snapshot);
  for (size_t i = 0; i <= index; ++i) apply_trace_entry(state, snapshot.trace[i]);
  return state;
}

// ------------------------------------------------------------------------------------------ the data

// The JSON the page draws (one object):
//   "title", "subtitle", "device", "outside_allocator" (NCCL's memory outside the allocator, or ""): strings
//   "categories": the category names, in precedence order (a category is its index here)
//   "actions": the history's action names (an action is its index here)
//   "address_base": the addresses' origin as "0x..." (every address below is an offset from it, so that
//                   JavaScript's doubles hold it exactly)
//   "tags": the ops' names (a tag is its index here; -1 = none)
//   "streams": the streams' ids as snapshots show them, as strings (a stream is its index here): the default
//              stream "0" first, then the others in the order they first appear (segments, then the history)
//   "events": the history, one array per field, entry i at index i of each:
//             "action", "address", "size" (block bytes for block entries, the segment's or pages' bytes for
//             segment entries), "requested", "category", "previous" (a category entry's old category),
//             "tag", "stream", "time_us"
//   "deferred_frees": the indices of the free_requested entries whose free waits on other streams' events
//             (record_stream): their blocks are pending until their free_completed
//   "initial": the state before the first entry: "segments": [[address, size, expandable, stream]],
//             "blocks": [[address, size, requested, category, tag, stream]] (live), "pending": the same for
//             blocks freed but waiting on other streams' events (record_stream)
//   "marks": [{"label", "event" (-1: not on this history), "figures": {"allocated": n, ...}, "ledger": [8],
//             "change" (the story's sentence: by op), "by_category" (by category), "note" (why; may be "")}]
//   "peak": {"allocated", "phase", "bytes": [8], "event" (the first entry at which allocated reached it;
//            -1 when no entry does), "largest": [{"address", "bytes", "category", "owner"}]}
namespace {

using Out = std::back_insert_iterator<std::string>;

constexpr uint64_t kAddressAlignment = uint64_t{2} << 20;

uintptr_t address_base(const MemorySnapshot& snapshot) {
  uintptr_t low = std::numeric_limits<uintptr_t>::max();
  for (const SegmentInfo& s : snapshot.segments) low = std::min(low, s.address);
  for (const TraceEntry& e : snapshot.trace)
    if (e.action != TraceAction::oom && e.action != TraceAction::snapshot) low = std::min(low, e.address);
  return low == std::numeric_limits<uintptr_t>::max() ? 0 : low / kAddressAlignment * kAddressAlignment;
}

template <typename Get>
void write_column(std::string& out, const char* name, const std::vector<TraceEntry>& trace, Get get,
                  bool first = false) {
  fmt::format_to(Out(out), "{}\"{}\": [", first ? "" : ",\n", name);
  for (size_t i = 0; i < trace.size(); ++i) fmt::format_to(Out(out), "{}{}", i ? "," : "", get(trace[i]));
  out += ']';
}

}  // namespace

std::string memory_report_json(const MemorySnapshot& snapshot, const std::vector<StoryMark>& marks,
                               const PeakRecord& peak, const std::string& device_name,
                               const MemoryReportOptions& options) {
  const std::vector<TraceEntry>& trace = snapshot.trace;
  const uintptr_t base = address_base(snapshot);
  const AllocatorState initial = allocator_state_before_history(snapshot);

  std::string out = "{";
  out += "\"title\": ";
  json::append_quoted(out, options.title.empty() ? "bytegrad memory report: " + device_name : options.title);
  out += ", \"subtitle\": ";
  json::append_quoted(out, options.subtitle);
  out += ", \"device\": ";
  json::append_quoted(out, device_name);
  out += ", \"outside_allocator\": ";
  json::append_quoted(out, options.outside_allocator);
  out += ",\n\"categories\": [";
  for (MemoryCategory c : kMemoryCategories)
    fmt::format_to(Out(out), "{}\"{}\"", c == MemoryCategory::parameter ? "" : ", ", category_name(c));
  out += "],\n\"actions\": [";
  for (int a = 0; a <= static_cast<int>(TraceAction::category); ++a)
    fmt::format_to(Out(out), "{}\"{}\"", a ? ", " : "", trace_action_name(static_cast<TraceAction>(a)));
  fmt::format_to(Out(out), "],\n\"address_base\": \"{:#x}\",\n", base);

  // The tags, each once.
  std::unordered_map<std::string, int> tag_index;
  std::vector<const std::string*> tags;
  auto tag_of = [&](const std::string& tag) {
    if (tag.empty()) return -1;
    auto [it, added] = tag_index.emplace(tag, static_cast<int>(tags.size()));
    if (added) tags.push_back(&it->first);
    return it->second;
  };
  std::vector<int> entry_tags;
  entry_tags.reserve(trace.size());
  for (const TraceEntry& e : trace) entry_tags.push_back(tag_of(e.tag));
  std::vector<int> initial_tags, initial_pending_tags;
  for (const auto& [address, b] : initial.blocks) initial_tags.push_back(tag_of(b.tag));
  for (const auto& [address, b] : initial.pending) initial_pending_tags.push_back(tag_of(b.tag));
  out += "\"tags\": [";
  for (size_t i = 0; i < tags.size(); ++i) {
    if (i) out += ", ";
    json::append_quoted(out, *tags[i]);
  }
  out += "],\n";

  // The streams, the default stream first.
  std::vector<StreamId> streams{0};
  std::unordered_map<StreamId, int> stream_index{{0, 0}};
  auto stream_of = [&](StreamId id) {
    auto [it, added] = stream_index.emplace(id, static_cast<int>(streams.size()));
    if (added) streams.push_back(id);
    return it->second;
  };
  for (const auto& [address, seg] : initial.segments) stream_of(seg.stream);
  for (const TraceEntry& e : trace) stream_of(e.stream);
  out += "\"streams\": [";
  for (size_t i = 0; i < streams.size(); ++i) fmt::format_to(Out(out), "{}\"{}\"", i ? ", " : "", streams[i]);
  out += "],\n";

  auto is_block_entry = [](const TraceEntry& e) {
    return e.action == TraceAction::alloc || e.action == TraceAction::free_requested ||
           e.action == TraceAction::free_completed || e.action == TraceAction::category;
  };
  auto offset = [&](const TraceEntry& e) -> uint64_t {
    return e.action == TraceAction::oom || e.action == TraceAction::snapshot ? 0 : e.address - base;
  };
  bool first = true;
  out += "\"events\": {";
  write_column(
      out, "action", trace, [](const TraceEntry& e) { return static_cast<int>(e.action); }, true);
  write_column(out, "address", trace, offset);
  write_column(out, "size", trace, [&](const TraceEntry& e) { return is_block_entry(e) ? e.block_size : e.size; });
  write_column(out, "requested", trace, [&](const TraceEntry& e) { return is_block_entry(e) ? e.size : 0; });
  write_column(out, "category", trace, [](const TraceEntry& e) { return static_cast<int>(e.category); });
  write_column(out, "previous", trace, [](const TraceEntry& e) { return static_cast<int>(e.previous_category); });
  out += ",\n\"tag\": [";
  for (size_t i = 0; i < entry_tags.size(); ++i) fmt::format_to(Out(out), "{}{}", i ? "," : "", entry_tags[i]);
  out += "]";
  write_column(out, "stream", trace, [&](const TraceEntry& e) { return stream_index.at(e.stream); });
  write_column(out, "time_us", trace, [](const TraceEntry& e) { return e.time_us; });
  out += "},\n\"deferred_frees\": [";
  first = true;
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!trace[i].free_deferred) continue;
    fmt::format_to(Out(out), "{}{}", first ? "" : ",", i);
    first = false;
  }
  out += "],\n";

  out += "\"initial\": {\"segments\": [";
  first = true;
  for (const auto& [address, s] : initial.segments) {
    fmt::format_to(Out(out), "{}[{}, {}, {}, {}]", first ? "" : ", ", s.address - base, s.size, s.expandable,
                   stream_index.at(s.stream));
    first = false;
  }
  out += "], \"blocks\": [";
  size_t k = 0;
  for (const auto& [address, b] : initial.blocks) {
    fmt::format_to(Out(out), "{}[{}, {}, {}, {}, {}, {}]", k ? ", " : "", b.address - base, b.size, b.requested,
                   static_cast<int>(b.category), initial_tags[k], stream_index.at(b.stream));
    ++k;
  }
  out += "], \"pending\": [";
  k = 0;
  for (const auto& [address, b] : initial.pending) {
    fmt::format_to(Out(out), "{}[{}, {}, {}, {}, {}, {}]", k ? ", " : "", b.address - base, b.size, b.requested,
                   static_cast<int>(b.category), initial_pending_tags[k], stream_index.at(b.stream));
    ++k;
  }
  out += "]},\n";

  out += "\"marks\": [";
  for (size_t i = 0; i < marks.size(); ++i) {
    const StoryMark& m = marks[i];
    out += i ? ",\n" : "\n";
    out += "{\"label\": ";
    json::append_quoted(out, m.label);
    fmt::format_to(
        Out(out),
        ", \"event\": {}, \"figures\": {{\"allocated\": {}, \"reserved\": {}, \"max_allocated\": {}, "
        "\"max_reserved\": {}, \"segments\": {}, \"blocks\": {}, \"requested\": {}, \"inactive_split\": {}}}, "
        "\"ledger\": [{}], \"change\": ",
        m.event < static_cast<int64_t>(trace.size()) ? m.event : -1, m.allocated, m.reserved, m.max_allocated,
        m.max_reserved, m.segments, m.blocks, m.requested, m.inactive_split, fmt::join(m.ledger, ", "));
    json::append_quoted(out, m.change.str());
    out += ", \"by_category\": ";
    json::append_quoted(out, m.change.by_category());
    out += ", \"note\": ";
    json::append_quoted(out, m.note);
    out += "}";
  }
  out += "],\n";

  // The peak's entry: the first at which the replayed allocated bytes reach it.
  int64_t allocated = initial.allocated();
  int64_t peak_event = -1;
  for (size_t i = 0; i < trace.size() && peak_event < 0; ++i) {
    const TraceEntry& e = trace[i];
    if (e.action == TraceAction::alloc) allocated += static_cast<int64_t>(e.block_size);
    else if (e.action == TraceAction::free_requested) allocated -= static_cast<int64_t>(e.block_size);
    if (e.action == TraceAction::alloc && allocated == peak.allocated) peak_event = static_cast<int64_t>(i);
  }
  fmt::format_to(Out(out),
                 "\"peak\": {{\"allocated\": {}, \"phase\": \"{}\", \"bytes\": [{}], \"event\": {}, \"largest\": [",
                 peak.allocated, phase_name(peak.phase), fmt::join(peak.bytes, ", "), peak_event);
  for (size_t i = 0; i < peak.largest.size(); ++i) {
    const LedgerBlock& b = peak.largest[i];
    fmt::format_to(Out(out), "{}{{\"address\": \"{:#x}\", \"bytes\": {}, \"category\": {}, \"owner\": ", i ? ", " : "",
                   b.address, b.bytes, static_cast<int>(b.category));
    json::append_quoted(out, b.owner);
    out += "}";
  }
  out += "]}}\n";
  return out;
}

// ------------------------------------------------------------------------------------------ the page

namespace {

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

}  // namespace

std::string memory_report_html(const MemorySnapshot& snapshot, const std::vector<StoryMark>& marks,
                               const PeakRecord& peak, const std::string& device_name,
                               const MemoryReportOptions& options) {
  std::string data = memory_report_json(snapshot, marks, peak, device_name, options);
  // Inside <script>, "</" could end the element early; "<\/" means the same in a JSON string.
  replace_all(data, "</", "<\\/");
  std::string page = memory_report_page_template();
  const std::string title = options.title.empty() ? "bytegrad memory report: " + device_name : options.title;
  replace_all(page, "@@TITLE@@", html_escape(title));
  const size_t at = page.find("@@DATA@@");
  page.replace(at, 8, data);
  return page;
}

std::string memory_report_html(const MemoryStory& story, const MemoryReportOptions& options) {
  CachingAllocator& allocator = caching_allocator(story.device());
  const MemorySnapshot snapshot = allocator.snapshot();
  MemoryReportOptions with_outside = options;
  if (with_outside.outside_allocator.empty()) with_outside.outside_allocator = outside_allocator_line(story.device());
  return memory_report_html(snapshot, story.marks(), allocator.peak_record(), story.device().str(), with_outside);
}

void write_memory_report(const std::string& path, const MemoryStory& story, const MemoryReportOptions& options) {
  const std::string page = memory_report_html(story, options);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("write_memory_report: cannot write " + path);
  out << page;
  if (!out.flush()) throw std::runtime_error("write_memory_report: cannot write " + path);
}

}  // namespace bytegrad
