#include "bytegrad/memory/host_work.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

namespace bytegrad {

namespace {
std::atomic<bool> thread_pool_started{false};

constexpr size_t kFirstMmapThreshold = size_t{128} << 10;
constexpr size_t kMaxMmapThreshold = size_t{32} << 20;
// The host map of the process the calling thread stands for.
struct HostMap {
  size_t mmap_threshold = kFirstMmapThreshold;
  bool device_storage_made = false;
  size_t freed_above_device = 0;
  std::unordered_map<const void*, size_t> mapped;  // own mappings above the device's regions, and their bytes
};
thread_local HostMap host_map;

size_t mapping_bytes(size_t bytes) {  // glibc's 16-byte header, whole pages
  constexpr size_t kPage = 4096;
  return (bytes + 16 + kPage - 1) / kPage * kPage;
}
}  // namespace

bool is_host_work_device(Device device) {
  return device.type == DeviceType::cpu || (device.type == DeviceType::meta && device.index >= kHostStandInMetaIndex);
}

void note_host_parallel_for(Device device, int64_t iterations, int64_t grain) {
  if (iterations > grain && iterations > 1 && is_host_work_device(device))
    thread_pool_started.store(true, std::memory_order_relaxed);
}

bool host_thread_pool_started() { return thread_pool_started.load(std::memory_order_relaxed); }

void forget_host_work() {
  thread_pool_started.store(false, std::memory_order_relaxed);
  host_map = HostMap{};
}

void note_host_block(const void* data, size_t bytes) {
  // Only blocks mapped before the device's first storage make the hole; later ones are not followed, and a
  // thread whose blocks others free keeps a bounded map.
  constexpr size_t kMostFollowed = size_t{1} << 16;
  if (data == nullptr || host_map.device_storage_made || bytes < host_map.mmap_threshold ||
      host_map.mapped.size() >= kMostFollowed)
    return;
  host_map.mapped[data] = bytes;
}

void note_host_block_freed(const void* data) {
  const auto it = host_map.mapped.find(data);
  if (it == host_map.mapped.end()) return;
  const size_t bytes = it->second;
  host_map.mapped.erase(it);
  if (bytes <= kMaxMmapThreshold) host_map.mmap_threshold = std::max(host_map.mmap_threshold, bytes);
  host_map.freed_above_device += mapping_bytes(bytes);
}

void note_device_storage() { host_map.device_storage_made = true; }

size_t host_freed_above_device() { return host_map.freed_above_device; }

}  // namespace bytegrad
