#include "programs/card.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "bytegrad/memory/raw_memory.h"

namespace bytegrad::programs {

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// Cards whose totals PyTorch reported on the machines the recordings come from.
struct KnownCard {
  const char* name;
  const char* alias;
  int64_t total_bytes;
  const char* source;
};
constexpr KnownCard kKnownCards[] = {
    {"H100-80GB", "H100", static_cast<int64_t>(kSimDefaultTotalBytes), "the goldens' H100, shared/golden"},
    {"H200-141GB", "H200", 150109880320, "tests/data/pytorch_probes/cuda_context.json"},
};

}  // namespace

int64_t parse_byte_size(const std::string& option, const std::string& text) {
  const std::string expected =
      option +
      " needs a size such as 24GB or 24GiB (B, KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: of 1024), got '" +
      text + "'";
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0) throw std::invalid_argument(expected);
  if (!std::isfinite(number)) throw std::invalid_argument(option + " '" + text + "' is not a finite size");
  if (number <= 0) throw std::invalid_argument(option + " '" + text + "' is not a positive size");
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(unit.begin());
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},      {"b", 1},        {"kb", 1e3},        {"mb", 1e6},           {"gb", 1e9},
      {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  double scale = 0;
  for (const auto& [name, factor] : kUnits)
    if (lower(unit) == name) scale = factor;
  if (scale == 0) {
    const std::string u = lower(unit);
    if (u == "k" || u == "m" || u == "g" || u == "t")
      throw std::invalid_argument(fmt::format(
          "{} '{}': '{}' is ambiguous; write {}B (powers of 1000) or {}iB (of 1024)", option, text, unit, unit, unit));
    throw std::invalid_argument(option + ": unknown unit '" + unit + "' in '" + text +
                                "' (B, KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: of 1024)");
  }
  const double bytes = std::floor(number * scale);
  if (bytes < 1) throw std::invalid_argument(option + " '" + text + "' is less than one byte");
  // 2^63 is the first double past int64's range.
  if (!(bytes < 9223372036854775808.0))
    throw std::invalid_argument(option + " '" + text + "' is more bytes than int64 can count (at most 2^63 - 1)");
  return static_cast<int64_t>(bytes);
}

Card parse_card(const std::string& text) {
  Card card{text, 0, static_cast<int64_t>(kCudaDriverShareBytes)};
  for (const KnownCard& known : kKnownCards)
    if (lower(text) == lower(known.name) || lower(text) == lower(known.alias)) card.total_bytes = known.total_bytes;
  if (card.total_bytes == 0) {
    try {
      card.total_bytes = parse_byte_size("--card", text);
    } catch (const std::invalid_argument& e) {
      std::string names;
      for (const KnownCard& known : kKnownCards) names += fmt::format(", {}", known.name);
      throw std::invalid_argument(fmt::format("{} (or a card: {})", e.what(), names.substr(2)));
    }
  }
  if (card.total_bytes <= card.driver_bytes)
    throw std::invalid_argument(fmt::format(
        "--card '{}' ({} bytes) is no larger than what the CUDA driver keeps on a card ({} bytes): nothing is left "
        "for PyTorch",
        text, card.total_bytes, card.driver_bytes));
  return card;
}

std::string card_help() {
  std::string known;
  for (const KnownCard& k : kKnownCards)
    known += fmt::format("                         {} (or {}): {} bytes total ({})\n", k.name, k.alias, k.total_bytes,
                         k.source);
  return fmt::format(
      "  --card SIZE|NAME       the card to fit on: SIZE is its total memory as its maker states it (24GB, 16GB,\n"
      "                         40GB, 80GB), of which the CUDA context and the driver's share ({} bytes,\n"
      "                         measured with PyTorch 2.11: context, first kernel launches, cuBLAS) are taken off;\n"
      "                         adds `fits yes|no`. Or a card PyTorch reported the total of:\n{}",
      kCudaDriverShareBytes, known);
}

}  // namespace bytegrad::programs
