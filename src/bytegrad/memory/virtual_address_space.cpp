#include "bytegrad/memory/virtual_address_space.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace bytegrad {

VirtualAddressSpace::VirtualAddressSpace(uintptr_t base, size_t span) : limit_(base) {
  constexpr size_t kMiB = size_t{1} << 20;
  const uintptr_t anchor = base + span - 128 * kMiB;  // "T": the first small segment of a fresh process
  add_gap(anchor + 74 * kMiB, 24 * kMiB);
  add_gap(anchor, 2 * kMiB);  // the newer of the two: a fresh process's first 2 MiB segment lands at T
  bottom_ = anchor - 414 * kMiB;
}

uintptr_t VirtualAddressSpace::allocate(size_t bytes) {
  auto newest = gaps_.end();
  for (auto it = gaps_.begin(); it != gaps_.end(); ++it)
    if (it->second.bytes >= bytes && (newest == gaps_.end() || it->second.made > newest->second.made)) newest = it;
  if (newest != gaps_.end()) {
    const uintptr_t address = newest->first;
    const Gap rest{newest->second.bytes - bytes, newest->second.made};  // the rest keeps its age
    gaps_.erase(newest);
    if (rest.bytes > 0) gaps_.emplace(address + bytes, rest);
    return address;
  }
  const size_t region = (bytes + kRegionGranularity - 1) / kRegionGranularity * kRegionGranularity;
  if (bottom_ - limit_ < region) return 0;
  bottom_ -= region;
  if (region > bytes) add_gap(bottom_ + bytes, region - bytes);
  return bottom_;
}

void VirtualAddressSpace::release(uintptr_t address, size_t bytes) { add_gap(address, bytes); }

void VirtualAddressSpace::library_loaded() {
  if (library_loaded_) return;
  library_loaded_ = true;
  std::vector<std::map<uintptr_t, Gap>::iterator> by_age;
  for (auto it = gaps_.begin(); it != gaps_.end(); ++it) by_age.push_back(it);
  std::sort(by_age.begin(), by_age.end(), [](auto a, auto b) { return a->second.made > b->second.made; });
  for (size_t i = 0; i < by_age.size() && i < kGapsTakenByLibraryLoad; ++i) gaps_.erase(by_age[i]);
}

// Inserts a free range, merging it with free neighbours; the result is the newest gap.
void VirtualAddressSpace::add_gap(uintptr_t address, size_t bytes) {
  auto next = gaps_.lower_bound(address);
  if (next != gaps_.end() && address + bytes == next->first) {
    bytes += next->second.bytes;
    next = gaps_.erase(next);
  }
  if (next != gaps_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes == address) {
      address = prev->first;
      bytes += prev->second.bytes;
      gaps_.erase(prev);
    }
  }
  gaps_.emplace(address, Gap{bytes, ++clock_});
}

}  // namespace bytegrad
