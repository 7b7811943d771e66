#include "bytegrad/memory/alloc_config.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace bytegrad {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("BYTEGRAD_ALLOC_CONF: " + what); }

// Splits into words and the punctuation PyTorch's syntax uses (`:` `,` `[` `]`); whitespace is ignored.
std::vector<std::string> tokenize(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) tokens.push_back(std::move(word)), word.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == ':' || c == ',' || c == '[' || c == ']') {
      flush();
      tokens.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  flush();
  return tokens;
}

class TokenReader {
 public:
  explicit TokenReader(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}
  bool done() const { return pos_ >= tokens_.size(); }
  size_t index() const { return pos_; }  // the next token's position
  const std::string& peek() const {
    static const std::string end_marker;
    return done() ? end_marker : tokens_[pos_];
  }
  std::string next(const std::string& context) {
    if (done()) fail("missing value after " + quote_setting(context));
    return tokens_[pos_++];
  }
  void expect(const std::string& symbol, const std::string& context) {
    std::string token = next(context);
    if (token != symbol)
      fail("expected '" + symbol + "' after " + quote_setting(context) + ", found " + quote_setting(token));
  }

 private:
  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

// Numbers are read with std::from_chars: no sign, no whitespace, no locale, and an error (never a wrapped
// or bare std::out_of_range) naming the option and the text when a value does not fit.
size_t parse_size(const std::string& text, const std::string& key) {
  size_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range)
    fail("option " + key + ": " + quote_setting(text) + " is out of range (at most " +
         std::to_string(std::numeric_limits<size_t>::max()) + ")");
  if (ec != std::errc() || end != text.data() + text.size())
    fail("option " + key + " needs a non-negative integer, got " + quote_setting(text));
  return value;
}

double parse_double(const std::string& text, const std::string& key) {
  double value = 0.0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) fail("option " + key + ": " + quote_setting(text) + " is out of range");
  if (ec != std::errc() || end != text.data() + text.size())
    fail("option " + key + " needs a number, got " + quote_setting(text));
  return value;
}

// PyTorch accepts exactly "True" or "False" for every boolean option ("true" or "1" is an error there, so
// a setting that works here works under PyTorch too). `index` is the value's token position, which
// PyTorch's message gives.
bool parse_bool(const std::string& text, const std::string& key, size_t index) {
  if (text == "True") return true;
  if (text == "False") return false;
  fail("option " + key + ": Expected 'True' or 'False' at index " + std::to_string(index) +
       " in ConfigTokenizer but got " + quote_setting(text));
}

// Megabyte options share PyTorch's floor: at least the 20 MiB large-segment size.
size_t parse_mb_at_least_20(const std::string& text, const std::string& key) {
  size_t mb = parse_size(text, key);
  if (mb < 20) fail("option " + key + " is too small: " + quote_setting(text) + ", it must be at least 20");
  mb = std::min(mb, std::numeric_limits<size_t>::max() / kMiB);
  return mb * kMiB;
}

size_t slot_for_interval_mb(size_t mb) { return std::min<size_t>(std::bit_width(mb) - 1, kRoundupPower2Intervals - 1); }

void parse_roundup_power2_divisions(TokenReader& in, AllocatorConfig& config) {
  const std::string key = "roundup_power2_divisions";
  auto check_divisions = [&](size_t value) {
    if (value != 0 && !std::has_single_bit(value))
      fail("option " + key + ": the division count must be a power of two (or 0 for off), got " +
           std::to_string(value));
    return value;
  };
  if (in.peek() != "[") {  // legacy single value: every interval
    // Unlike a list entry, the single value may not be 0: it must be a power of two (as in PyTorch).
    const size_t value = parse_size(in.next(key + ":"), key);
    if (!std::has_single_bit(value))
      fail("option " + key + ": the division count must be a power of two, got " + std::to_string(value));
    config.roundup_power2_divisions.fill(value);
    return;
  }
  in.next(key);
  bool first = true;
  size_t last_slot = 0;
  while (in.peek() != "]") {
    std::string interval = in.next(key + ":[");
    in.expect(":", interval);
    size_t divisions = check_divisions(parse_size(in.next(interval + ":"), key));
    if (interval == ">") {
      // Everything above the last listed interval.
      std::fill(config.roundup_power2_divisions.begin() + std::min(last_slot + 1, kRoundupPower2Intervals),
                config.roundup_power2_divisions.end(), divisions);
    } else {
      size_t mb = parse_size(interval, key);
      if (!std::has_single_bit(mb))
        fail("option " + key + ": each interval must be a power of two in MB, got " + quote_setting(interval));
      size_t slot = slot_for_interval_mb(mb);
      if (first) {  // the first key also covers every smaller interval
        std::fill(config.roundup_power2_divisions.begin(), config.roundup_power2_divisions.begin() + slot, divisions);
        first = false;
      }
      config.roundup_power2_divisions[slot] = divisions;
      last_slot = slot;
    }
    if (in.peek() == ",") in.next(key);
    else if (in.peek() != "]")
      fail("option " + key + ": expected ',' or ']' in the list, found " + quote_setting(in.peek()));
  }
  in.next(key);  // the closing ]
}

}  // namespace

std::string quote_setting(std::string_view text) {
  constexpr size_t kMaxQuoted = 80;
  if (text.size() <= kMaxQuoted) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, kMaxQuoted)) + "...' (" + std::to_string(text.size()) + " characters)";
}

size_t AllocatorConfig::divisions_for(size_t size) const {
  // Slot i covers floor(log2(size)) == 20 + i; smaller sizes use slot 0, larger the last.
  size_t log_size = size == 0 ? 0 : std::bit_width(size) - 1;
  size_t slot = log_size > 20 ? log_size - 20 : 0;
  return roundup_power2_divisions[std::min(slot, kRoundupPower2Intervals - 1)];
}

namespace {

// Reads `text` into `config`, over whatever values it already has.
void apply_settings(AllocatorConfig& config, std::string_view text) {
  config.raw = std::string(text);
  TokenReader in(tokenize(text));
  while (!in.done()) {
    std::string key = in.next("");
    if (key == ",") continue;
    in.expect(":", key);
    if (key == "max_split_size_mb") {
      config.max_split_size = parse_mb_at_least_20(in.next(key + ":"), key);
    } else if (key == "max_non_split_rounding_mb") {
      config.max_non_split_rounding_size = parse_mb_at_least_20(in.next(key + ":"), key);
    } else if (key == "large_segment_size_mb") {
      config.large_segment_size = parse_mb_at_least_20(in.next(key + ":"), key);
    } else if (key == "roundup_power2_divisions") {
      parse_roundup_power2_divisions(in, config);
    } else if (key == "garbage_collection_threshold") {
      std::string value = in.next(key + ":");
      double threshold = parse_double(value, key);
      if (!(threshold > 0.0 && threshold < 1.0))
        fail("option " + key + " must be between 0 and 1 (exclusive), got " + quote_setting(value));
      config.garbage_collection_threshold = threshold;
    } else if (key == "expandable_segments") {
      const size_t index = in.index();
      config.expandable_segments = parse_bool(in.next(key + ":"), key, index);
    } else if (key == "backend") {
      std::string value = in.next(key + ":");
      if (value != "native")
        fail("option backend:" + quote_setting(value) +
             " is not supported; bytegrad implements the native caching allocator");
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
               key == "pinned_use_background_threads" || key == "graph_capture_record_stream_reuse") {
      const size_t index = in.index();
      parse_bool(in.next(key + ":"), key, index);  // accepted for compatibility; no effect on device accounting
    } else if (key == "pinned_num_register_threads") {
      // Host pinned memory: no effect here, but PyTorch's rule (a power of two, at most 128) holds.
      const std::string value = in.next(key + ":");
      const size_t threads = parse_size(value, key);
      if (!std::has_single_bit(threads))
        fail("option " + key + ": Number of register threads has to be power of 2, got " + quote_setting(value));
      if (threads > 128)
        fail("option " + key + ": Number of register threads should be less than or equal to 128, got " +
             quote_setting(value));
    } else if (key == "pinned_reserve_segment_size_mb") {
      const std::string value = in.next(key + ":");  // host pinned memory: no effect here, PyTorch's rule holds
      if (parse_size(value, key) == 0)
        fail("option " + key + ": Pinned reserve segment size has to be greater than 0, got " + quote_setting(value));
    } else if (key == "per_process_memory_fraction") {
      const std::string value = in.next(key + ":");
      const double fraction = parse_double(value, key);
      if (!(fraction >= 0.0 && fraction <= 1.0))
        fail("option " + key + ": per_process_memory_fraction is invalid, set it in [0.0, 1.0], got " +
             quote_setting(value));
      config.per_process_memory_fraction = fraction;
    } else {
      fail("unrecognized option " + quote_setting(key));
    }
    if (!in.done() && in.peek() != ",")
      fail("expected ',' after option " + key + ", found " + quote_setting(in.peek()));
  }
}

}  // namespace

AllocatorConfig AllocatorConfig::parse(std::string_view text) {
  AllocatorConfig config;
  apply_settings(config, text);
  return config;
}

AllocatorConfig AllocatorConfig::updated(const AllocatorConfig& current, std::string_view text) {
  AllocatorConfig config = current;
  const AllocatorConfig defaults;
  config.max_split_size = defaults.max_split_size;
  config.roundup_power2_divisions = defaults.roundup_power2_divisions;
  config.garbage_collection_threshold = defaults.garbage_collection_threshold;
  apply_settings(config, text);
  return config;
}

AllocatorConfig AllocatorConfig::from_environment() {
  const char* text = std::getenv("BYTEGRAD_ALLOC_CONF");
  return text ? parse(text) : AllocatorConfig{};
}

}  // namespace bytegrad
