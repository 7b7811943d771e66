// The trace-reader fuzzer: random byte mutations, token insertions, line shuffles, truncations and splices of
// the real traces (shared/golden/traces, tests/data/pytorch_random, tests/data/bad_traces), fed to the
// reader bytegrad-replay uses (tools/trace_replay.h) and replayed. Every input must either parse, with each
// event matching its line, and replay (or run out of memory, leaving the allocator consistent), or be
// refused with the reader's std::runtime_error naming the source and a line number within the input (or
// saying the input has no events), quoting at most kMaxQuotedChars of it. A crash, hang or out-of-bounds
// read fails the run (under ./test.sh --sanitize, AddressSanitizer reports it).
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/memory/out_of_memory.h"
#include "tests/fuzz/fuzz_support.h"
#include "tools/trace_replay.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

std::vector<std::string> seed_traces() {
  std::vector<std::string> traces;
  for (const std::string& dir :
       {std::string(BYTEGRAD_SHARED_DIR) + "/golden/traces", std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_random",
        std::string(BYTEGRAD_TEST_DATA_DIR) + "/bad_traces"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".trace") continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      traces.push_back(text.str());
    }
  }
  return traces;
}

// Pieces that make the reader's decisions: actions, separators, numbers at the edges of 64 bits, signs.
const char* const kTokens[] = {"alloc",
                               "free",
                               "segment_alloc",
                               "segment_free",
                               " ",
                               "\t",
                               "\r",
                               "\n",
                               "#",
                               "-",
                               "+",
                               "0",
                               "00",
                               "-512",
                               "18446744073709551615",
                               "18446744073709551616",
                               "99999999999999999999999",
                               "1e3",
                               "0x10",
                               "\n\n",
                               "alloc 1 512 0\n",
                               "free 1 512 0\n",
                               "alloc 140390543917056 1024 0\n",
                               ""};  // "": a NUL byte

std::string mutate(std::mt19937& rng, const std::vector<std::string>& corpus) {
  std::string text = corpus[rng() % corpus.size()];
  auto position = [&] { return text.empty() ? size_t{0} : static_cast<size_t>(rng() % (text.size() + 1)); };
  const int rounds = 1 + static_cast<int>(rng() % 8);
  for (int round = 0; round < rounds; ++round) {
    switch (rng() % 10) {
      case 0:  // flip a byte to anything
        if (!text.empty()) text[rng() % text.size()] = static_cast<char>(rng() % 256);
        break;
      case 1:  // a digit, a space or a newline somewhere
        if (!text.empty()) text[rng() % text.size()] = "0123456789 \n-"[rng() % 13];
        break;
      case 2: {  // insert a token
        const char* token = kTokens[rng() % std::size(kTokens)];
        text.insert(position(), token[0] ? std::string(token) : std::string(1, '\0'));
        break;
      }
      case 3:  // truncate
        text.resize(position());
        break;
      case 4: {  // splice: our prefix, another trace's suffix
        const std::string& other = corpus[rng() % corpus.size()];
        text = text.substr(0, position()) + other.substr(other.empty() ? 0 : rng() % other.size());
        break;
      }
      case 5: {  // delete a range
        const size_t at = position();
        text.erase(at, rng() % 64);
        break;
      }
      case 6: {  // duplicate a range (repeated allocs at one address)
        const size_t at = position();
        const std::string piece = text.substr(at, rng() % 200);
        text.insert(position(), piece);
        break;
      }
      case 7:  // a very long line
        text.insert(position(), std::string(1000 + rng() % 100000, "7 a\t"[rng() % 4]));
        break;
      case 8: {  // swap two lines
        std::vector<std::string> lines;
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);) lines.push_back(line);
        if (lines.size() >= 2) std::swap(lines[rng() % lines.size()], lines[rng() % lines.size()]);
        text.clear();
        for (const auto& line : lines) text += line + "\n";
        break;
      }
      default:  // nothing: the input stays close to a valid trace
        break;
    }
  }
  return text;
}

size_t count_lines(const std::string& text) {
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines + (!text.empty() && text.back() != '\n');
}

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while ((pos = line.find_first_not_of(" \t\r", pos)) != std::string_view::npos) {
    const size_t end = std::min(line.find_first_of(" \t\r", pos), line.size());
    fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return fields;
}

// Each event is what its line says: the action and the three numbers, read here with strtoull.
bool events_match_lines(const std::vector<TraceEvent>& events, const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (const TraceEvent& event : events) {
    if (event.line == 0 || event.line > lines.size()) return false;
    const auto fields = fields_of(lines[event.line - 1]);
    if (fields.size() != 4 || fields[0] != (event.kind == TraceEvent::alloc ? "alloc" : "free")) return false;
    const uint64_t values[] = {event.address, event.size, event.stream};
    for (size_t i = 0; i < 3; ++i)
      if (std::strtoull(std::string(fields[i + 1]).c_str(), nullptr, 10) != values[i]) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("fuzz: the trace reader and replay on mutated real traces") {
  const uint64_t inputs = fuzz_iterations("TRACE", 5000);
  const uint64_t seed = fuzz_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed) ^ 0x7ace);
  const std::vector<std::string> corpus = seed_traces();
  REQUIRE(corpus.size() >= 10);
  const auto start = std::chrono::steady_clock::now();
  uint64_t parsed = 0, refused = 0, replayed = 0, out_of_memory = 0, events_total = 0;
  for (uint64_t i = 0; i < inputs; ++i) {
    const std::string text = mutate(rng, corpus);
    const size_t lines = count_lines(text);
    INFO("seed " << seed << ", input " << i << " (" << text.size() << " bytes, " << lines << " lines):\n"
                 << quote_excerpt(text));
    std::istringstream in(text);
    std::vector<TraceEvent> events;
    try {
      events = parse_trace(in, "fuzz.trace");
    } catch (const std::runtime_error& e) {
      ++refused;
      const std::string message = e.what();
      // "fuzz.trace line N: ..." with 1 <= N <= lines, or "fuzz.trace: no alloc or free events (N lines read)".
      size_t line = 0;
      const bool numbered = std::sscanf(message.c_str(), "fuzz.trace line %zu:", &line) == 1;
      const bool no_events =
          message.rfind("fuzz.trace: no alloc or free events (" + std::to_string(lines) + " lines read)", 0) == 0;
      if (!((numbered && line >= 1 && line <= lines) || no_events)) {
        FAIL_CHECK("the refusal names no line of the input: " << message);
        break;
      }
      // A conflict names two lines; everything else quotes at most kMaxQuotedChars of the input.
      if (message.size() > 2 * kMaxQuotedChars + 200) {
        FAIL_CHECK("the refusal echoes too much of the input (" << message.size() << " characters)");
        break;
      }
      continue;
    }
    ++parsed;
    events_total += events.size();
    if (!events_match_lines(events, text)) {
      FAIL_CHECK("a parsed event does not match its line");
      break;
    }
    // Replay as bytegrad-replay does, on meta (the modelled H100's addresses, no memory touched) and, now
    // and then, on a small sim card so that out-of-memory happens with real pages.
    SimulatedCapacity capacity;
    const bool small_sim = rng() % 8 == 0;
    if (small_sim) capacity.total_bytes = 256 << 20, capacity.context_bytes = 8 << 20;
    CachingAllocator allocator(
        small_sim ? make_host_backed_raw_memory(capacity) : make_address_only_raw_memory(capacity), AllocatorConfig{});
    try {
      const ReplayResult result = replay_trace(events, allocator);
      ++replayed;
      CHECK(result.lines.size() >= 2);
      CHECK(result.lines.size() <= events.size() + 2);
      CHECK(result.lines.back() == "# after_empty_cache allocated=" + std::to_string(allocator.memory_allocated()) +
                                       " reserved=" + std::to_string(allocator.memory_reserved()));
    } catch (const OutOfMemoryError& e) {
      ++out_of_memory;
      const DeviceStats stats = allocator.stats();
      CHECK(stats.num_ooms + (e.segment_bytes == 0) >= 1);  // the 1 EB refusal is not counted, as in PyTorch
      CHECK(stats.allocated_bytes.all().current == allocator.memory_allocated());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("trace fuzz, seed " << seed << ": " << inputs << " inputs in " << seconds << " s: " << refused
                              << " refused with a line, " << parsed << " parsed (" << events_total << " events), "
                              << replayed << " replayed, " << out_of_memory << " out of memory");
  CHECK(refused + parsed == inputs);
  if (inputs >= 1000) {  // both outcomes are reached for any seed at the CI default and above
    CHECK(refused > 0);
    CHECK(replayed > 0);
  }
}
