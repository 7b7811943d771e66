// Explains each mark's change in allocated memory from the allocator's history: which ops' blocks
// appeared and which disappeared since the previous mark, by the tag of the op that allocated them
// (memory/allocation_context.h), e.g. "+4194304 linear, -4194304 linear (from before), +512 sum".
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "bytegrad/core/device.h"

namespace bytegrad {

class MemoryStory {
 public:
  explicit MemoryStory(Device device);  // starts recording the device's allocator history
  ~MemoryStory();
  MemoryStory(const MemoryStory&) = delete;
  MemoryStory& operator=(const MemoryStory&) = delete;

  // The changes since the previous call (or since construction), one phrase per tag, largest first;
  // transient blocks (allocated and freed in between) are counted separately as "transient".
  std::string since_last_mark();

 private:
  struct LiveBlock {
    size_t bytes;
    std::string tag;
    bool this_mark;  // allocated since the last mark
  };
  Device device_;
  const void* allocator_ = nullptr;  // the allocator being read (a reconfigured device gets a new one)
  size_t seen_ = 0;                          // history entries already read
  std::map<uintptr_t, LiveBlock> live_;      // blocks allocated while recording
};

}  // namespace bytegrad::programs
