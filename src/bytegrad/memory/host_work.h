// Host work before the first kernel launch, noted process-wide: it decides where the regions reserved before
// that launch go (EarlyRegions, raw_memory.h). PyTorch's at::parallel_for runs a loop of n iterations on its
// intra-op thread pool when n > grain and n > 1 (and more than one thread is allowed); the pool's threads each
// map a glibc malloc arena, 128 MiB apart, and the driver later fills the holes between them
// (docs/evidence/host_map/README.md: torch.ones(1024, 1024) or tril before `.to()` moves GPT-2 small's regions
// into host holes; the same on one thread, or ones(64, 64), moves none). Elementwise ops loop over elements
// with grain 32768 (at::internal::GRAIN_SIZE); tril and triu over matrices, then rows, with grain 0
// (TriangularOps.cpp), so any causal mask of two or more rows starts the pool. Random fills run serially in
// PyTorch and are not noted. The thread count is not consulted: the figures are the recording host's, whose
// PyTorch ran with many threads (torch.set_num_threads(1) is not modelled).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytegrad/core/device.h"

namespace bytegrad {

inline constexpr int64_t kElementwiseGrain = 32768;

// A meta device with at least this index stands for the host: programs measured on meta build their model
// there (no arithmetic) where PyTorch builds it on the CPU, so host work done there counts as the CPU's.
inline constexpr int kHostStandInMetaIndex = 100;

// Whether work on `device` is the host's (cpu, or a meta device standing for it).
bool is_host_work_device(Device device);

// A parallel_for of `iterations` with `grain` ran on `device` (noted only where that is the host's work).
void note_host_parallel_for(Device device, int64_t iterations, int64_t grain);
// Whether host work since the process (or the last forget_host_work) started would have started PyTorch's
// CPU thread pool.
bool host_thread_pool_started();
// As in a fresh process: devices given a fresh allocator on purpose (configure, reset, exchange) call it.
void forget_host_work();

// The host's address map above the device's regions (docs/status.md, "the parameters .to() frees"): glibc
// maps a block of at least its mmap threshold (128 KiB, raised to the size of each such block freed, up to
// 32 MiB) on its own and unmaps it when freed. Blocks mapped before the process's first device storage lie
// above the driver's regions, one after another, so what is freed of them is one growing hole there, which
// the driver's top-down reservations take once it holds one (virtual_address_space.h). Kept per thread: a
// thread stands for a process (the threads backend runs each rank on its own).
// A host block `data` of `bytes` was allocated, or freed (blocks allocated on another thread, or after the
// thread's first device storage, are not followed: only the blocks above the device's regions make the hole).
void note_host_block(const void* data, size_t bytes);
void note_host_block_freed(const void* data);
// A device storage was made: blocks mapped later lie below the device's regions.
void note_device_storage();
// Bytes (whole mappings) freed so far of the host blocks mapped above the device's regions.
size_t host_freed_above_device();

}  // namespace bytegrad
