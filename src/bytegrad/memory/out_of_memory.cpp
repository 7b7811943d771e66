#include "bytegrad/memory/out_of_memory.h"

#include "bytegrad/memory/format_size.h"

namespace bytegrad {

std::string out_of_memory_message(const OutOfMemoryReport& r) {
  std::string message = "CUDA out of memory. Tried to allocate " + format_size(r.segment_bytes) + ". GPU " +
                        std::to_string(r.device_index) + " has a total capacity of " +
                        format_size(r.device_total) + " of which " + format_size(r.device_free) + " is free. ";
  if (r.process_in_use)
    message += "Including non-PyTorch memory, this process has " + format_size(*r.process_in_use) +
               " memory in use. ";
  if (r.allowed_bytes) message += format_size(*r.allowed_bytes) + " allowed; ";
  // No CUDA graphs or memory pools here, so nothing is held in private pools.
  message += "Of the allocated memory " + format_size(r.allocated_bytes) + " is allocated by PyTorch, and " +
             format_size(r.reserved_bytes - r.allocated_bytes) +
             " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
             "Memory Management  "
             "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  return message;
}

}  // namespace bytegrad
