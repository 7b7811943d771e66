// What lives on a device outside the caching allocator, as the layers above know it: NCCL's communicator
// and buffers (bytegrad/distributed), shown apart in the ledger, the memory summary, the peak and
// out-of-memory reports and the HTML report, and never added to allocated or reserved:
//
//   outside the allocator: NCCL communicator 196.00 MiB (205520896 B), ring buffers 288.00 MiB
//   (301989888 B), CUDA context 522.00 MiB (547356672 B)
//
// Layers point one way (memory is below distributed), so the layer that knows registers a source here and
// the reports ask the registry. On cuda the parts are measured (they are inside cudaMemGetInfo's used
// bytes, and the CUDA context is what remains of total - free - reserved); on sim and meta they are
// modelled (on top of the simulated card's context, which is then the CUDA context figure).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"

namespace bytegrad {

struct OutsideAllocatorPart {
  std::string name;  // NCCL's: "communicator", "ring buffers" (modelled), "first all_reduce" (measured)
  int64_t bytes = 0;
};

struct OutsideAllocatorFigures {
  std::vector<OutsideAllocatorPart> parts;  // in the order they were made
  bool measured = false;                    // true: measured on the GPU; false: modelled
  std::string basis;                        // modelled: where the figures come from
};

// A source answers for one device (nullopt when it has nothing there). It may be called from any thread,
// with no allocator lock held, and must not call into the allocator while holding a lock that the
// allocator's callers may hold.
using OutsideAllocatorSource = std::function<std::optional<OutsideAllocatorFigures>(Device)>;
// Returns the id to unregister with; after unregister returns, the source is never called again.
int register_outside_allocator_source(OutsideAllocatorSource source);
void unregister_outside_allocator_source(int id);

// Every source's figures for `device`, parts of one name summed (two groups on one GPU: two communicators);
// nullopt when no source has any.
std::optional<OutsideAllocatorFigures> outside_allocator_figures(Device device);

// The line above from the figures and `outside_bytes`, the device's total - free - reserved: measured, it
// holds the parts, and the CUDA context is the rest; modelled, it is the modelled context and the parts
// come on top ("(NCCL modelled: <basis>)" ends the line).
std::string outside_allocator_line(const OutsideAllocatorFigures& figures, int64_t outside_bytes);
// For a device now, "" when no source has figures for it. Reads the allocator: not under its lock.
std::string outside_allocator_line(Device device);

}  // namespace bytegrad
