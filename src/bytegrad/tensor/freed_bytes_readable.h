// Lifts AddressSanitizer's poison from free blocks a deferred write reads or writes, for a scope.
//
// Under AddressSanitizer the sim device poisons free blocks (simulated_raw_memory.cpp). A deferred gradient
// (gradient_reader.h) or a pending forward write (pending_scores.h) reads, and replays into, blocks that
// may be free by then, on purpose: nothing was written there since. For the scope, the free bytes the views
// span are readable and writable; their poison is restored after. Nothing in other builds.
#pragma once

#include <cstdint>
#include <vector>

#include "bytegrad/core/address_sanitizer.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/core/view_bytes.h"

namespace bytegrad {

class FreedBytesReadable {
 public:
  explicit FreedBytesReadable(const std::vector<StridedView>& views) {
#if BYTEGRAD_ASAN
    for (const StridedView& view : views)
      if (view.device.type == DeviceType::sim) allow(view);
#else
    (void)views;
#endif
  }
  ~FreedBytesReadable() {
#if BYTEGRAD_ASAN
    for (const ByteRange& run : poisoned_)
      ASAN_POISON_MEMORY_REGION(reinterpret_cast<void*>(run.begin), run.end - run.begin);
#endif
  }
  FreedBytesReadable(const FreedBytesReadable&) = delete;
  FreedBytesReadable& operator=(const FreedBytesReadable&) = delete;

 private:
#if BYTEGRAD_ASAN
  void allow(const StridedView& view) {
    const ByteRange range = bytes_spanned(view);
    constexpr uintptr_t kGranule = 8;  // ASan's shadow granule; the allocator poisons whole blocks
    const size_t first_new = poisoned_.size();
    for (uintptr_t at = range.begin & ~(kGranule - 1); at < range.end; at += kGranule) {
      if (__asan_address_is_poisoned(reinterpret_cast<void*>(at)) == 0) continue;
      if (poisoned_.size() > first_new && poisoned_.back().end == at) poisoned_.back().end += kGranule;
      else poisoned_.push_back({at, at + kGranule});
    }
    for (size_t i = first_new; i < poisoned_.size(); ++i)
      ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(poisoned_[i].begin), poisoned_[i].end - poisoned_[i].begin);
  }
#endif
  std::vector<ByteRange> poisoned_;
};

}  // namespace bytegrad
