// Helpers of the distributed suite: fresh allocators for every rank's device, and each rank's findings
// gathered for the main thread to assert (doctest's checks stay on the test's own thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/distributed/threads.h"
#include "bytegrad/testing/fresh_device.h"

namespace bytegrad::testing {

// An empty allocator, and the stream pool's round robin at its start, on each rank's device (sim:r or
// meta:r) for the scope; nothing for cpu.
class FreshRankDevices {
 public:
  FreshRankDevices(int world_size, DeviceType type) {
    if (type == DeviceType::cpu) return;
    for (int r = 0; r < world_size; ++r)
      fresh_.push_back(std::make_unique<FreshDevice>(distributed::threads_rank_device(type, r)));
  }

 private:
  std::vector<std::unique_ptr<FreshDevice>> fresh_;
};

// What a test's body throws inside a rank, as text (empty when nothing was thrown).
template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace bytegrad::testing
