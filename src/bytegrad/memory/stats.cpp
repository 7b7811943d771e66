#include "bytegrad/memory/stats.h"

#include <utility>

namespace bytegrad {

namespace {

template <typename Fn>
void for_each_array(DeviceStats& stats, Fn&& fn) {
  for (StatArray* array :
       {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split, &stats.allocated_bytes,
        &stats.reserved_bytes, &stats.active_bytes, &stats.inactive_split_bytes, &stats.requested_bytes})
    for (Stat& stat : array->by_type) fn(stat);
  fn(stats.oversize_allocations);
  fn(stats.oversize_segments);
}

void add_stat(std::map<std::string, int64_t>& out, const std::string& prefix, const Stat& stat) {
  out[prefix + ".current"] = stat.current;
  out[prefix + ".peak"] = stat.peak;
  out[prefix + ".allocated"] = stat.allocated;
  out[prefix + ".freed"] = stat.freed;
}

}  // namespace

void DeviceStats::reset_peaks() {
  for_each_array(*this, [](Stat& stat) { stat.reset_peak(); });
}

void DeviceStats::reset_accumulated() {
  for_each_array(*this, [](Stat& stat) { stat.reset_accumulated(); });
  num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc = num_device_free = 0;
}

std::map<std::string, int64_t> DeviceStats::flatten() const {
  static const char* const kPoolNames[kNumStatTypes] = {"all", "small_pool", "large_pool"};
  const std::pair<const char*, const StatArray*> arrays[] = {{"allocation", &allocation},
                                                             {"segment", &segment},
                                                             {"active", &active},
                                                             {"inactive_split", &inactive_split},
                                                             {"allocated_bytes", &allocated_bytes},
                                                             {"reserved_bytes", &reserved_bytes},
                                                             {"active_bytes", &active_bytes},
                                                             {"inactive_split_bytes", &inactive_split_bytes},
                                                             {"requested_bytes", &requested_bytes}};
  std::map<std::string, int64_t> out;
  for (const auto& [name, array] : arrays)
    for (size_t type = 0; type < kNumStatTypes; ++type)
      add_stat(out, std::string(name) + "." + kPoolNames[type], array->by_type[type]);
  add_stat(out, "oversize_allocations", oversize_allocations);
  add_stat(out, "oversize_segments", oversize_segments);
  out["num_alloc_retries"] = num_alloc_retries;
  out["num_ooms"] = num_ooms;
  out["num_sync_all_streams"] = num_sync_all_streams;
  out["num_device_alloc"] = num_device_alloc;
  out["num_device_free"] = num_device_free;
  out["max_split_size"] = max_split_size;
  return out;
}

}  // namespace bytegrad
