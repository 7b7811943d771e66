// Export to PyTorch's memory viewer (https://pytorch.org/memory_viz, torch/utils/viz/MemoryViz.js): the
// dict that torch.cuda.memory._snapshot() returns, written as JSON, which the viewer reads as it reads
// PyTorch's own pickles (shared/reference/memory-viz-format.md). Drop the file on the page to get the
// "Active Memory Timeline", "Allocator State History" and "Active Cached Segment Timeline" of a bytegrad
// program.
//
// What goes in:
//  - "segments": every segment of every snapshot, with its device, pool ("large"/"small"), stream and its
//    blocks in address order (they tile the segment); each block's state is "active_allocated",
//    "active_pending_free" (freed, waiting on other streams' events: record_stream) or "inactive".
//  - "device_traces": one list per device index, up to the largest index given (devices without a
//    snapshot get []); each is the allocator's history (record_history), oldest first, with PyTorch's
//    action names. alloc/free sizes are the bytes requested, as PyTorch writes them.
//  - "allocator_settings": from the AllocatorConfig of the lowest-numbered device given (the keys bytegrad
//    has values for: PYTORCH_CUDA_ALLOC_CONF, max_split_size, garbage_collection_threshold,
//    roundup_power2_divisions, expandable_segments, and release_lock_on_cudamalloc, always false here).
//  - Stacks: bytegrad records no call stacks; instead each history entry's allocation tag (the op running
//    when it was recorded: "linear", "workspace", or a TensorNameScope's name such as "0.weight.exp_avg";
//    memory/allocation_context.h; for a free, the op that released the block, as PyTorch's free stacks are
//    the freeing code's) becomes a one-frame
//    stack {"filename": "bytegrad", "line": 0, "name": tag}. Live blocks get the tag of the alloc that made
//    them when the history still holds it, else [] (the viewer then says the block predates recording).
//    Entries recorded with no tag get [].
//  - Categories: alloc, free_requested and free_completed entries carry "category", the block's category
//    (memory_category.h: "parameter", "gathered_parameter", "buffer", "gradient", "optimizer_state",
//    "communication", "workspace", "activation", "autograd_temporary", "other"): at an alloc the one it was
//    born with, at a free the one it had then.
//    The viewer colours each allocation by its alloc's category and draws a legend. Entries about no block
//    (segment_*, snapshot, oom) say "unknown": the viewer adds "unknown" to its legend through a misspelt
//    property that throws unless some entry already has it (shared/reference/memory-viz-format.md, item 5).
//    bytegrad's own `category` entries (a live block's category changed) are left out: the viewer knows
//    PyTorch's actions only.
//
// Addresses are written as JSON numbers, which the viewer reads as doubles: exact below 2^53. cuda, sim
// (host mmap) and meta (from 2^44 up) addresses stay far below that (user space is 2^47 on x86-64), but a
// meta device configured with an absurd capacity (petabytes) could reach past it. When any address of a
// device would be 2^53 or more, all that device's addresses are shifted down by the same amount: its lowest
// address rounded down to 2 MiB, so the layout, alignment and pairing of addresses stay as they were;
// std::range_error if even the shifted range does not fit.
#pragma once

#include <string>
#include <vector>

#include "bytegrad/memory/caching_allocator.h"

namespace bytegrad {

// The viewer's JSON for the snapshots of one or more devices; each snapshot's device_index names its
// device. Throws std::invalid_argument when two snapshots name the same device (sim and cuda:0 are both
// device 0: export them to separate files).
std::string memory_viz_json(const std::vector<MemorySnapshot>& snapshots);
std::string memory_viz_json(const MemorySnapshot& snapshot);
// Takes allocator.snapshot() (which, like PyTorch's, logs a "snapshot" entry while recording) and exports
// it. Call allocator.record_history(true) first to get the timelines; without history the viewer shows
// only the final state (every live block as allocated "before recording").
std::string memory_viz_json(CachingAllocator& allocator);

// Writes the JSON to `path`; throws std::runtime_error when the file cannot be written.
void dump_memory_viz(const std::string& path, const std::vector<MemorySnapshot>& snapshots);
void dump_memory_viz(const std::string& path, CachingAllocator& allocator);

}  // namespace bytegrad
