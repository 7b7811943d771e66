#include "bytegrad/memory/memory_functions.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

namespace bytegrad {

namespace {

// The device's caching allocator; cpu has none, so `what` names the function that needs one.
CachingAllocator& cached_device(Device device, const char* what) {
  if (!device.uses_caching_allocator())
    throw std::invalid_argument(fmt::format("{}({}): {} memory is not cached; use a cuda, sim or meta device", what,
                                            device.str(), device.str()));
  return caching_allocator(device);
}

}  // namespace

int64_t memory_allocated(Device device) {
  if (device.type == DeviceType::cpu) return host_allocator().memory_allocated();
  return caching_allocator(device).memory_allocated();
}

int64_t max_memory_allocated(Device device) {
  if (device.type == DeviceType::cpu) return host_allocator().max_memory_allocated();
  return caching_allocator(device).max_memory_allocated();
}

int64_t memory_reserved(Device device) { return cached_device(device, "memory_reserved").memory_reserved(); }

int64_t max_memory_reserved(Device device) {
  return cached_device(device, "max_memory_reserved").max_memory_reserved();
}

void reset_peak_memory_stats(Device device) { cached_device(device, "reset_peak_memory_stats").reset_peak_stats(); }

void reset_accumulated_memory_stats(Device device) {
  cached_device(device, "reset_accumulated_memory_stats").reset_accumulated_stats();
}

void empty_cache(Device device) { cached_device(device, "empty_cache").empty_cache(); }

std::map<std::string, int64_t> memory_stats(Device device) {
  return cached_device(device, "memory_stats").memory_stats();
}

void set_per_process_memory_fraction(double fraction, Device device) {
  cached_device(device, "set_per_process_memory_fraction").set_memory_fraction(fraction);
}

double get_per_process_memory_fraction(Device device) {
  return cached_device(device, "get_per_process_memory_fraction").memory_fraction();
}

std::pair<int64_t, int64_t> mem_get_info(Device device) {
  const RawMemory::Info info = cached_device(device, "mem_get_info").mem_get_info();
  return {static_cast<int64_t>(info.free), static_cast<int64_t>(info.total)};
}

std::string human_bytes(int64_t bytes) {
  const uint64_t magnitude = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  if (magnitude < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double scaled = static_cast<double>(magnitude) / 1024;
  int unit = 0;
  while (scaled >= 1024 && unit < 5) {
    scaled /= 1024;
    ++unit;
  }
  return fmt::format("{}{:.2f} {} ({} B)", bytes < 0 ? "-" : "", scaled, kUnits[unit], bytes);
}

}  // namespace bytegrad
