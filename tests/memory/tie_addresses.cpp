// Best fit's tie between equal free blocks goes to the lower tie address (RawMemory::tie_address), which a
// real GPU takes from the placement model rather than from the driver's pointer (cuda_raw_memory.cpp). Here
// a device whose tie addresses run opposite to its pointers shows that the tie address, not the pointer,
// decides, and that it carries over to the blocks split from a segment.
#include <doctest/doctest.h>

#include "tests/memory/helpers.h"

namespace bytegrad::testing {
namespace {

// meta's addresses, with every segment's tie address mirrored (the highest pointer ties lowest).
class MirroredTies final : public RawMemory {
 public:
  explicit MirroredTies(bool mirror) : inner_(make_address_only_raw_memory({})), mirror_(mirror) {}
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* ptr, size_t bytes) override { inner_->release(ptr, bytes); }
  uintptr_t tie_address(const void* segment) const override {
    const auto address = reinterpret_cast<uintptr_t>(segment);
    return mirror_ ? (uintptr_t{1} << 62) - address : address;
  }
  Info info() override { return inner_->info(); }

 private:
  std::unique_ptr<RawMemory> inner_;
  bool mirror_;
};

// Two 20 MiB segments, both free again: a 4 MiB request ties between them. Returns the pointers of the
// first and second segment and the block the request got.
struct Tie {
  void *first, *second, *chosen;
};

Tie tie_between_two_segments(CachingAllocator& alloc) {
  // 20 MiB requests: large pool, rounded to 2 MiB, a segment of exactly 20 MiB each.
  void* first = alloc.malloc(20 * MiB);
  void* second = alloc.malloc(20 * MiB);
  alloc.free(first);
  alloc.free(second);
  void* chosen = alloc.malloc(4 * MiB);  // 4 MiB: served from a 20 MiB block, split (remainder > 1 MiB)
  return {first, second, chosen};
}

TEST_CASE("best fit breaks a tie by the segments' tie addresses, not their pointers") {
  SUBCASE("tie addresses equal to the pointers: the lower pointer wins") {
    CachingAllocator alloc(std::make_unique<MirroredTies>(false), {});
    const Tie t = tie_between_two_segments(alloc);
    void* lower = std::min(t.first, t.second, std::less<void*>());
    CHECK(t.chosen == lower);
  }
  SUBCASE("mirrored tie addresses: the higher pointer wins") {
    CachingAllocator alloc(std::make_unique<MirroredTies>(true), {});
    const Tie t = tie_between_two_segments(alloc);
    void* higher = std::max(t.first, t.second, std::less<void*>());
    CHECK(t.chosen == higher);
    // Blocks split from a segment keep its tie address: make each segment [4 MiB in use][16 MiB free]
    // and ask for 4 MiB again; the two 16 MiB blocks tie, and the mirrored (higher) segment's wins.
    void* lower = std::min(t.first, t.second, std::less<void*>());
    void* rest_of_higher = alloc.malloc(16 * MiB);  // exactly the higher segment's 16 MiB remainder
    CHECK(static_cast<char*>(rest_of_higher) == static_cast<char*>(higher) + 4 * MiB);
    void* front_of_lower = alloc.malloc(4 * MiB);  // the only free block left: the lower segment's 20 MiB
    CHECK(front_of_lower == lower);
    alloc.free(rest_of_higher);
    void* tied = alloc.malloc(4 * MiB);
    CHECK(static_cast<char*>(tied) == static_cast<char*>(higher) + 4 * MiB);
    for (void* p : {t.chosen, front_of_lower, tied}) alloc.free(p);
    // All free and merged again: the whole 20 MiB blocks tie as at first.
    void* again = alloc.malloc(4 * MiB);
    CHECK(again == higher);
    alloc.free(again);
  }
}

// The other outcome of a tie (CachingAllocator::TieOrder): a 12 MiB segment A, free and whole, and a 14 MiB
// segment B holding 2 MiB with its 12 MiB rest free. A 12 MiB request ties between A and B's rest. Taking A
// leaves B's rest free in a split segment (inactive_split 12 MiB); taking B's rest leaves A whole (0). The
// two tie orders give the two figures, and both count the one tie.
TEST_CASE("TieOrder: ties to the highest address give a tie's other outcome, and ties are counted") {
  auto run = [](CachingAllocator::TieOrder order) {
    CachingAllocator alloc(std::make_unique<MirroredTies>(false), {});
    alloc.set_tie_order(order);
    void* a = alloc.malloc(12 * MiB);  // above 10 MiB: a segment of its size rounded to 2 MiB
    void* b = alloc.malloc(14 * MiB);
    alloc.free(b);
    void* in_b = alloc.malloc(2 * MiB);  // the only free block: B, split into 2 MiB + 12 MiB
    alloc.free(a);
    CHECK(alloc.placement_ties() == 0);
    void* tied = alloc.malloc(12 * MiB);
    CHECK(alloc.placement_ties() == 1);
    const int64_t inactive_split = stat(alloc, "inactive_split_bytes.all.current");
    const bool took_a = tied == a;
    alloc.free(tied);
    alloc.free(in_b);
    return std::pair{took_a, inactive_split};
  };
  const auto lowest = run(CachingAllocator::TieOrder::lowest_address);
  const auto highest = run(CachingAllocator::TieOrder::highest_address);
  CHECK(lowest.first != highest.first);  // each order takes the other block
  for (const auto& [took_a, inactive_split] : {lowest, highest})
    CHECK(inactive_split == (took_a ? 12 * 1024 * 1024 : 0));  // B's free 12 MiB rest, or nothing split and free
}

}  // namespace
}  // namespace bytegrad::testing
