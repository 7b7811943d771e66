// PyTorch's snapshot tests (test/test_cuda.py, TestCudaMallocAsync and TestCuda): what memory snapshots and
// their traces show. Stacks (`frames`) are not recorded here; the parts of each test about them are left out.
#include <algorithm>
#include <random>
#include <vector>

#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

// The block with this requested size among the snapshot's active blocks, or null.
const BlockInfo* find_requested(const MemorySnapshot& snap, size_t requested) {
  for (const SegmentInfo& segment : snap.segments)
    for (const BlockInfo& block : segment.blocks)
      if (block.state == BlockState::active_allocated && block.requested_size == requested) return &block;
  return nullptr;
}

// Stops recording when the scope ends, as the tests' `finally: _record_memory_history(None)`.
struct HistoryOff {
  CachingAllocator& allocator;
  ~HistoryOff() { allocator.record_history(false); }
};

}  // namespace

// PyTorch: test_cuda.py TestCudaMallocAsync.test_memory_snapshot
TEST_CASE("conformance: a snapshot finds a block by its request; the trace ends with the last segment_free") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    CachingAllocator& alloc = dut.allocator();
    empty_cache(device);
    // _record_memory_history("state"): live blocks only, the trace kept to one entry.
    alloc.record_history(true, 1);
    HistoryOff off{alloc};
    // make x the second block in a segment
    void* first = alloc.malloc(2 * 311 * 411 * 4);
    alloc.free(first);  // the tensor is not kept
    void* unused = alloc.malloc(310 * 410 * 4);
    void* x = alloc.malloc(311 * 411 * 4);
    // 1000 tensors of 128 floats (512 bytes, the smallest block) tiling one segment, freed in random order
    std::vector<void*> tensors;
    for (int i = 0; i < 1000; ++i) tensors.push_back(alloc.malloc(128 * 4));
    std::mt19937 random(0);
    while (!tensors.empty()) {
      const size_t i = std::uniform_int_distribution<size_t>(0, tensors.size() - 1)(random);
      alloc.free(tensors[i]);
      tensors.erase(tensors.begin() + static_cast<std::ptrdiff_t>(i));
    }
    alloc.free(alloc.malloc(128 * 5 * 4));  // exercise the history trimming

    const MemorySnapshot ss = alloc.snapshot();
    const BlockInfo* found = find_requested(ss, 311 * 411 * 4);
    REQUIRE(found != nullptr);
    CHECK(found->address == reinterpret_cast<uintptr_t>(x));

    alloc.free(unused);
    alloc.free(x);
    empty_cache(device);
    const MemorySnapshot after = alloc.snapshot();
    REQUIRE_FALSE(after.trace.empty());
    const TraceAction last = after.trace.back().action;
    CHECK((last == TraceAction::segment_free || last == TraceAction::segment_unmap));
  });
}

// PyTorch: test_cuda.py TestCuda.test_cpp_memory_snapshot_pickle (without the frames)
TEST_CASE("conformance: with a 10-entry history, the snapshot's last trace entry is the last alloc") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    CachingAllocator& alloc = dut.allocator();
    for (int round = 0; round < 2; ++round) {  // PyTorch runs it without and with context
      alloc.record_history(true, 10);
      HistoryOff off{alloc};
      void* t = alloc.malloc(311 * 411 * 4);  // torch.rand(311, 411)
      const MemorySnapshot mem = alloc.snapshot();
      CHECK(find_requested(mem, 311 * 411 * 4) != nullptr);
      REQUIRE_FALSE(mem.trace.empty());
      CHECK(mem.trace.back().action == TraceAction::alloc);
      CHECK(mem.trace.back().size == 311 * 411 * 4);
      alloc.free(t);
    }
  });
}

// PyTorch: test_cuda.py TestCudaMallocAsync.test_memory_snapshot_with_cpp (without the C++ frames)
TEST_CASE("conformance: a live tensor's block is in the snapshot with its requested size") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    CachingAllocator& alloc = dut.allocator();
    empty_cache(device);
    alloc.record_history(true, 1);
    HistoryOff off{alloc};
    void* x = alloc.malloc(311 * 411 * 4);
    CHECK(find_requested(alloc.snapshot(), 311 * 411 * 4) != nullptr);
    alloc.free(x);
  });
}
