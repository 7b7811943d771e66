#include "bytegrad/memory/mem_pool.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include "bytegrad/memory/device_allocators.h"

namespace bytegrad {

namespace {
CachingAllocator& pool_allocator(Device device, const char* caller) {
  if (device.type == DeviceType::cpu)
    throw std::invalid_argument(std::string(caller) +
                                ": memory pools belong to a caching allocator (cuda, sim, meta); cpu has none");
  return caching_allocator(device);
}
}  // namespace

MempoolId graph_pool_handle() {
  // User pools are (0, n), n from 1; PyTorch shares this counter between MemPool and graph_pool_handle.
  static std::atomic<uint64_t> next{1};
  return {0, next.fetch_add(1)};
}

MemPool::MemPool(bool use_on_oom, bool no_split) : MemPool(default_device(), use_on_oom, no_split) {}

MemPool::MemPool(Device device, bool use_on_oom, bool no_split) : device_(device), id_(graph_pool_handle()) {
  CachingAllocator& allocator = pool_allocator(device, "MemPool");
  allocator.create_or_incref_pool(id_);
  if (use_on_oom) allocator.set_use_on_oom(id_, true);
  if (no_split) allocator.set_no_split(id_);
  allocator_id_ = allocator.id();
}

CachingAllocator* MemPool::live_allocator() const {
  CachingAllocator& allocator = caching_allocator(device_);
  return allocator.id() == allocator_id_ ? &allocator : nullptr;
}

MemPool::~MemPool() {
  // A pool whose device was given a new allocator (testing::FreshDevice, reset_device) went with the old one.
  CachingAllocator* allocator = live_allocator();
  if (!allocator) return;
  allocator->set_use_on_oom(id_, false);  // a pool being destroyed never serves others again
  allocator->release_pool(id_);
  allocator->empty_cache(id_);
}

int MemPool::use_count() const {
  CachingAllocator* allocator = live_allocator();
  return allocator ? allocator->pool_use_count(id_) : 0;
}

std::vector<SegmentInfo> MemPool::snapshot() const {
  CachingAllocator* allocator = live_allocator();
  return allocator ? allocator->snapshot(id_).segments : std::vector<SegmentInfo>{};
}

MemPoolScope::MemPoolScope(MemPool& pool, Device device)
    : allocator_(&pool_allocator(device, "use_mem_pool")),
      allocator_id_(allocator_->id()),
      id_(pool.id()),
      device_(device) {
  allocator_->begin_allocate_to_pool(id_);
}

MemPoolScope::~MemPoolScope() {
  CachingAllocator& allocator = caching_allocator(device_);
  if (allocator.id() != allocator_id_) return;
  allocator.end_allocate_to_pool(id_);
  allocator.release_pool(id_);
}

MemPoolScope use_mem_pool(MemPool& pool, std::optional<Device> device) {
  return MemPoolScope(pool, device.value_or(pool.device()));
}

}  // namespace bytegrad
