// The configuration fuzzers: BYTEGRAD_ALLOC_CONF text (AllocatorConfig::parse) and CUBLAS_WORKSPACE_CONFIG
// text (set_blas_workspace_config), built from each grammar's tokens, from mutated valid settings and from
// random bytes, sometimes very long. Every input gives either a configuration that obeys the rules (checked
// here against values computed independently where the text is known to be valid) or std::invalid_argument
// whose message names the variable and a key or value of the input, quoting a bounded excerpt of it.
#include <doctest/doctest.h>

#include <bit>
#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "tests/fuzz/fuzz_support.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// Longest message a refusal may have: the fixed text plus bounded quotes, whatever the input's length.
constexpr size_t kMaxMessage = 600;

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() % 256);
  return s;
}

// Applies a few random edits to `text`: flip, insert a token, delete, duplicate, or a long run.
std::string mutate(std::mt19937& rng, std::string text, const std::vector<std::string>& tokens) {
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int round = 0; round < rounds; ++round) {
    const size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!text.empty()) text[rng() % text.size()] = static_cast<char>(rng() % 256);
        break;
      case 1: text.insert(at, tokens[rng() % tokens.size()]); break;
      case 2: text.erase(at, rng() % 8); break;
      case 3: text.insert(at, text.substr(at, rng() % 16)); break;
      case 4: text.insert(at, std::string(100 + rng() % 20000, "9a:,["[rng() % 5])); break;
      default: text.resize(at); break;
    }
  }
  return text;
}

// ------------------------------------------------------------------------------------ BYTEGRAD_ALLOC_CONF

const std::vector<std::string> kAllocTokens = {"max_split_size_mb",
                                               "max_non_split_rounding_mb",
                                               "large_segment_size_mb",
                                               "roundup_power2_divisions",
                                               "garbage_collection_threshold",
                                               "expandable_segments",
                                               "backend",
                                               "release_lock_on_cudamalloc",
                                               "pinned_num_register_threads",
                                               "pinned_use_cuda_host_register",
                                               "unknown_key",
                                               ":",
                                               ":",
                                               ",",
                                               ",",
                                               "[",
                                               "]",
                                               ">",
                                               " ",
                                               "0",
                                               "1",
                                               "2",
                                               "3",
                                               "4",
                                               "19",
                                               "20",
                                               "21",
                                               "64",
                                               "1024",
                                               "4096",
                                               "18446744073709551615",
                                               "18446744073709551616",
                                               "99999999999999999999999",
                                               "-1",
                                               "0.5",
                                               "1.0",
                                               "0.0",
                                               "1e-3",
                                               "nan",
                                               "inf",
                                               "True",
                                               "False",
                                               "native",
                                               "cudaMallocAsync"};

// The tokens the parser splits text into (whitespace dropped; ':' ',' '[' ']' on their own).
std::vector<std::string> alloc_tokens_of(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == ':' || c == ',' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(word), word.clear();
      tokens.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  if (!word.empty()) tokens.push_back(word);
  return tokens;
}

std::string random_alloc_text(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0: {  // token soup
      std::string text;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) text += kAllocTokens[rng() % kAllocTokens.size()];
      return text;
    }
    case 1: return random_bytes(rng, rng() % 40);
    default: return mutate(rng, random_alloc_conf(rng).text, kAllocTokens);
  }
}

bool obeys_the_rules(const AllocatorConfig& c) {
  const size_t floor = 20 * kMiB;
  for (size_t d : c.roundup_power2_divisions)
    if (d != 0 && !std::has_single_bit(d)) return false;
  return c.max_split_size >= floor && c.max_non_split_rounding_size >= floor && c.large_segment_size >= floor &&
         (c.garbage_collection_threshold == 0.0 ||
          (c.garbage_collection_threshold > 0.0 && c.garbage_collection_threshold < 1.0));
}

bool same_settings(const AllocatorConfig& a, const AllocatorConfig& b) {
  return a.max_split_size == b.max_split_size && a.max_non_split_rounding_size == b.max_non_split_rounding_size &&
         a.large_segment_size == b.large_segment_size && a.roundup_power2_divisions == b.roundup_power2_divisions &&
         a.garbage_collection_threshold == b.garbage_collection_threshold;
}

// ---------------------------------------------------------------------------------- CUBLAS_WORKSPACE_CONFIG

const std::vector<std::string> kWorkspaceTokens = {":",
                                                   ":",
                                                   ":",
                                                   "0",
                                                   "1",
                                                   "2",
                                                   "8",
                                                   "16",
                                                   "4096",
                                                   "4096:8",
                                                   ":0:0",
                                                   ":4096:8",
                                                   ":16:8",
                                                   "18014398509481984",
                                                   "18446744073709551615",
                                                   "99999999999999999999",
                                                   "-",
                                                   " ",
                                                   "a",
                                                   "::",
                                                   ",",
                                                   "00"};

// The workspace bytes the text asks for: PyTorch's ":SIZE:COUNT" pairs found left to right (SIZE in KiB),
// summed; std::nullopt when the sum does not fit in 64 bits; `fallback` when there is no pair.
std::optional<size_t> expected_workspace_bytes(const std::string& text, size_t fallback) {
  auto digits_at = [&](size_t i) {
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    return j;
  };
  auto value_of = [](std::string_view digits) -> std::optional<unsigned __int128> {
    unsigned __int128 v = 0;
    for (char c : digits) {
      v = v * 10 + static_cast<unsigned>(c - '0');
      if (v > std::numeric_limits<size_t>::max()) return std::nullopt;
    }
    return v;
  };
  unsigned __int128 total = 0;
  bool matched = false;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == ':') {
      const size_t a = digits_at(i + 1);
      if (a > i + 1 && a < text.size() && text[a] == ':') {
        const size_t b = digits_at(a + 1);
        if (b > a + 1) {
          matched = true;
          const auto kib = value_of(std::string_view(text).substr(i + 1, a - i - 1));
          const auto count = value_of(std::string_view(text).substr(a + 1, b - a - 1));
          if (!kib || !count) return std::nullopt;
          total += *kib * 1024 * *count;  // < 2^64 * 1024 * 2^64: fits; checked against 2^64 below
          if (*kib * 1024 > std::numeric_limits<size_t>::max() ||
              (*count != 0 && *kib * 1024 * *count > std::numeric_limits<size_t>::max()) ||
              total > std::numeric_limits<size_t>::max())
            return std::nullopt;
          i = b;
          continue;
        }
      }
    }
    ++i;
  }
  return matched ? std::optional<size_t>(static_cast<size_t>(total)) : std::optional<size_t>(fallback);
}

// set_blas_workspace_config's rule: the whole text is one or more ":SIZE:COUNT" pairs (digits only).
bool whole_text_is_pairs(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    for (int number = 0; number < 2; ++number) {
      if (i >= text.size() || text[i] != ':') return false;
      const size_t start = ++i;
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
      if (i == start) return false;
    }
  }
  return !text.empty();
}

std::string random_workspace_text(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0: {
      std::string text;
      const int n = 1 + static_cast<int>(rng() % 10);
      for (int i = 0; i < n; ++i) text += kWorkspaceTokens[rng() % kWorkspaceTokens.size()];
      return text;
    }
    case 1: return random_bytes(rng, rng() % 30);
    default: {
      std::string text;
      const int pairs = static_cast<int>(rng() % 4);
      for (int i = 0; i < pairs; ++i)
        text += ":" + std::to_string(rng() % 2 ? rng() % 8192 : rng()) + ":" + std::to_string(rng() % 16);
      return mutate(rng, text, kWorkspaceTokens);
    }
  }
}

}  // namespace

TEST_CASE("fuzz: BYTEGRAD_ALLOC_CONF parsing") {
  const uint64_t inputs = fuzz_iterations("CONFIG", 50000);
  const uint64_t seed = fuzz_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed) ^ 0xc0f);
  const auto start = std::chrono::steady_clock::now();
  uint64_t valid = 0, accepted = 0, refused = 0;
  for (uint64_t i = 0; i < inputs; ++i) {
    // One in four inputs is a valid setting whose values are known; the rest are anything.
    const bool known_valid = rng() % 4 == 0;
    const GeneratedAllocConf generated = known_valid ? random_alloc_conf(rng) : GeneratedAllocConf{};
    const std::string text = known_valid ? generated.text : random_alloc_text(rng);
    INFO("seed " << seed << ", input " << i << ": " << quote_setting(text));
    try {
      const AllocatorConfig config = AllocatorConfig::parse(text);
      ++accepted;
      if (!(config.raw == text && obeys_the_rules(config) && same_settings(config, AllocatorConfig::parse(text)))) {
        FAIL_CHECK("a parsed configuration breaks a rule, or parsing it again differs");
        break;
      }
      if (known_valid) {
        ++valid;
        if (!same_settings(config, generated.expected)) {
          FAIL_CHECK("a valid setting parsed to other values");
          break;
        }
      }
    } catch (const std::invalid_argument& e) {
      ++refused;
      const std::string message = e.what();
      bool names_input = false;
      // what() is a C string: a quoted NUL byte ends it, so only the token's text before one can appear.
      for (const std::string& token : alloc_tokens_of(text))
        if (message.find(token.substr(0, std::min<size_t>(40, token.find('\0')))) != std::string::npos)
          names_input = true;
      if (known_valid || message.rfind("BYTEGRAD_ALLOC_CONF: ", 0) != 0 || !names_input ||
          message.size() > kMaxMessage) {
        FAIL_CHECK("a bad refusal: " << message.substr(0, 2 * kMaxMessage) << " (" << message.size() << " characters)");
        break;
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("BYTEGRAD_ALLOC_CONF fuzz, seed " << seed << ": " << inputs << " inputs in " << seconds << " s: " << accepted
                                            << " parsed (" << valid << " known valid, values checked), " << refused
                                            << " refused");
  CHECK(accepted + refused == inputs);
  if (inputs >= 1000) CHECK(refused > 0);
}

TEST_CASE("fuzz: CUBLAS_WORKSPACE_CONFIG parsing (set_blas_workspace_config)") {
  const uint64_t inputs = fuzz_iterations("CONFIG", 50000);
  const uint64_t seed = fuzz_seed();
  std::mt19937 rng(static_cast<uint32_t>(seed) ^ 0xb1a5);
  const size_t default_bytes = [] {
    set_blas_workspace_config(std::nullopt);
    return blas_workspace_bytes(kMeta);
  }();
  const auto start = std::chrono::steady_clock::now();
  uint64_t accepted = 0, refused = 0;
  for (uint64_t i = 0; i < inputs; ++i) {
    const std::string text = random_workspace_text(rng);
    INFO("seed " << seed << ", input " << i << ": " << quote_setting(text));
    const size_t before = blas_workspace_bytes(kMeta);
    const std::optional<size_t> expected =
        whole_text_is_pairs(text) ? expected_workspace_bytes(text, default_bytes) : std::nullopt;
    try {
      set_blas_workspace_config(text);
      ++accepted;
      if (!expected || blas_workspace_bytes(kMeta) != *expected) {
        FAIL_CHECK("accepted with " << blas_workspace_bytes(kMeta) << " bytes; expected "
                                    << (expected ? std::to_string(*expected) : std::string("a refusal")));
        break;
      }
    } catch (const std::invalid_argument& e) {
      ++refused;
      const std::string message = e.what();
      if (expected || message.rfind("CUBLAS_WORKSPACE_CONFIG=", 0) != 0 || message.size() > kMaxMessage ||
          blas_workspace_bytes(kMeta) != before) {
        FAIL_CHECK("a bad refusal (the previous setting must stay): " << message.substr(0, 2 * kMaxMessage) << " ("
                                                                      << message.size() << " characters)");
        break;
      }
    }
  }
  set_blas_workspace_config(std::nullopt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("CUBLAS_WORKSPACE_CONFIG fuzz, seed " << seed << ": " << inputs << " inputs in " << seconds << " s: "
                                                << accepted << " accepted (bytes checked), " << refused << " refused");
  CHECK(accepted + refused == inputs);
  if (inputs >= 1000) CHECK(refused > 0);
}
