// bytegrad-replay's trace reader (tools/trace_replay.h) on bad input: negative, non-numeric and
// out-of-range numbers, huge lines, traces without events and addresses allocated twice are errors that
// name the line (and quote at most kMaxQuotedChars of it); nothing is replayed from a rejected trace.
#include <doctest/doctest.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include "helpers.h"
#include "tools/trace_replay.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// The std::runtime_error message of parse_trace on `text`; fails the test when it does not throw one.
std::string parse_error(const std::string& text, const std::string& source = "trace") {
  std::istringstream in(text);
  try {
    (void)parse_trace(in, source);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("parse_trace must throw std::runtime_error");
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("parse_trace: negative, non-numeric and out-of-range numbers name the line and the text") {
  SUBCASE("a negative size (it used to be read as 2^64 - 512)") {
    const std::string message = parse_error("alloc 4096 100 0\nalloc 8192 -512 0\n");
    CHECK(has(message, "trace line 2"));
    CHECK(has(message, "size"));
    CHECK(has(message, "'-512'"));
  }
  SUBCASE("a negative address") { CHECK(has(parse_error("alloc -4096 100 0\n"), "'-4096'")); }
  SUBCASE("a non-numeric stream") {
    const std::string message = parse_error("# c\nalloc 4096 100 0\nfree 4096 100 x1\n");
    CHECK(has(message, "line 3"));
    CHECK(has(message, "stream"));
    CHECK(has(message, "'x1'"));
  }
  SUBCASE("a size beyond 64 bits") {
    const std::string message = parse_error("alloc 4096 18446744073709551616 0\n");
    CHECK(has(message, "line 1"));
    CHECK(has(message, "'18446744073709551616'"));
    CHECK(has(message, "out of range"));
  }
  SUBCASE("a number with trailing junk") { CHECK(has(parse_error("alloc 4096 100abc 0\n"), "'100abc'")); }
  SUBCASE("a plus sign or hexadecimal") {
    CHECK(has(parse_error("alloc 4096 +100 0\n"), "'+100'"));
    CHECK(has(parse_error("alloc 0x1000 100 0\n"), "'0x1000'"));
  }
  SUBCASE("too few or too many fields") {
    CHECK(has(parse_error("alloc 4096 100\n"), "line 1"));
    CHECK(has(parse_error("alloc 4096 100 0\nalloc 8192 100 0 7\n"), "line 2"));
  }
  SUBCASE("the source is named") { CHECK(has(parse_error("alloc 1 -1 0\n", "dir/x.trace"), "dir/x.trace line 1")); }
  // The largest value is still a number.
  std::istringstream max("alloc 18446744073709551615 1 18446744073709551615\n");
  const auto events = parse_trace(max);
  REQUIRE(events.size() == 1);
  CHECK(events[0].address == 18446744073709551615ull);
  CHECK(events[0].stream == 18446744073709551615ull);
  CHECK(events[0].line == 1);
}

TEST_CASE("parse_trace: a long bad line is quoted in at most 80 characters, with its length; past the cap, refused") {
  // Lines up to kMaxTraceLineChars (65536) are read and quoted; a longer one stops the reading.
  const std::string huge(60'000, '7');
  SUBCASE("a huge number") {
    const std::string message = parse_error("alloc 4096 " + huge + " 0\n");
    CHECK(has(message, "line 1"));
    CHECK(has(message, "...' (60000 characters)"));
    CHECK(message.size() < 300);
  }
  SUBCASE("a huge action") {
    const std::string message = parse_error("alloc 4096 1 0\n" + std::string(50'000, 'z') + " 1 2 3\n");
    CHECK(has(message, "line 2"));
    CHECK(has(message, "(50000 characters)"));
    CHECK(message.size() < 300);
  }
  SUBCASE("a huge line of one field") {
    const std::string message = parse_error(huge + "\n");
    CHECK(has(message, "'" + std::string(80, '7') + "...' (60000 characters)"));
    CHECK(message.size() < 300);
  }
  SUBCASE("a line past the cap (10^7 characters, or a stream without newlines)") {
    const std::string message = parse_error("alloc 4096 1 0\n" + std::string(10'000'000, '7') + "\n");
    CHECK(has(message, "line 2: longer than 65536 characters"));
    CHECK(message.size() < 300);
    CHECK(
        has(parse_error("alloc 4096 1 0\n" + std::string(65536, 'z') + "\n"), "line 2: expected"));  // at the cap: read
  }
  CHECK(quote_excerpt("short") == "'short'");
  CHECK(quote_excerpt(std::string(80, 'a')) == "'" + std::string(80, 'a') + "'");
  CHECK(quote_excerpt(std::string(81, 'a')) == "'" + std::string(80, 'a') + "...' (81 characters)");
}

TEST_CASE("parse_trace: a trace without alloc or free events is an error") {
  CHECK(has(parse_error(""), "no alloc or free events"));
  CHECK(has(parse_error("# only a comment\n\n", "empty.trace"), "empty.trace"));
  CHECK(has(parse_error("segment_alloc 4096 2097152 0\nsegment_free 4096 2097152 0\n"), "no alloc or free events"));
}

TEST_CASE("parse_trace: an alloc at an address that is still live names both lines") {
  const std::string message = parse_error("alloc 4096 100 0\nalloc 8192 100 0\n# c\nalloc 4096 200 0\n");
  CHECK(has(message, "line 4"));
  CHECK(has(message, "line 1"));
  CHECK(has(message, "4096"));
  CHECK(has(message, "still live"));
  // Reusing an address after its free is what allocators do: accepted.
  std::istringstream reused("alloc 4096 100 0\nfree 4096 100 0\nalloc 4096 200 0\n");
  CHECK(parse_trace(reused).size() == 3);
}

TEST_CASE("replay_trace: hand-made events with a live address allocated twice change nothing") {
  auto allocator = make_allocator();
  void* kept = allocator->malloc(512);
  const auto stats = allocator->memory_stats();
  const std::vector<TraceEvent> events = {{TraceEvent::alloc, 4096, 100, 0}, {TraceEvent::alloc, 4096, 200, 0}};
  try {
    (void)replay_trace(events, *allocator);
    FAIL("replay_trace must throw std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    CHECK(has(e.what(), "#2"));
    CHECK(has(e.what(), "#1"));
  }
  CHECK(allocator->memory_stats() == stats);
  allocator->free(kept);
}
