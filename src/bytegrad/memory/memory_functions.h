// torch.cuda's memory functions, for any device with a caching allocator (cuda, sim, meta), by the same
// names: the figures of the device's allocator (caching_allocator(device)), which every tensor on it uses.
// The device defaults to default_device() (cuda where a GPU is present, else sim), as PyTorch's default to
// the current CUDA device. `cpu` is not cached: memory_allocated and max_memory_allocated report the host
// allocator's counts there; the other functions throw std::invalid_argument naming the device.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/out_of_memory.h"

namespace bytegrad {

int64_t memory_allocated(Device device = default_device());
int64_t max_memory_allocated(Device device = default_device());
int64_t memory_reserved(Device device = default_device());
int64_t max_memory_reserved(Device device = default_device());
// The peaks restart from the current figures (torch.cuda.reset_peak_memory_stats).
void reset_peak_memory_stats(Device device = default_device());
// The counters of allocations, frees, OOMs and so on restart from 0 (torch.cuda.reset_accumulated_memory_stats).
void reset_accumulated_memory_stats(Device device = default_device());
// Returns every cached free segment to the device (torch.cuda.empty_cache).
void empty_cache(Device device = default_device());
// PyTorch's 122 statistics by PyTorch's keys ("allocated_bytes.all.current", ...).
std::map<std::string, int64_t> memory_stats(Device device = default_device());
// memory_summary(device) is a report: reports/memory_summary.h.
// Caps what the allocator may reserve at fraction * the device's total memory (0..1).
void set_per_process_memory_fraction(double fraction, Device device = default_device());
// The cap as a share of the device's memory (torch.cuda.get_per_process_memory_fraction): 1.0 until one is set.
double get_per_process_memory_fraction(Device device = default_device());
// Changes the caching allocator settings of every device, between allocations, in BYTEGRAD_ALLOC_CONF's
// syntax (PyTorch's torch.cuda.memory._set_allocator_settings): later requests follow them, existing
// segments stay as they are, and allocators made later start with them. As in PyTorch, max_split_size_mb,
// roundup_power2_divisions and garbage_collection_threshold return to their defaults unless given; other keys
// keep their values unless given. per_process_memory_fraction is kept for allocators made later; an existing
// allocator's cap changes only with set_per_process_memory_fraction (as in PyTorch, which reads that key when
// it creates a device's allocator). A bad setting throws std::invalid_argument and changes nothing.
void set_allocator_settings(std::string_view settings);
// Calls `observer` whenever an allocator of any device (present or made later) is about to raise
// OutOfMemoryError (torch._C._cuda_attach_out_of_memory_observer); see OutOfMemoryNotice.
void attach_out_of_memory_observer(OutOfMemoryObserver observer);
// (free, total) bytes of the device as the driver reports them (torch.cuda.mem_get_info); sim and meta
// report their modelled card.
std::pair<int64_t, int64_t> mem_get_info(Device device = default_device());

// "4.00 MiB (4194304 B)": a figure for people, in binary units with the exact bytes beside it.
std::string human_bytes(int64_t bytes);

}  // namespace bytegrad
