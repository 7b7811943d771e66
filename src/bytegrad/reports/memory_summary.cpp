#include "bytegrad/reports/memory_summary.h"

#include <fmt/format.h>

#include <stdexcept>

#include <array>
#include <vector>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/outside_allocator.h"

namespace bytegrad {

namespace {

int64_t get(const std::map<std::string, int64_t>& stats, const std::string& key) {
  auto it = stats.find(key);
  return it == stats.end() ? 0 : it->second;
}

// Bytes: step to the next unit while the reference value is at least 768 of the current one.
std::string format_bytes(int64_t value, int64_t reference) {
  static const std::array<const char*, 6> units = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  double ref = static_cast<double>(reference);
  while (unit + 1 < units.size() && ref >= 768 * 1024) {
    ++unit;
    value /= 1024;  // non-negative, so truncation is Python's floor division
    ref /= 1024;
  }
  return fmt::format("{:6d} {}", value, units[unit]);
}

// Counts: step to the next unit while the reference value is at least 750 thousand.
std::string format_count(int64_t value, int64_t reference) {
  static const std::array<const char*, 3> units = {" ", "K", "M"};
  size_t unit = 0;
  double ref = static_cast<double>(reference);
  while (unit + 1 < units.size() && ref >= 750 * 1000) {
    ++unit;
    value /= 1000;
    ref /= 1000;
  }
  return fmt::format("{:7d} {} ", value, units[unit]);
}

using Formatter = std::string (*)(int64_t, int64_t);

}  // namespace

std::string format_memory_summary(const std::map<std::string, int64_t>& stats, int device_index, bool abbreviated) {
  static constexpr const char* kFields[4] = {"current", "peak", "allocated", "freed"};
  const std::string rule(75, '-');
  const std::string double_rule(75, '=');
  std::vector<std::string> lines;
  lines.push_back(double_rule);
  lines.push_back(fmt::format(" {:16} PyTorch CUDA memory summary, device ID {:<17d} ", "", device_index));
  lines.push_back(rule);
  lines.push_back(fmt::format("  {:9} CUDA OOMs: {:<12d} | {:6} cudaMalloc retries: {:<8d}  ", "",
                              get(stats, "num_ooms"), "", get(stats, "num_alloc_retries")));
  lines.push_back(double_rule);
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  struct Metric {
    const char* key;
    const char* name;
    Formatter format;
  };
  static const Metric kPoolMetrics[] = {
      {"allocated_bytes", "Allocated memory", format_bytes},
      {"active_bytes", "Active memory", format_bytes},
      {"requested_bytes", "Requested memory", format_bytes},
      {"reserved_bytes", "GPU reserved memory", format_bytes},
      {"inactive_split_bytes", "Non-releasable memory", format_bytes},
      {"allocation", "Allocations", format_count},
      {"active", "Active allocs", format_count},
      {"segment", "GPU reserved segments", format_count},
      {"inactive_split", "Non-releasable allocs", format_count},
  };
  auto row = [&](const std::string& name, const std::string& prefix, Formatter format, const std::string& unit_prefix) {
    std::string line = fmt::format(" {:<21} ", name);
    for (const char* field : kFields)
      line += "| " + format(get(stats, prefix + field), get(stats, unit_prefix + field)) + " ";
    lines.push_back(line);
  };
  for (const Metric& metric : kPoolMetrics) {
    lines.push_back(rule);
    const std::string all = std::string(metric.key) + ".all.";
    row(metric.name, all, metric.format, all);
    if (!abbreviated) {
      row("      from large pool", std::string(metric.key) + ".large_pool.", metric.format, all);
      row("      from small pool", std::string(metric.key) + ".small_pool.", metric.format, all);
    }
  }
  static const Metric kSingleMetrics[] = {
      {"oversize_allocations", "Oversize allocations", format_count},
      {"oversize_segments", "Oversize GPU segments", format_count},
  };
  for (const Metric& metric : kSingleMetrics) {
    lines.push_back(rule);
    const std::string prefix = std::string(metric.key) + ".";
    row(metric.name, prefix, metric.format, prefix);
  }
  lines.push_back(double_rule);

  std::string out;
  for (const std::string& line : lines) out += "|" + line + "|\n";
  return out;
}

std::string memory_summary(const CachingAllocator& allocator, bool abbreviated) {
  return format_memory_summary(allocator.memory_stats(), allocator.device_index(), abbreviated);
}

std::string memory_summary(Device device, bool abbreviated) {
  if (!device.uses_caching_allocator())
    throw std::invalid_argument(fmt::format(
        "memory_summary({}): {} memory is not cached; use a cuda, sim or meta device", device.str(), device.str()));
  std::string summary = memory_summary(caching_allocator(device), abbreviated);
  // Apart from the table (whose figures are the allocator's): NCCL's memory when a group has figures here.
  if (const std::string outside = outside_allocator_line(device); !outside.empty()) summary += outside + "\n";
  return summary;
}

}  // namespace bytegrad
