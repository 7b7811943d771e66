#include "tools/trace_replay.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "bytegrad/reports/memory_summary.h"

namespace bytegrad {

std::string quote_excerpt(std::string_view text) {
  if (text.size() <= kMaxQuotedChars) return fmt::format("'{}'", text);
  return fmt::format("'{}...' ({} characters)", text.substr(0, kMaxQuotedChars), text.size());
}

namespace {

// The line's whitespace-separated fields (at most `limit` + 1: enough to tell that there are too many).
std::vector<std::string_view> split_fields(std::string_view line, size_t limit) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while (fields.size() <= limit) {
    pos = line.find_first_not_of(" \t\r", pos);
    if (pos == std::string_view::npos) break;
    size_t end = line.find_first_of(" \t\r", pos);
    if (end == std::string_view::npos) end = line.size();
    fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return fields;
}

std::string where(const TraceEvent& event, size_t position) {
  return event.line ? fmt::format("line {}", event.line) : fmt::format("#{}", position + 1);
}

}  // namespace

std::optional<std::string> live_address_conflict(const std::vector<TraceEvent>& events) {
  std::unordered_map<uint64_t, size_t> live;  // address -> position of the alloc that made it live
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& event = events[i];
    if (event.kind == TraceEvent::free) {
      live.erase(event.address);
      continue;
    }
    auto [it, inserted] = live.emplace(event.address, i);
    if (!inserted)
      return fmt::format("{}: alloc at address {}, which is still live: allocated at {} and not freed since",
                         where(event, i), event.address, where(events[it->second], it->second));
  }
  return std::nullopt;
}

namespace {

// std::getline with a cap: false at the end of the stream; `too_long` when the line has more than
// kMaxTraceLineChars characters, the rest of it unread (a stream without newlines, /dev/zero say, would
// otherwise be read into one string until memory ran out).
bool read_capped_line(std::istream& in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  std::streambuf* buffer = in.rdbuf();
  if (!buffer) return false;
  for (int c = buffer->sbumpc(); c != std::char_traits<char>::eof(); c = buffer->sbumpc()) {
    if (c == '\n') return true;
    if (line.size() == kMaxTraceLineChars) {
      too_long = true;
      return true;
    }
    line.push_back(static_cast<char>(c));
  }
  in.setstate(std::ios::eofbit);
  return !line.empty();
}

}  // namespace

std::vector<TraceEvent> parse_trace(std::istream& in, const std::string& source) {
  std::vector<TraceEvent> events;
  std::string line;
  size_t line_number = 0;
  auto fail = [&](const std::string& what) {
    throw std::runtime_error(fmt::format("{} line {}: {}", source, line_number, what));
  };
  bool too_long = false;
  while (read_capped_line(in, line, too_long)) {
    ++line_number;
    if (too_long)
      fail(fmt::format("longer than {} characters (a trace line is '<action> <addr> <size> <stream>'; reading stopped)",
                       kMaxTraceLineChars));
    if (line.empty() || line[0] == '#') continue;
    const auto fields = split_fields(line, 4);
    if (fields.empty()) continue;  // blank (whitespace only)
    if (fields.size() != 4)
      fail(fmt::format("expected '<action> <addr> <size> <stream>', got {}", quote_excerpt(line)));
    const std::string_view action = fields[0];
    TraceEvent event{};
    event.line = line_number;
    if (action == "alloc") event.kind = TraceEvent::alloc;
    else if (action == "free") event.kind = TraceEvent::free;
    else if (action == "segment_alloc" || action == "segment_free") continue;  // the allocator decides these
    else
      fail(fmt::format("unknown action {} (expected alloc, free, segment_alloc or segment_free)",
                       quote_excerpt(action)));
    const char* names[] = {"address", "size", "stream"};
    uint64_t* values[] = {&event.address, &event.size, &event.stream};
    for (size_t i = 0; i < 3; ++i) {
      const std::string_view text = fields[i + 1];
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *values[i]);
      if (ec == std::errc::result_out_of_range)
        fail(fmt::format("{} {} is out of range (at most {})", names[i], quote_excerpt(text),
                         std::numeric_limits<uint64_t>::max()));
      if (ec != std::errc() || end != text.data() + text.size())
        fail(fmt::format("{} {} is not a non-negative decimal integer", names[i], quote_excerpt(text)));
    }
    events.push_back(event);
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: cannot read (after line {})", source, line_number));
  if (events.empty())
    throw std::runtime_error(
        fmt::format("{}: no alloc or free events ({} lines read): an empty trace", source, line_number));
  if (auto conflict = live_address_conflict(events)) throw std::runtime_error(fmt::format("{} {}", source, *conflict));
  return events;
}

ReplayResult replay_trace(const std::vector<TraceEvent>& events, CachingAllocator& allocator) {
  if (auto conflict = live_address_conflict(events)) throw std::invalid_argument("replay_trace: event " + *conflict);
  ReplayResult result;
  result.lines.reserve(events.size() + 2);
  std::unordered_map<uint64_t, void*> live;  // recorded address -> our block
  auto figures = [&](const char* action, uint64_t size) {
    DeviceStats stats = allocator.stats();
    result.lines.push_back(fmt::format("{} {} {} {} {}", action, size, stats.allocated_bytes.all().current,
                                       stats.reserved_bytes.all().current, stats.segment.all().current));
  };
  for (const TraceEvent& event : events) {
    if (event.kind == TraceEvent::alloc) {
      live[event.address] = allocator.malloc(event.size, event.stream);
      figures("alloc", event.size);
    } else {
      auto it = live.find(event.address);
      if (it == live.end()) continue;  // freed something allocated before recording began
      allocator.free(it->second);
      live.erase(it);
      figures("free", event.size);
    }
  }
  DeviceStats stats = allocator.stats();
  result.lines.push_back(fmt::format("# peak_allocated={} peak_reserved={}", stats.allocated_bytes.all().peak,
                                     stats.reserved_bytes.all().peak));
  result.summary = memory_summary(allocator);
  allocator.empty_cache();
  result.lines.push_back(fmt::format("# after_empty_cache allocated={} reserved={}", allocator.memory_allocated(),
                                     allocator.memory_reserved()));
  return result;
}

std::optional<std::string> first_difference(const std::vector<std::string>& actual,
                                            const std::vector<std::string>& expected) {
  size_t common = std::min(actual.size(), expected.size());
  for (size_t i = 0; i < common; ++i)
    if (actual[i] != expected[i])
      return fmt::format("line {} differs:\n  expected: {}\n  replayed: {}", i + 1, expected[i], actual[i]);
  if (actual.size() != expected.size())
    return fmt::format("line counts differ: expected {}, replayed {}", expected.size(), actual.size());
  return std::nullopt;
}

}  // namespace bytegrad
