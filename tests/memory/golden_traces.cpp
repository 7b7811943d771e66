// The shared golden traces (shared/golden/traces): replaying each .trace through a fresh allocator must print
// exactly the .golden lines that PyTorch 2.11's own caching allocator produced.
#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "helpers.h"
#include "tools/trace_replay.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// "key=value" from the trace's closing comment "# final allocated=... reserved=... ...".
int64_t comment_field(const std::string& comment, const std::string& key) {
  const auto pos = comment.find(" " + key + "=");
  REQUIRE_MESSAGE(pos != std::string::npos, "no " << key << " in " << comment);
  return std::stoll(comment.substr(pos + key.size() + 2));
}

void check_trace(const std::string& name) {
  INFO("trace " << name);
  const std::string trace_path = shared_path("golden/traces/" + name + ".trace");
  std::ifstream in(trace_path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << trace_path);
  const auto events = parse_trace(in);
  const auto golden = read_lines(shared_path("golden/traces/" + name + ".golden"));
  REQUIRE(golden.size() > 2);

  auto allocator = make_allocator();
  const ReplayResult result = replay_trace(events, *allocator);
  const auto difference = first_difference(result.lines, golden);
  CHECK_MESSAGE(!difference.has_value(), (difference ? *difference : std::string()));
  CHECK(result.lines.size() == golden.size());

  // Cross-check against the recorded run's own closing line: the figures after the last event, before the
  // replay's final empty_cache.
  const auto trace_lines = read_lines(trace_path);
  const std::string& final_comment = trace_lines.back();
  REQUIRE(final_comment.rfind("# final", 0) == 0);
  size_t allocs = 0;
  for (const TraceEvent& event : events) allocs += event.kind == TraceEvent::alloc;
  CHECK(static_cast<int64_t>(allocs) == comment_field(final_comment, "allocs"));
  const std::string& last_event = golden[golden.size() - 3];  // "<action> <size> <allocated> <reserved> <segments>"
  std::istringstream fields(last_event);
  std::string action;
  int64_t size = 0, allocated = 0, reserved = 0, segments = 0;
  fields >> action >> size >> allocated >> reserved >> segments;
  CHECK(allocated == comment_field(final_comment, "allocated"));
  CHECK(reserved == comment_field(final_comment, "reserved"));
  CHECK(segments == comment_field(final_comment, "segments"));
  CHECK(allocator->max_memory_allocated() == comment_field(final_comment, "peak_allocated"));
  CHECK(allocator->max_memory_reserved() == comment_field(final_comment, "peak_reserved"));
}

}  // namespace

TEST_CASE("golden trace w_mlp_adam replays to its .golden lines") { check_trace("w_mlp_adam"); }

TEST_CASE("golden trace w_seed000_loop replays to its .golden lines") { check_trace("w_seed000_loop"); }

// The same traces replayed by PyTorch with expandable_segments:True (shared/golden/README.md): every line
// (segments stay 0, reserved moves by mapped pages) and the closing peaks and after-empty_cache figures,
// on sim and on meta. The recorded run's closing comment is of the run without the option, so only its
// count of allocations applies.
void check_expandable_trace(const std::string& name) {
  const std::string trace_path = shared_path("golden/traces/" + name + ".trace");
  std::ifstream in(trace_path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << trace_path);
  const auto events = parse_trace(in);
  const auto golden = read_lines(shared_path("golden/traces/" + name + ".expandable_segments.golden"));
  REQUIRE(golden.size() > 2);
  const AllocatorConfig config = AllocatorConfig::parse("expandable_segments:True");
  for (const char* device : {"sim", "meta"}) {
    INFO("trace " << name << " with expandable segments on " << device);
    std::unique_ptr<RawMemory> raw =
        std::string(device) == "sim" ? make_host_backed_raw_memory({}) : make_address_only_raw_memory({});
    CachingAllocator allocator(std::move(raw), config);
    const ReplayResult result = replay_trace(events, allocator);
    const auto difference = first_difference(result.lines, golden);
    CHECK_MESSAGE(!difference.has_value(), (difference ? *difference : std::string()));
    CHECK(stat(allocator, "segment.all.peak") == 0);
    CHECK(stat(allocator, "inactive_split_bytes.all.peak") == 0);
  }
  size_t allocs = 0;
  for (const TraceEvent& event : events) allocs += event.kind == TraceEvent::alloc;
  CHECK(static_cast<int64_t>(allocs) == comment_field(read_lines(trace_path).back(), "allocs"));
}

TEST_CASE("golden trace w_mlp_adam with expandable segments replays to its .expandable_segments.golden") {
  check_expandable_trace("w_mlp_adam");
}

TEST_CASE("golden trace w_seed000_loop with expandable segments replays to its .expandable_segments.golden") {
  check_expandable_trace("w_seed000_loop");
}

TEST_CASE("parse_trace skips segment events and comments, and names malformed lines") {
  std::istringstream good("segment_alloc 4096 2097152 0\nalloc 4096 100 0\n# note\n\nfree 4096 100 0\n");
  const auto events = parse_trace(good);
  REQUIRE(events.size() == 2);
  CHECK(events[0].kind == TraceEvent::alloc);
  CHECK(events[0].address == 4096);
  CHECK(events[0].size == 100);
  CHECK(events[1].kind == TraceEvent::free);

  std::istringstream bad("alloc 4096 100 0\nalloc 4096 oops 0\n");
  try {
    parse_trace(bad);
    FAIL("a malformed line must throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("line 2") != std::string::npos);
  }
  std::istringstream unknown("resize 4096 100 0\n");
  CHECK_THROWS_AS(parse_trace(unknown), std::runtime_error);
}

TEST_CASE("first_difference reports the first differing line and length mismatches") {
  CHECK_FALSE(first_difference({"a", "b"}, {"a", "b"}).has_value());
  const auto diff = first_difference({"a", "x"}, {"a", "b"});
  REQUIRE(diff.has_value());
  CHECK(diff->find("line 2") != std::string::npos);
  CHECK(first_difference({"a"}, {"a", "b"}).has_value());
}
