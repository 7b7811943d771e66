// The largest live blocks (the peak record's and the OOM report's): kept as blocks come and go instead of
// found by a walk over every live block at each new peak, which made building a model with many blocks
// quadratic. The kept list must always equal a full walk's answer.
#include <algorithm>
#include <random>
#include <vector>

#include "helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

bool same(const std::vector<LedgerBlock>& a, const std::vector<LedgerBlock>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].address != b[i].address || a[i].bytes != b[i].bytes) return false;
  return true;
}

}  // namespace

TEST_CASE("largest blocks: the kept ten equal a full walk's after every malloc and free") {
  auto allocator = make_allocator();
  std::mt19937 rng(25);
  std::vector<void*> live;
  int compared = 0;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      // Sizes from 1 byte to 64 KiB, some up to 4 MiB, many equal (ties are ordered by address).
      const size_t bytes = rng() % 4 == 0 ? 512 : rng() % 20 == 0 ? 1 + rng() % (4 * MiB) : 1 + rng() % (64 * KiB);
      live.push_back(allocator->malloc(bytes));
    } else {
      const size_t at = rng() % live.size();
      allocator->free(live[at]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    }
    std::vector<LedgerBlock> walked = allocator->largest_blocks(1000000);  // more than kPeakBlocks: a full walk
    walked.resize(std::min<size_t>(walked.size(), 10));
    const std::vector<LedgerBlock> kept = allocator->largest_blocks(10);
    CHECK_MESSAGE(same(kept, walked), "step " << step);
    if (!same(kept, walked)) break;
    ++compared;
  }
  CHECK(compared == 3000);
  for (void* p : live) allocator->free(p);
  CHECK(allocator->largest_blocks(10).empty());
}
