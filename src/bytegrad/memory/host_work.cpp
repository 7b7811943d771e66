#include "bytegrad/memory/host_work.h"

#include <atomic>

namespace bytegrad {

namespace {
std::atomic<bool> thread_pool_started{false};
}  // namespace

bool is_host_work_device(Device device) {
  return device.type == DeviceType::cpu || (device.type == DeviceType::meta && device.index >= kHostStandInMetaIndex);
}

void note_host_parallel_for(Device device, int64_t iterations, int64_t grain) {
  if (iterations > grain && iterations > 1 && is_host_work_device(device))
    thread_pool_started.store(true, std::memory_order_relaxed);
}

bool host_thread_pool_started() { return thread_pool_started.load(std::memory_order_relaxed); }

void forget_host_work() { thread_pool_started.store(false, std::memory_order_relaxed); }

}  // namespace bytegrad
