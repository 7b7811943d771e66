// testing::marks_under_both_timings: a program's marks under both of sim's and meta's timings
// (SimulatedTiming), flagged where the figures differ. The figures here come from the allocator's rules
// (docs/allocator.md): a request of 10 MiB or more gets a segment of its own, its size rounded up to 2 MiB;
// a request of 1 to 10 MiB a 20 MiB segment; a block serves only its stream's requests; a freed block that
// other streams used (record_stream) stays active, not allocated, until the next malloc finds those streams'
// events completed (synchronize alone completes no free).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/testing/stream_work.h"
#include "bytegrad/testing/timed_marks.h"

using namespace bytegrad;
using testing::MarkRecorder;
using testing::TimedMark;

namespace {

constexpr int64_t kMiB = 1 << 20;              // bytes
constexpr int64_t k20MiB = 5 * kMiB * 4;       // a float32 tensor of 5 * 2^20 elements: 20971520 B
constexpr int64_t k4MiB = kMiB * 4;            // of 2^20 elements: 4194304 B
constexpr int64_t kMediumSegment = 20 * kMiB;  // the segment a 1 to 10 MiB request gets: 20971520 B

std::vector<std::string> dependent_labels(const std::vector<TimedMark>& marks) {
  std::vector<std::string> labels;
  for (const TimedMark& m : marks)
    if (m.timing_dependent) labels.push_back(m.label);
  return labels;
}

// A side stream allocates and frees its own block; the default stream then allocates. No block is used on a
// stream other than its own, so no free waits on any stream's work, however busy the side stream is.
void streams_without_cross_use(MarkRecorder& r) {
  const Device dev = r.device();
  Stream side = get_stream_from_pool(dev);
  testing::queue_busy_work(side);
  Tensor a;
  {
    StreamGuard on_side(side);
    a = empty({kMiB}, device(dev));
  }
  r.mark("a on the side stream");
  a = Tensor();
  r.mark("a freed");
  Tensor b = empty({kMiB}, device(dev));
  r.mark("b on the default stream");
}

// x (20 MiB, a segment of its own) is used on a busy side stream (record_stream) and freed; the next malloc
// asks for 20 MiB again. `wait_first`: synchronize before that malloc.
void record_stream_then_malloc(MarkRecorder& r, bool wait_first) {
  const Device dev = r.device();
  Stream side = get_stream_from_pool(dev);
  Tensor x = empty({5 * kMiB}, device(dev));
  r.mark("x 20 MiB");
  side.wait_stream(current_stream(dev));
  testing::queue_busy_work(side);  // the side stream's kernels that read x
  x.record_stream(side);
  x = Tensor();
  r.mark("del x");
  if (wait_first) synchronize(dev);
  Tensor z = empty({5 * kMiB}, device(dev));
  r.mark("z 20 MiB");
  z = Tensor();
  synchronize(dev);
  r.mark("end");
}

void check_figures(const testing::MarkFigures& f, int64_t allocated, int64_t reserved, int64_t active, int64_t segments,
                   int64_t device_allocs) {
  CHECK(f.at("allocated_bytes.all.current") == allocated);
  CHECK(f.at("reserved_bytes.all.current") == reserved);
  CHECK(f.at("active_bytes.all.current") == active);
  CHECK(f.at("segment.all.current") == segments);
  CHECK(f.at("num_device_alloc") == device_allocs);
}

}  // namespace

TEST_CASE("timed marks: streams without cross-stream use depend on no timing") {
  for (Device dev : {kSim, kMeta}) {
    CAPTURE(dev.str());
    const auto marks = testing::marks_under_both_timings(dev, streams_without_cross_use);
    REQUIRE(marks.size() == 3);
    CHECK(dependent_labels(marks).empty());
    // b cannot take a's cached block (the side stream's): a segment of its own on the default stream.
    check_figures(marks[2].if_work_pending, k4MiB, 2 * kMediumSegment, k4MiB, 2, 2);
  }
}

TEST_CASE("timed marks: a record_stream free not waited for is flagged where the figures differ") {
  for (Device dev : {kSim, kMeta}) {
    CAPTURE(dev.str());
    const auto marks =
        testing::marks_under_both_timings(dev, [](MarkRecorder& r) { record_stream_then_malloc(r, false); });
    REQUIRE(marks.size() == 4);
    CHECK(dependent_labels(marks) == std::vector<std::string>{"z 20 MiB", "end"});

    // x: 20971520 B in a segment of 20971520 B.
    check_figures(marks[0].if_work_pending, k20MiB, k20MiB, k20MiB, 1, 1);
    // del x: the free waits for an event on the side stream, which only the next malloc looks at, under
    // either timing: allocated 0, x still active.
    check_figures(marks[1].if_work_pending, 0, k20MiB, k20MiB, 1, 1);
    CHECK(marks[1].if_work_done == marks[1].if_work_pending);
    // z, if the side stream's work is still queued: x's block stays out of reuse, so z takes a new segment:
    // reserved 2 * 20971520 = 41943040, active x + z = 41943040.
    check_figures(marks[2].if_work_pending, k20MiB, 2 * k20MiB, 2 * k20MiB, 2, 2);
    CHECK(marks[2].if_work_pending.at("reserved_bytes.all.peak") == 2 * k20MiB);
    // If it has finished: that malloc completes x's free first and z reuses x's block.
    check_figures(marks[2].if_work_done, k20MiB, k20MiB, k20MiB, 1, 1);
    CHECK(marks[2].if_work_done.at("reserved_bytes.all.peak") == k20MiB);
    CHECK(marks[2].differing() == std::vector<std::string>{"reserved_bytes.all.current", "active_bytes.all.current",
                                                           "active.all.current", "segment.all.current",
                                                           "reserved_bytes.all.peak", "num_device_alloc"});
    // end: z freed; synchronize completes the side stream's work but no free, so x stays active if pending.
    check_figures(marks[3].if_work_pending, 0, 2 * k20MiB, k20MiB, 2, 2);
    check_figures(marks[3].if_work_done, 0, k20MiB, 0, 1, 1);

    const std::string text = testing::describe_timed_marks(marks);
    CAPTURE(text);
    CHECK(text.find("x 20 MiB: allocated 20.00 MiB (20971520 B), reserved 20.00 MiB (20971520 B)\n") == 0);
    CHECK(text.find("z 20 MiB: depends on GPU timing\n"
                    "  if queued work is still pending: reserved 40.00 MiB (41943040 B), active 40.00 MiB "
                    "(41943040 B), active blocks 2, segments 2, max_reserved 40.00 MiB (41943040 B), "
                    "num_device_alloc 2\n"
                    "  if it has finished:             reserved 20.00 MiB (20971520 B), active 20.00 MiB "
                    "(20971520 B), active blocks 1, segments 1, max_reserved 20.00 MiB (20971520 B), "
                    "num_device_alloc 1\n") != std::string::npos);
  }
}

TEST_CASE("timed marks: the same program with a synchronize before the malloc is not flagged") {
  for (Device dev : {kSim, kMeta}) {
    CAPTURE(dev.str());
    const auto marks =
        testing::marks_under_both_timings(dev, [](MarkRecorder& r) { record_stream_then_malloc(r, true); });
    REQUIRE(marks.size() == 4);
    CHECK(dependent_labels(marks).empty());
    // The side stream's work has finished before the malloc under either timing: z reuses x's block.
    check_figures(marks[2].if_work_pending, k20MiB, k20MiB, k20MiB, 1, 1);
    check_figures(marks[3].if_work_pending, 0, k20MiB, 0, 1, 1);
  }
}

TEST_CASE("timed marks: the device's timing is restored; bad uses are refused with a reason") {
  set_simulated_timing(kSim, SimulatedTiming::work_done_at_launch);
  testing::marks_under_both_timings(kSim, [](MarkRecorder& r) { record_stream_then_malloc(r, false); });
  CHECK(simulated_timing(kSim) == SimulatedTiming::work_done_at_launch);
  set_simulated_timing(kSim, SimulatedTiming::work_pending_until_waited);

  CHECK_THROWS_WITH_AS(testing::marks_under_both_timings(kCpu, [](MarkRecorder&) {}),
                       "marks_under_both_timings(cpu): only a simulated device (sim or meta) can run under both "
                       "timings",
                       std::invalid_argument);
  // A program that asks whether the side stream is done makes different marks under each timing.
  auto branching = [](MarkRecorder& r) {
    Stream side = get_stream_from_pool(r.device());
    testing::queue_busy_work(side);
    r.mark(side.query() ? "side done" : "side busy");
  };
  CHECK_THROWS_WITH_AS(testing::marks_under_both_timings(kSim, branching),
                       "marks_under_both_timings: the program made different marks under the two timings ('side "
                       "busy' with work pending until waited for; 'side done' with work done at launch): its marks "
                       "cannot be compared one by one",
                       std::runtime_error);
  CHECK(simulated_timing(kSim) == SimulatedTiming::work_pending_until_waited);
}
