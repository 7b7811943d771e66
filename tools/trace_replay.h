// Replaying an allocator event trace (the format of shared/golden/traces/*.trace) through a caching
// allocator, printing the allocator's figures after every event in the .golden format.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/memory/caching_allocator.h"

namespace bytegrad {

struct TraceEvent {
  enum Kind { alloc, free } kind = alloc;
  uint64_t address = 0;  // identifies the block in the recorded run
  uint64_t size = 0;     // alloc: bytes requested
  uint64_t stream = 0;
  size_t line = 0;  // its line in the trace (0 when not read from one)
};

// Reads alloc/free lines; segment_* lines and comments are skipped. Throws std::runtime_error naming
// `source` and the line number of anything malformed, quoting at most kMaxQuotedChars of the line:
//  - a line that is not '<action> <addr> <size> <stream>', or an unknown action;
//  - a number that is negative, not a decimal integer, or does not fit in 64 bits;
//  - an alloc at an address already live in the trace (allocated, not yet freed): both lines are named;
//  - a trace without any alloc/free event (an empty file), or a stream that cannot be read;
//  - a line longer than kMaxTraceLineChars (reading stops there: a stream without newlines is not read whole).
inline constexpr size_t kMaxTraceLineChars = 65536;
std::vector<TraceEvent> parse_trace(std::istream& in, const std::string& source = "trace");

inline constexpr size_t kMaxQuotedChars = 80;
// `text` in quotes, cut to kMaxQuotedChars with "..." and its full length when longer.
std::string quote_excerpt(std::string_view text);

// The first alloc at an address still live among `events` (allocated by an earlier alloc, not freed since),
// described with both events' lines (their positions, #N, when not read from a trace); nullopt when none.
std::optional<std::string> live_address_conflict(const std::vector<TraceEvent>& events);

struct ReplayResult {
  std::vector<std::string> lines;  // one per replayed event, then the two closing comment lines
  std::string summary;             // memory_summary() after the last event, before empty_cache
};

// Replays from the allocator's current state; frees of addresses not live in the trace are skipped, as
// the golden does. Ends with empty_cache. Blocks still live at the end are left allocated. Events that
// have a live_address_conflict throw std::invalid_argument before anything is allocated.
ReplayResult replay_trace(const std::vector<TraceEvent>& events, CachingAllocator& allocator);

// The first line where `actual` and `expected` differ, as a readable report; nullopt when they match.
std::optional<std::string> first_difference(const std::vector<std::string>& actual,
                                            const std::vector<std::string>& expected);

}  // namespace bytegrad
