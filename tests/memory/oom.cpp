// Out of memory (reference sections 7.1, 7.2, 8.2): the exception, its exact message, the counters, what
// the retry releases, recovery, the 1 EiB refusal, and the per-process memory fraction.
//
// The simulated device reports cudaMemGetInfo as free = total - context - segments, and, as NVML would for
// our own PID, process memory in use = context + segments; so its messages carry the
// "Including non-PyTorch memory, this process has X memory in use. " part.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include "helpers.h"
#include "bytegrad/memory/format_size.h"
#include "bytegrad/memory/out_of_memory.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

static_assert(std::is_base_of_v<std::runtime_error, OutOfMemoryError>);

struct Expected {
  size_t segment;  // "Tried to allocate": the segment size (2.4), not the request
  size_t total;
  size_t free;
  size_t process_in_use;
  std::optional<size_t> allowed;
  size_t allocated;
  size_t reserved;
  int device = 0;
};

// The 2.11 template of section 7.2, piece by piece (no private pools here, so private_free = 0).
std::string expected_message(const Expected& x) {
  std::string m = "CUDA out of memory. Tried to allocate " + format_size(x.segment) + ". GPU " +
                  std::to_string(x.device) + " has a total capacity of " + format_size(x.total) + " of which " +
                  format_size(x.free) + " is free. ";
  m += "Including non-PyTorch memory, this process has " + format_size(x.process_in_use) + " memory in use. ";
  if (x.allowed) m += format_size(*x.allowed) + " allowed; ";
  m += "Of the allocated memory " + format_size(x.allocated) + " is allocated by PyTorch, ";
  m += "and " + format_size(x.reserved - x.allocated) + " is reserved by PyTorch but unallocated.";
  m += " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
       " to avoid fragmentation.  See documentation for Memory Management  "
       "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
  return m;
}

// Calls malloc(bytes), which must throw OutOfMemoryError; returns the error.
OutOfMemoryError expect_oom(CachingAllocator& allocator, size_t bytes) {
  try {
    allocator.malloc(bytes);
  } catch (const OutOfMemoryError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("malloc(" << bytes << ") threw something other than OutOfMemoryError: " << e.what());
  }
  FAIL("malloc(" << bytes << ") did not throw");
  return OutOfMemoryError("", 0, 0);
}

// Every memory_stats() key whose value differs between two snapshots of the stats.
std::map<std::string, int64_t> changed(const std::map<std::string, int64_t>& before,
                                       const std::map<std::string, int64_t>& after) {
  std::map<std::string, int64_t> out;
  for (const auto& [key, value] : after)
    if (before.at(key) != value) out[key] = value - before.at(key);
  return out;
}

constexpr SimulatedCapacity k64MiB{64 * MiB, 0};

}  // namespace

TEST_CASE("OOM: exception type, exact message and counters on a 64 MiB device") {
  auto allocator = make_allocator({}, k64MiB);
  allocator->malloc(40 * MiB);  // a 40 MiB segment (>= 10 MiB: rounded up to 2 MiB multiples)
  const auto before = allocator->memory_stats();

  // 30 MiB needs a 30 MiB segment: 40 + 30 > 64.
  CHECK_THROWS_AS(allocator->malloc(30 * MiB), OutOfMemoryError);
  const auto after_first = allocator->memory_stats();
  // The flush found no free segment; only the three counters moved (7.1).
  CHECK(changed(before, after_first) ==
        std::map<std::string, int64_t>{{"num_alloc_retries", 1}, {"num_ooms", 1}, {"num_sync_all_streams", 1}});

  const OutOfMemoryError e = expect_oom(*allocator, 30 * MiB);
  CHECK(e.requested_bytes == 30 * MiB);
  CHECK(e.segment_bytes == 30 * MiB);
  // free = 64 - 40 = 24 MiB; this process: 0 context + 40 MiB of segments; 40 MiB allocated, 0 unallocated.
  CHECK(std::string(e.what()) ==
        expected_message({30 * MiB, 64 * MiB, 24 * MiB, 40 * MiB, std::nullopt, 40 * MiB, 40 * MiB}));
  CHECK(std::string(e.what()) ==
        "CUDA out of memory. Tried to allocate 30.00 MiB. GPU 0 has a total capacity of 64.00 MiB of which "
        "24.00 MiB is free. Including non-PyTorch memory, this process has 40.00 MiB memory in use. Of the "
        "allocated memory 40.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)");
  CHECK(stat(*allocator, "num_ooms") == 2);
  CHECK(stat(*allocator, "num_alloc_retries") == 2);
  CHECK(stat(*allocator, "num_sync_all_streams") == 2);
}

TEST_CASE("OOM: context memory counts in the process figure, the device index in the text") {
  // 64 MiB device with a 6 MiB context: 58 MiB for segments.
  auto allocator = make_allocator({}, {64 * MiB, 6 * MiB}, /*device_index=*/1);
  allocator->malloc(40 * MiB);
  // 20 MiB needs a 20 MiB segment; 64 - 6 - 40 = 18 MiB free.
  const OutOfMemoryError e = expect_oom(*allocator, 20 * MiB);
  Expected x{20 * MiB, 64 * MiB, 18 * MiB, 46 * MiB, std::nullopt, 40 * MiB, 40 * MiB};
  x.device = 1;
  CHECK(std::string(e.what()) == expected_message(x));
  CHECK(std::string(e.what()).find(". GPU 1 has a total capacity of ") != std::string::npos);
}

TEST_CASE("OOM: \"Tried to allocate\" is the segment size") {
  auto allocator = make_allocator({}, k64MiB);
  allocator->malloc(64 * MiB);  // fills the device: one 64 MiB segment, 0 free

  SUBCASE("a small request reports 2.00 MiB (measured)") {
    const OutOfMemoryError e = expect_oom(*allocator, 1);
    CHECK(e.segment_bytes == 2 * MiB);
    CHECK(std::string(e.what()) ==
          expected_message({2 * MiB, 64 * MiB, 0, 64 * MiB, std::nullopt, 64 * MiB, 64 * MiB}));
    CHECK(std::string(e.what()).rfind("CUDA out of memory. Tried to allocate 2.00 MiB. ", 0) == 0);
  }
  SUBCASE("a 1-10 MiB request reports 20.00 MiB") {
    const OutOfMemoryError e = expect_oom(*allocator, 5 * MiB);
    CHECK(std::string(e.what()).rfind("CUDA out of memory. Tried to allocate 20.00 MiB. ", 0) == 0);
  }
  SUBCASE("a 25 MiB + 1 request reports 26.00 MiB") {
    const OutOfMemoryError e = expect_oom(*allocator, 25 * MiB + 1);
    CHECK(std::string(e.what()).rfind("CUDA out of memory. Tried to allocate 26.00 MiB. ", 0) == 0);
  }
}

TEST_CASE("OOM: the retry releases fully free cached segments, and they stay released") {
  auto allocator = make_allocator({}, k64MiB);
  void* a = allocator->malloc(20 * MiB);                              // 20 MiB segment
  allocator->malloc(30 * MiB);                                        // 30 MiB segment
  allocator->free(a);                                                 // cached, whole
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 52428800);  // 50 MiB

  SUBCASE("still too large after the flush: OOM, with the cached segment gone") {
    // 40 MiB: A fails (50 + 40 > 64); the flush frees a's 20 MiB; C fails (30 + 40 > 64).
    const OutOfMemoryError e = expect_oom(*allocator, 40 * MiB);
    CHECK(stat(*allocator, "num_device_free") == 1);
    CHECK(stat(*allocator, "segment.all.current") == 1);
    CHECK(stat(*allocator, "reserved_bytes.all.current") == 31457280);  // 30 MiB
    CHECK(stat(*allocator, "num_ooms") == 1);
    CHECK(stat(*allocator, "num_alloc_retries") == 1);
    CHECK(stat(*allocator, "num_sync_all_streams") == 1);
    // The message is built after the flush: free = 64 - 30 = 34 MiB.
    CHECK(std::string(e.what()) ==
          expected_message({40 * MiB, 64 * MiB, 34 * MiB, 30 * MiB, std::nullopt, 30 * MiB, 30 * MiB}));
  }
  SUBCASE("fits after the flush: attempt C succeeds, no OOM") {
    // 30 MiB: A fails (50 + 30 > 64); the flush frees 20 MiB; C succeeds (30 + 30 <= 64).
    void* p = allocator->malloc(30 * MiB);
    CHECK(p != nullptr);
    CHECK(stat(*allocator, "num_ooms") == 0);
    CHECK(stat(*allocator, "num_alloc_retries") == 1);
    CHECK(stat(*allocator, "num_sync_all_streams") == 1);
    CHECK(stat(*allocator, "num_device_free") == 1);
    CHECK(stat(*allocator, "num_device_alloc") == 3);
    CHECK(stat(*allocator, "reserved_bytes.all.current") == 62914560);  // 60 MiB
  }
}

TEST_CASE("OOM: the caller can catch, free and allocate again") {
  auto allocator = make_allocator({}, k64MiB);
  void* blocker = allocator->malloc(40 * MiB);
  CHECK_THROWS_AS(allocator->malloc(30 * MiB), OutOfMemoryError);
  // A failed allocation leaves no allocation stats behind (7.1).
  CHECK(stat(*allocator, "allocation.all.current") == 1);
  CHECK(stat(*allocator, "allocated_bytes.all.current") == 41943040);  // 40 MiB
  CHECK(stat(*allocator, "requested_bytes.all.current") == 41943040);
  CHECK(stat(*allocator, "active.all.current") == 1);
  allocator->free(blocker);
  // The freed 40 MiB block now serves 30 MiB from the cache (best fit, split: 10 MiB left > 1 MiB).
  void* p = allocator->malloc(30 * MiB);
  CHECK(p == blocker);
  CHECK(stat(*allocator, "allocated_bytes.all.current") == 31457280);  // 30 MiB
  CHECK(stat(*allocator, "num_ooms") == 1);
  // And once the cache is flushed, a segment that did not fit before fits now.
  allocator->free(p);
  allocator->empty_cache();
  CHECK(allocator->malloc(60 * MiB) != nullptr);
  CHECK(stat(*allocator, "reserved_bytes.all.current") == 62914560);  // 60 MiB
}

TEST_CASE("OOM: the measured 200 GiB example (7.1, 7.2) on the simulated H100") {
  auto allocator = make_allocator();  // total 85017493504, context 552402944 (raw_memory.h)
  allocator->malloc(7 * MiB);         // a 7 MiB tensor alive in a 20 MiB segment
  const auto before = allocator->memory_stats();
  const OutOfMemoryError e = expect_oom(*allocator, 200 * GiB);
  // Measured: num_alloc_retries +1, num_ooms +1, num_sync_all_streams +1 and nothing else (the only
  // segment is split, so the flush cannot release it).
  CHECK(changed(before, allocator->memory_stats()) ==
        std::map<std::string, int64_t>{{"num_alloc_retries", 1}, {"num_ooms", 1}, {"num_sync_all_streams", 1}});
  const size_t total = 85017493504, context = kSimDefaultContextBytes, segments = 20 * MiB;
  const std::string message = e.what();
  CHECK(message == expected_message({200 * GiB, total, total - context - segments, context + segments, std::nullopt,
                                     7 * MiB, 20 * MiB}));
  // The parts that do not depend on the context size, as measured:
  CHECK(message.rfind(
            "CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which ", 0) ==
        0);
  CHECK(message.find("Of the allocated memory 7.00 MiB is allocated by PyTorch, and 13.00 MiB is reserved by PyTorch "
                     "but unallocated.") != std::string::npos);
}

TEST_CASE("OOM: requests of 1 EiB or more are refused before anything is counted") {
  auto allocator = make_allocator({}, k64MiB);
  allocator->malloc(1);
  const auto before = allocator->memory_stats();
  const size_t one_exabyte = size_t{1} << 60;
  const OutOfMemoryError e = expect_oom(*allocator, one_exabyte);
  CHECK(std::string(e.what()) == "CUDA out of memory. Tried to allocate more than 1EB memory.");
  CHECK(changed(before, allocator->memory_stats()).empty());  // not counted in num_ooms, no flush
  CHECK_THROWS_AS(allocator->malloc(std::numeric_limits<size_t>::max()), OutOfMemoryError);
  CHECK(stat(*allocator, "num_ooms") == 0);

  // One byte less takes the ordinary path: rounds to 2^60 (a 512 multiple), segment 2^60 (a 2 MiB
  // multiple), which is 2^60 / 2^30 = 1073741824 GiB; counted as an OOM.
  const OutOfMemoryError ordinary = expect_oom(*allocator, one_exabyte - 1);
  CHECK(std::string(ordinary.what()).rfind("CUDA out of memory. Tried to allocate 1073741824.00 GiB. ", 0) == 0);
  CHECK(stat(*allocator, "num_ooms") == 1);
  CHECK(stat(*allocator, "num_alloc_retries") == 1);
}

TEST_CASE("memory fraction: allowed = (size_t)(f * total), tested only for new segments") {
  SUBCASE("a segment reaching exactly the cap succeeds; the next new segment fails") {
    auto allocator = make_allocator({}, k64MiB);
    allocator->set_memory_fraction(0.5);  // 0.5 * 67108864 = 33554432 = 32 MiB exactly
    CHECK(allocator->memory_fraction() == 0.5);
    allocator->malloc(30 * MiB);  // 30 MiB segment
    allocator->malloc(1);         // 2 MiB small segment: 30 + 2 = 32 MiB == allowed, not above it
    CHECK(stat(*allocator, "reserved_bytes.all.current") == 33554432);
    // Cached blocks still serve requests at the cap.
    allocator->malloc(1);
    CHECK(stat(*allocator, "num_device_alloc") == 2);
    // 2 MiB rounds to 2097152 > 1 MiB: large pool, 20 MiB segment; 32 + 20 > 32.
    const OutOfMemoryError e = expect_oom(*allocator, 2 * MiB);
    // allocated: 30 MiB + two 512-byte blocks.
    CHECK(std::string(e.what()) ==
          expected_message({20 * MiB, 64 * MiB, 32 * MiB, 32 * MiB, 32 * MiB, 30 * MiB + 1024, 32 * MiB}));
    CHECK(std::string(e.what()).find("memory in use. 32.00 MiB allowed; Of the allocated memory") != std::string::npos);
    CHECK(stat(*allocator, "num_ooms") == 1);
    CHECK(stat(*allocator, "num_alloc_retries") == 1);
  }
  SUBCASE("one byte below the segment total fails") {
    auto allocator = make_allocator({}, k64MiB);
    // f = (32 MiB - 1) / 64 MiB is exact in binary, so allowed = 33554431.
    allocator->set_memory_fraction(33554431.0 / 67108864.0);
    const OutOfMemoryError e = expect_oom(*allocator, 32 * MiB);  // 32 MiB segment > 33554431
    CHECK(e.segment_bytes == 32 * MiB);
    CHECK(std::string(e.what()) == expected_message({32 * MiB, 64 * MiB, 64 * MiB, 0, size_t{33554431}, 0, 0}));
    allocator->malloc(30 * MiB);                              // 30 MiB <= 33554431
    CHECK_THROWS_AS(allocator->malloc(1), OutOfMemoryError);  // + 2 MiB = 33554432 > 33554431
  }
  SUBCASE("the cap truncates f * total") {
    auto allocator = make_allocator({}, k64MiB);
    allocator->set_memory_fraction(0.3);
    const auto allowed = static_cast<size_t>(0.3 * 67108864.0);  // 20132659.2 -> 20132659
    CHECK(allowed == 20132659);
    CHECK(allocator->memory_fraction() == static_cast<double>(allowed) / 67108864.0);
    const OutOfMemoryError e = expect_oom(*allocator, 20 * MiB);  // a 20 MiB segment: 20971520 > 20132659
    CHECK(std::string(e.what()).find(format_size(allowed) + " allowed; ") != std::string::npos);
  }
  SUBCASE("fraction 0: every new segment is refused") {
    auto allocator = make_allocator({}, k64MiB);
    allocator->set_memory_fraction(0.0);
    const OutOfMemoryError e = expect_oom(*allocator, 1);
    CHECK(std::string(e.what()).find("memory in use. 0 bytes allowed; ") != std::string::npos);
  }
  SUBCASE("fraction 1.0 keeps the flag: the message still says what is allowed") {
    auto allocator = make_allocator({}, k64MiB);
    allocator->set_memory_fraction(1.0);
    CHECK(allocator->memory_fraction() == 1.0);
    const OutOfMemoryError e = expect_oom(*allocator, 65 * MiB);
    CHECK(std::string(e.what()) ==
          expected_message({66 * MiB, 64 * MiB, 64 * MiB, 0, 64 * MiB, 0, 0}));  // 65 MiB -> 66 MiB segment
  }
  SUBCASE("fractions outside [0, 1] are rejected and change nothing") {
    auto allocator = make_allocator({}, k64MiB);
    CHECK(allocator->memory_fraction() == 1.0);  // none set
    CHECK_THROWS_AS(allocator->set_memory_fraction(-0.1), std::invalid_argument);
    CHECK_THROWS_AS(allocator->set_memory_fraction(1.1), std::invalid_argument);
    CHECK_THROWS_AS(allocator->set_memory_fraction(std::nan("")), std::invalid_argument);
    CHECK_THROWS_AS(allocator->set_memory_fraction(std::numeric_limits<double>::infinity()), std::invalid_argument);
    // Still no cap: a full-device segment is allowed, and an OOM message has no "allowed" part.
    void* p = allocator->malloc(64 * MiB);
    CHECK(p != nullptr);
    const OutOfMemoryError e = expect_oom(*allocator, 1);
    CHECK(std::string(e.what()).find("allowed; ") == std::string::npos);
  }
}

TEST_CASE("memory fraction: the measured H100 examples (7.2, 8.2)") {
  auto allocator = make_allocator();         // total 85017493504
  void* seven = allocator->malloc(7 * MiB);  // 7 MiB alive in a 20 MiB segment, 13 MiB free tail
  const size_t total = 85017493504, context = kSimDefaultContextBytes, segments = 20 * MiB;

  SUBCASE("0.01: get_per_process_memory_fraction and the 1 GiB message") {
    allocator->set_memory_fraction(0.01);
    CHECK(allocator->memory_fraction() == 0.009999999999529509);  // measured
    const OutOfMemoryError e = expect_oom(*allocator, 1 * GiB);
    // allowed = (size_t)(0.01 * 85017493504) = 850174935 -> "810.79 MiB" (measured).
    CHECK(std::string(e.what()) == expected_message({1 * GiB, total, total - context - segments, context + segments,
                                                     size_t{850174935}, 7 * MiB, 20 * MiB}));
    CHECK(std::string(e.what()).find("Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 79.18 GiB") !=
          std::string::npos);
    CHECK(std::string(e.what()).find("memory in use. 810.79 MiB allowed; Of the allocated memory 7.00 MiB is "
                                     "allocated by PyTorch, and 13.00 MiB is reserved by PyTorch but unallocated.") !=
          std::string::npos);
  }
  SUBCASE("1e-6: 83 KiB allowed, yet 5 MiB comes out of the cached tail; 1 byte does not") {
    allocator->set_memory_fraction(1e-6);  // (size_t)(1e-6 * 85017493504) = 85017 -> "83.02 KiB"
    void* five = allocator->malloc(5 * MiB);
    CHECK(five != nullptr);
    CHECK(stat(*allocator, "num_device_alloc") == 1);
    CHECK(stat(*allocator, "reserved_bytes.all.current") == 20971520);
    const OutOfMemoryError e = expect_oom(*allocator, 1);
    CHECK(std::string(e.what()).find("Tried to allocate 2.00 MiB. ") != std::string::npos);
    CHECK(std::string(e.what()).find("83.02 KiB allowed; ") != std::string::npos);
    CHECK(std::string(e.what()) == expected_message({2 * MiB, total, total - context - segments, context + segments,
                                                     size_t{85017}, 12 * MiB, 20 * MiB}));
  }
  allocator->free(seven);
}

// OutOfMemoryError::report(): the failure taken apart. Two 100 MiB devices, one that fails for lack of
// room and one that fails by fragmentation with more than enough free bytes in its cache.
TEST_CASE("OOM report: no room, by category, with the largest live blocks") {
  auto allocator = make_allocator({}, {100 * MiB, 0});
  void* weights = nullptr;
  {
    CategoryScope state(MemoryCategory::optimizer_state);
    weights = allocator->malloc(30 * MiB);  // 30 MiB >= 10 MiB: a segment of exactly 30 MiB
  }
  allocator->malloc(30 * MiB);
  allocator->malloc(30 * MiB);  // 90 MiB reserved, 10 MiB of the card left
  PhaseScope backward(MemoryPhase::backward);
  const OutOfMemoryError e = expect_oom(*allocator, 20 * MiB);
  REQUIRE(e.has_report());
  const OutOfMemoryReport& r = e.report();
  CHECK(r.requested_bytes == 20 * MiB);
  CHECK(r.block_bytes == 20 * MiB);  // a multiple of 512 already
  CHECK(r.pool == PoolKind::large);
  CHECK(r.segment_bytes == 20 * MiB);
  CHECK(r.device_free == 10 * MiB);  // 100 - 3 * 30
  CHECK(r.room_for_segment() == 10 * MiB);
  CHECK(r.allocated_bytes == 90 * MiB);
  CHECK(r.reserved_bytes == 90 * MiB);
  CHECK(r.cached_free_bytes == 0);
  CHECK(r.cached_free_pieces == 0);
  CHECK(r.categories[static_cast<size_t>(MemoryCategory::optimizer_state)] == static_cast<int64_t>(30 * MiB));
  CHECK(r.categories[static_cast<size_t>(MemoryCategory::other)] == static_cast<int64_t>(60 * MiB));
  CHECK(r.phase == MemoryPhase::backward);
  CHECK_FALSE(r.fragmentation_caused());  // 0 cached + 10 MiB of room < 20 MiB
  REQUIRE(r.largest_live.size() == 3);
  for (const LedgerBlock& b : r.largest_live) CHECK(b.bytes == static_cast<int64_t>(30 * MiB));
  CHECK(std::string(e.what()) == out_of_memory_message(r));  // what() stays PyTorch's text
  const std::string text = r.str();
  CHECK(text.find("during backward") != std::string::npos);
  CHECK(text.find("not fragmentation") != std::string::npos);
  CHECK(text.find("optimizer_state") != std::string::npos);
  CHECK(text.find("(31457280 B)") != std::string::npos);  // a 30 MiB block, exact: 30 * 1048576
  const OutOfMemoryError copy = e;                        // exceptions are copied: the report goes with them
  CHECK(&copy.report() == &r);
  allocator->free(weights);
}

TEST_CASE("OOM report: fragmentation, 50 MiB cached in two 25 MiB pieces cannot serve 45 MiB") {
  auto allocator = make_allocator({}, {100 * MiB, 0});
  allocator->free(allocator->malloc(60 * MiB));  // one 60 MiB segment, cached whole
  void* a = allocator->malloc(25 * MiB);         // [0, 25) of it; [25, 60) stays free
  allocator->malloc(10 * MiB);                   // [25, 35): the split's remainder is > 1 MiB, so it splits
  allocator->free(a);                            // free: [0, 25) and [35, 60), not adjacent
  const OutOfMemoryError e = expect_oom(*allocator, 45 * MiB);  // the flush cannot release a split segment
  const OutOfMemoryReport& r = e.report();
  CHECK(r.allocated_bytes == 10 * MiB);
  CHECK(r.reserved_bytes == 60 * MiB);
  CHECK(r.cached_free_bytes == 50 * MiB);
  CHECK(r.cached_free_pieces == 2);
  CHECK(r.largest_free_piece == 25 * MiB);
  CHECK(r.device_free == 40 * MiB);    // 100 - 60
  CHECK(r.segment_bytes == 46 * MiB);  // 45 MiB rounded up to a 2 MiB multiple
  CHECK(r.fragmentation_caused());     // 50 MiB cached + 40 MiB of room >= 45 MiB, no piece fits
  CHECK(r.str().find("fragmentation made it fail") != std::string::npos);
}

TEST_CASE("OOM report: a request over 1 EB is refused before any attempt and has no report") {
  auto allocator = make_allocator({}, k64MiB);
  const OutOfMemoryError e = expect_oom(*allocator, kOneExaByte);
  CHECK_FALSE(e.has_report());
  CHECK_THROWS_AS(e.report(), std::logic_error);
}
