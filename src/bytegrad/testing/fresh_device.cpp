#include "bytegrad/testing/fresh_device.h"

#include <stdexcept>
#include <utility>

#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/blas_workspace.h"

namespace bytegrad::testing {

FreshDevice::FreshDevice(Device device, std::optional<SimulatedCapacity> capacity) : device_(device) {
  if (device.type != DeviceType::sim && device.type != DeviceType::meta)
    throw std::invalid_argument("FreshDevice(" + device.str() +
                                "): only a simulated device (sim or meta) can be given a fresh allocator");
  const SimulatedCapacity chosen = capacity ? *capacity : simulated_capacity(device);
  auto fresh = make_simulated_allocator(device, chosen);  // throws on a bad setting before anything changes
  fresh_ = fresh.get();
  previous_ = exchange_simulated_device(device, {std::move(fresh), chosen});
  restart_streams(device);  // nothing queued, and the first pool stream next, as in a fresh process
}

FreshDevice::~FreshDevice() {
  release_blas_workspaces(*fresh_);
  SimulatedDeviceState scoped = exchange_simulated_device(device_, std::move(previous_));
  retire_allocator(std::move(scoped.allocator));
}

}  // namespace bytegrad::testing
