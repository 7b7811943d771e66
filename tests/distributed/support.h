// Helpers of the distributed suite: fresh allocators for every rank's device, and each rank's findings
// gathered for the main thread to assert (doctest's checks stay on the test's own thread).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/threads.h"
#include "bytegrad/testing/fresh_device.h"
#include "tests/support/error_text.h"

namespace bytegrad::testing {

// The card the suite's devices model: 16 GiB instead of the H100's 80, so that a sim device reserves
// 64 GiB of address space rather than four times the card. Several sim devices at once would otherwise
// exhaust what ThreadSanitizer leaves a program (./test.sh --thread-sanitize). No figure here depends on it.
inline SimulatedCapacity small_card() {
  SimulatedCapacity capacity;
  capacity.total_bytes = size_t{16} << 30;
  return capacity;
}

// An empty allocator, and the stream pool's round robin at its start, on each rank's device (sim:r or
// meta:r) for the scope; nothing for cpu.
class FreshRankDevices {
 public:
  FreshRankDevices(int world_size, DeviceType type) {
    if (type == DeviceType::cpu) return;
    for (int r = 0; r < world_size; ++r)
      fresh_.push_back(std::make_unique<FreshDevice>(distributed::threads_rank_device(type, r), small_card()));
  }

 private:
  std::vector<std::unique_ptr<FreshDevice>> fresh_;
};

// The distributed probes' figures (tools/probes/ddp_probe.py, fsdp_probe.py) and the memory_stats keys
// they come from.
inline const std::vector<std::pair<const char*, const char*>>& probe_figure_keys() {
  static const std::vector<std::pair<const char*, const char*>> keys = {
      {"allocated", "allocated_bytes.all.current"},
      {"reserved", "reserved_bytes.all.current"},
      {"max_allocated", "allocated_bytes.all.peak"},
      {"max_reserved", "reserved_bytes.all.peak"},
      {"active", "active_bytes.all.current"},
      {"segments", "segment.all.current"},
      {"blocks", "allocation.all.current"},
      {"requested", "requested_bytes.all.current"},
      {"inactive_split", "inactive_split_bytes.all.current"},
      {"num_device_alloc", "num_device_alloc"},
      {"num_device_free", "num_device_free"}};
  return keys;
}

}  // namespace bytegrad::testing
