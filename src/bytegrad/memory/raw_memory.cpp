#include "bytegrad/memory/raw_memory.h"

#include <stdexcept>

namespace bytegrad {

// A device without the virtual memory API refuses expandable segments loudly rather than faking them.
namespace {
[[noreturn]] void no_virtual_memory() {
  throw std::logic_error("this device's raw memory has no virtual memory API: expandable_segments is unavailable");
}
}  // namespace

uintptr_t RawMemory::reserve_addresses(size_t) { no_virtual_memory(); }
void RawMemory::release_addresses(uintptr_t, size_t) { no_virtual_memory(); }
bool RawMemory::map_pages(uintptr_t, size_t, size_t) { no_virtual_memory(); }
void RawMemory::unmap_pages(uintptr_t, size_t, size_t) { no_virtual_memory(); }

}  // namespace bytegrad
