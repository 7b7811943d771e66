#include "bytegrad/reports/memory_ledger.h"

#include <fmt/format.h>

#include "bytegrad/memory/memory_functions.h"

namespace bytegrad {

namespace {

std::string category_table(const CategoryBytes& bytes, int64_t total) {
  std::string text;
  for (MemoryCategory c : kMemoryCategories) {
    const int64_t b = bytes[static_cast<size_t>(c)];
    text += fmt::format("  {:<20} {:>26}  {:5.1f}%\n", category_name(c), human_bytes(b),
                        total > 0 ? 100.0 * static_cast<double>(b) / static_cast<double>(total) : 0.0);
  }
  return text;
}

std::string block_table(const std::vector<LedgerBlock>& blocks) {
  std::string text;
  for (const LedgerBlock& b : blocks)
    text += fmt::format("  {:>26}  {:<18}  {}\n", human_bytes(b.bytes), category_name(b.category), b.owner);
  return text;
}

}  // namespace

MemoryLedger memory_ledger(Device device, size_t largest) {
  CachingAllocator& allocator = caching_allocator(device);
  MemoryLedger ledger;
  ledger.device = device;
  const std::map<std::string, int64_t> stats = allocator.memory_stats();
  ledger.bytes = allocator.category_bytes();
  ledger.largest = allocator.largest_blocks(largest);
  ledger.allocated = stats.at("allocated_bytes.all.current");
  ledger.requested = stats.at("requested_bytes.all.current");
  ledger.rounding = ledger.allocated - ledger.requested;
  ledger.reserved = stats.at("reserved_bytes.all.current");
  ledger.cached_free = ledger.reserved - ledger.allocated;
  ledger.cached_in_split_segments = stats.at("inactive_split_bytes.all.current");
  ledger.cached_whole_segments = ledger.cached_free - ledger.cached_in_split_segments;
  const RawMemory::Info info = allocator.mem_get_info();
  ledger.device_total = static_cast<int64_t>(info.total);
  ledger.device_free = static_cast<int64_t>(info.free);
  ledger.outside_allocator = ledger.device_total - ledger.device_free - ledger.reserved;
  ledger.nccl = outside_allocator_figures(device);
  return ledger;
}

std::string MemoryLedger::str() const {
  std::string text = fmt::format("memory ledger of {}: allocated {}\n", device.str(), human_bytes(allocated));
  text += category_table(bytes, allocated);
  text += fmt::format("reserved {} = allocated {}\n", human_bytes(reserved), human_bytes(allocated));
  text += fmt::format("  of which requested {} and rounding {}\n", human_bytes(requested), human_bytes(rounding));
  text += fmt::format(
      "  + cached free {}: {} in segments with live blocks (empty_cache cannot return it), "
      "{} in whole free segments\n",
      human_bytes(cached_free), human_bytes(cached_in_split_segments), human_bytes(cached_whole_segments));
  text +=
      fmt::format("device {}: reserved {}, driver context and other holders {}, free {}\n", human_bytes(device_total),
                  human_bytes(reserved), human_bytes(outside_allocator), human_bytes(device_free));
  if (nccl) text += outside_allocator_line(*nccl, outside_allocator) + "\n";
  if (!largest.empty()) text += "largest live blocks:\n" + block_table(largest);
  return text;
}

std::ostream& operator<<(std::ostream& out, const MemoryLedger& ledger) { return out << ledger.str(); }

PeakReport peak_report(Device device) {
  return {device, caching_allocator(device).peak_record(), outside_allocator_line(device)};
}

std::string PeakReport::str() const {
  std::string text = fmt::format("peak of {}: allocated {} during {}\n", device.str(), human_bytes(record.allocated),
                                 phase_name(record.phase));
  text += category_table(record.bytes, record.allocated);
  if (!outside_allocator.empty()) text += outside_allocator + "\n";
  if (!record.largest.empty()) text += "largest live blocks at the peak:\n" + block_table(record.largest);
  return text;
}

std::ostream& operator<<(std::ostream& out, const PeakReport& report) { return out << report.str(); }

}  // namespace bytegrad
