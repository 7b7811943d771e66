// torch.cuda.MemPool and torch.cuda.use_mem_pool: a user's own memory pool on a device's caching allocator.
//
//   bytegrad::MemPool pool;                      // on default_device(); (0, n) ids, as PyTorch's
//   {
//     auto scope = bytegrad::use_mem_pool(pool);  // this thread's requests now go to the pool
//     auto x = bytegrad::empty({1024, 1024});     // 4 MiB block in a segment of the pool's own
//   }                                             // back to the default pools
//   pool.snapshot();                              // its segments only
//
// A pool's blocks serve only requests made inside its scopes (other threads are not affected); its segments
// count in the device's statistics like any other. While any thread is inside a scope, empty_cache leaves the
// default pools alone and an out-of-memory error comes without flushing the cache (PyTorch treats the scope
// as it treats a CUDA graph capture). Destroying the MemPool releases its free segments; segments that still
// hold live blocks stay until those are freed and empty_cache runs. use_on_oom: a request of the default
// pools that finds no room takes a free block of this pool before anything is flushed. no_split: a block
// never splits its segment (a request takes a whole segment or whole free block).
#pragma once

#include <optional>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/caching_allocator.h"

namespace bytegrad {

class MemPool {
 public:
  explicit MemPool(bool use_on_oom = false, bool no_split = false);
  explicit MemPool(Device device, bool use_on_oom = false, bool no_split = false);
  ~MemPool();
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;

  MempoolId id() const { return id_; }
  Device device() const { return device_; }
  // Its users: 1 for this object, plus one for each use_mem_pool scope open on it.
  int use_count() const;
  // Its segments, as torch.cuda.MemPool.snapshot() (memory_snapshot(pool.id)); records a snapshot entry in
  // the device's history when recording, as PyTorch's does.
  std::vector<SegmentInfo> snapshot() const;

 private:
  CachingAllocator* live_allocator() const;  // null once the device was given a new allocator

  Device device_;
  MempoolId id_;
  uint64_t allocator_id_ = 0;
};

// What use_mem_pool returns: while it lives, the calling thread's requests on the device go to the pool.
// Scopes nest; the latest open one wins. Not movable: keep it in a local variable.
class MemPoolScope {
 public:
  MemPoolScope(MemPool& pool, Device device);
  ~MemPoolScope();
  MemPoolScope(const MemPoolScope&) = delete;
  MemPoolScope& operator=(const MemPoolScope&) = delete;

 private:
  CachingAllocator* allocator_;
  uint64_t allocator_id_;
  MempoolId id_;
  Device device_;
};

// torch.cuda.use_mem_pool(pool, device): the device defaults to the pool's.
[[nodiscard]] MemPoolScope use_mem_pool(MemPool& pool, std::optional<Device> device = std::nullopt);

// A new pool id, (0, n), from the same counter MemPool uses (torch.cuda.graph_pool_handle's ids).
MempoolId graph_pool_handle();

}  // namespace bytegrad
