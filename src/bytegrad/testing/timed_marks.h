// Marks whose figures depend on GPU timing. On a GPU, when work queued on a stream finishes decides when a
// block freed with record_stream can be reused, so a program's figures can differ from run to run. sim and
// meta choose by a policy (SimulatedTiming, memory/stream_timeline.h): queued work stays pending until the
// program waits for it (the default), or completes as it is queued. marks_under_both_timings runs a program
// under each, from a fresh device each time, and flags every mark whose figures differ: on a GPU that mark
// can show either outcome.
//
//   auto marks = bytegrad::testing::marks_under_both_timings(bytegrad::kSim, [](bytegrad::testing::MarkRecorder& r) {
//     ...;  r.mark("after free");
//   });
//   std::cout << bytegrad::testing::describe_timed_marks(marks);
//   // after free: depends on GPU timing
//   //   if queued work is still pending: reserved 40.00 MiB (41943040 B), ...
//   //   if it has finished:             reserved 20.00 MiB (20971520 B), ...
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/raw_memory.h"

namespace bytegrad::testing {

// Figures by memory_stats key ("allocated_bytes.all.current", ...).
using MarkFigures = std::map<std::string, int64_t>;

// What a program calls at each mark: takes the figures PyTorch's stream probes take (tools/probes/
// stream_probe.py): allocated, reserved, active and inactive-split bytes, live blocks, active blocks,
// segments, their peaks, and the counters of syncs, retries, OOMs and device allocations and frees.
class MarkRecorder {
 public:
  explicit MarkRecorder(Device device) : device_(device) {}
  void mark(const std::string& label);
  Device device() const { return device_; }
  const std::vector<std::pair<std::string, MarkFigures>>& marks() const { return marks_; }

 private:
  Device device_;
  std::vector<std::pair<std::string, MarkFigures>> marks_;
};

// The figures each mark records, in the order describe_timed_marks prints them.
const std::vector<std::string>& timed_mark_figure_keys();

struct TimedMark {
  std::string label;
  MarkFigures if_work_pending;  // SimulatedTiming::work_pending_until_waited
  MarkFigures if_work_done;     // SimulatedTiming::work_done_at_launch
  bool timing_dependent = false;
  std::vector<std::string> differing() const;  // the keys whose figures differ, in timed_mark_figure_keys order
};

// Runs `program` twice on `device` (sim or meta), each time on a fresh allocator (FreshDevice, with
// `capacity` when given) under one policy, the device's policy restored afterwards. Throws
// std::invalid_argument for cpu and cuda, and std::runtime_error when the two runs make different marks
// (a program that branches on Stream::query or Event::query has no mark-by-mark comparison).
std::vector<TimedMark> marks_under_both_timings(Device device, const std::function<void(MarkRecorder&)>& program,
                                                std::optional<SimulatedCapacity> capacity = std::nullopt);

// One line per mark (allocated and reserved); a timing-dependent mark names the outcomes of the figures
// that differ: "if queued work is still pending: ..." and "if it has finished: ...".
std::string describe_timed_marks(const std::vector<TimedMark>& marks);

}  // namespace bytegrad::testing
