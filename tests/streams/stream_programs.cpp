// PyTorch's side-stream programs on sim, meta and cuda: the figures at every mark and the allocator's trace
// equal PyTorch 2.11's on the H100 (tests/data/pytorch_probes/streams_h100.jsonl, recorded by
// tools/probes/stream_probe.py; each program there is the same as its namesake here, line for line, and
// runs the same way: once as a warm-up, then from an emptied cache with the statistics reset, recorded).
//
// The probe keeps a stream busy with torch.cuda._sleep (about a second of GPU time) where a program needs
// work still queued on it; here testing::queue_busy_work does: a spinning kernel on cuda, and on sim and
// meta a work item that stays pending until the program waits for it (their default timing).
//
// Traces are compared by segment and offset: the n-th segment a program allocates, and where in it a block
// lies. Where the segments themselves land (the placement model) is tested elsewhere; the streams decide
// which segment and offset a block takes.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/core/json.h"
#include "bytegrad/testing/fresh_device.h"
#include "bytegrad/testing/stream_work.h"
#include "tests/streams/recorded_trace.h"
#include "bytegrad/testing/timed_marks.h"

using namespace bytegrad;

namespace {

constexpr int64_t MiB = 1 << 20;  // elements: float32 tensors of MiB elements are 4 MiB

struct Mark {
  std::string label;
  std::map<std::string, int64_t> figures;
  std::vector<std::vector<uint64_t>> segments;  // [stream, total_size, allocated_size], stream raw
};

struct Run {
  std::vector<Mark> marks;
  std::vector<TraceEntry> trace;
};

// The probe's mark: memory_stats figures and the snapshot's segments. A recorder that is not recording
// (the warm-up pass) takes no marks; one made on a testing::MarkRecorder hands its marks to that.
class Recorder {
 public:
  Recorder(Device device, bool recording) : device_(device), recording_(recording) {
    if (recording_) caching_allocator(device).record_history(true);
  }
  explicit Recorder(testing::MarkRecorder& forward)
      : device_(forward.device()), recording_(false), forward_(&forward) {}
  ~Recorder() {
    if (recording_) caching_allocator(device_).record_history(false);
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void mark(const std::string& label) {
    if (forward_) forward_->mark(label);
    if (!recording_) return;
    Mark m{label, probe_data::figures_now(device_), {}};
    for (const SegmentInfo& s : caching_allocator(device_).snapshot().segments)
      m.segments.push_back({s.stream, s.total_size, s.allocated_size});
    run_.marks.push_back(std::move(m));
  }

  Run finish() {
    run_.trace = probe_data::trace_now(device_);
    return run_;
  }

 private:
  Device device_;
  bool recording_;
  testing::MarkRecorder* forward_ = nullptr;
  Run run_;
};

void busy(const Stream& stream) { testing::queue_busy_work(stream); }

// ------------------------------------------------------------------------ the programs (stream_probe.py)

void cross_stream_free_busy(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  auto x = empty({MiB}, device(dev));
  r.mark("x 4 MiB");
  s.wait_stream(current_stream(dev));
  busy(s);
  Tensor y;
  {
    StreamGuard on_s(s);
    y = x * 2;
  }
  x.record_stream(s);
  x = Tensor();
  r.mark("del x, event pending");
  auto z = empty({MiB}, device(dev));
  r.mark("z 4 MiB while pending");
  synchronize(dev);
  r.mark("synchronize");
  auto w = empty({MiB}, device(dev));
  r.mark("w 4 MiB after synchronize");
  y = Tensor();
  z = Tensor();
  w = Tensor();
  r.mark("end");
}

void stream_owned_cache(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  Tensor x, small;
  {
    StreamGuard on_s(s);
    x = empty({MiB}, device(dev));
    small = empty({1000}, device(dev));
  }
  r.mark("x 4 MiB and 4000 B on side stream");
  x = Tensor();
  small = Tensor();
  r.mark("freed on side stream");
  auto y = empty({MiB}, device(dev));
  auto tiny = empty({1000}, device(dev));
  r.mark("same sizes on default stream");
  Tensor x2;
  {
    StreamGuard on_s(s);
    x2 = empty({MiB}, device(dev));
  }
  r.mark("side stream again: reuses its block");
  y = Tensor();
  tiny = Tensor();
  x2 = Tensor();
  empty_cache(dev);
  r.mark("empty_cache");
}

void empty_cache_pending(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  auto x = empty({5 * MiB}, device(dev));  // 20 MiB, its own segment
  s.wait_stream(current_stream(dev));
  busy(s);
  {
    StreamGuard on_s(s);
    x.add_(1);
  }
  x.record_stream(s);
  x = Tensor();
  r.mark("del x, event pending");
  empty_cache(dev);
  r.mark("empty_cache");
}

void oom_retry_pending(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  const int64_t total = mem_get_info(dev).second;
  empty_cache(dev);
  const int64_t limit = 64 * MiB;
  set_per_process_memory_fraction(static_cast<double>(limit) / static_cast<double>(total), dev);
  auto x = empty({10 * MiB}, device(dev));  // 40 MiB
  s.wait_stream(current_stream(dev));
  busy(s);
  {
    StreamGuard on_s(s);
    x.add_(1);
  }
  x.record_stream(s);
  x = Tensor();
  r.mark("del x 40 MiB, event pending");
  auto y = empty({10 * MiB}, device(dev));
  r.mark("y 40 MiB: retry after freeing pending");
  y = Tensor();
  set_per_process_memory_fraction(1.0, dev);
  r.mark("end");
}

void prefetch_synchronized(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  auto host = randn({MiB}, device(kCpu));
  for (int i = 0; i < 3; ++i) {
    Tensor batch;
    {
      StreamGuard on_s(s);
      batch = host.to(dev);
    }
    current_stream(dev).wait_stream(s);
    batch.record_stream(current_stream(dev));
    auto out = batch * 2;
    batch = Tensor();
    r.mark("step " + std::to_string(i) + ": batch freed, out live");
    out = Tensor();
    synchronize(dev);
    r.mark("step " + std::to_string(i) + ": synchronized");
  }
}

void prefetch_overlapped(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  auto host = randn({MiB}, device(kCpu));
  Tensor next;
  {
    StreamGuard on_s(s);
    next = host.to(dev);
  }
  for (int i = 0; i < 4; ++i) {
    current_stream(dev).wait_stream(s);
    Tensor batch = next;
    batch.record_stream(current_stream(dev));
    busy(current_stream(dev));
    auto out = batch * 2;
    {
      StreamGuard on_s(s);
      next = host.to(dev);
    }
    batch = Tensor();
    out = Tensor();
    r.mark("step " + std::to_string(i));
  }
  synchronize(dev);
  next = Tensor();
  r.mark("end");
}

void idle_stream_record(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  synchronize(dev);
  auto x = empty({MiB}, device(dev));
  synchronize(dev);
  x.record_stream(s);
  x = Tensor();
  r.mark("del x, idle stream");
  auto y = empty({MiB}, device(dev));
  r.mark("y 4 MiB");
}

void events_and_wait(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  Event ev;
  busy(s);
  Tensor y;
  {
    StreamGuard on_s(s);
    y = ones({MiB}, device(dev));
  }
  ev.record(s);
  current_stream(dev).wait_event(ev);
  auto z = y + 1;
  y.record_stream(current_stream(dev));
  y = Tensor();
  r.mark("y (side) freed, used on default");
  Tensor y2, y3;
  {
    StreamGuard on_s(s);
    y2 = ones({MiB}, device(dev));
  }
  r.mark("y2 on side stream while default is waiting");
  ev.synchronize();
  synchronize(dev);
  {
    StreamGuard on_s(s);
    y3 = ones({MiB}, device(dev));
  }
  r.mark("y3 on side stream after synchronize");
  z = Tensor();
  y2 = Tensor();
  y3 = Tensor();
  r.mark("end");
}

void three_streams(Device dev, Recorder& r) {
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(get_stream_from_pool(dev));
  std::vector<Tensor> keep;
  for (const Stream& s : streams) {
    StreamGuard on_s(s);
    keep.push_back(empty({256}, device(dev)));
    keep.push_back(empty({2 * MiB}, device(dev)));
  }
  r.mark("two blocks on each of 3 streams");
  while (!keep.empty()) keep.pop_back();  // Python's list.clear() drops the last item first
  r.mark("all freed");
  empty_cache(dev);
  r.mark("empty_cache");
}

void side_stream_matmul(Device dev, Recorder& r) {
  Stream s = get_stream_from_pool(dev);
  auto a = randn({256, 256}, device(dev));
  auto w = randn({256, 256}, device(dev));
  auto b = randn({256}, device(dev));
  r.mark("operands");
  auto c = matmul(a, w);
  r.mark("product on default stream");
  Tensor d, e;
  {
    StreamGuard on_s(s);
    d = matmul(a, w);
  }
  r.mark("product on side stream");
  {
    StreamGuard on_s(s);
    e = linear(a, w, b);
  }
  r.mark("linear with bias on side stream");
  c = Tensor();
  d = Tensor();
  e = Tensor();
  r.mark("end");
  a = Tensor();  // as Python clears the frame's locals: in the order they were made
  w = Tensor();
  b = Tensor();
}

const std::map<std::string, std::function<void(Device, Recorder&)>>& programs() {
  static const std::map<std::string, std::function<void(Device, Recorder&)>> all = {
      {"cross_stream_free_busy", cross_stream_free_busy},
      {"stream_owned_cache", stream_owned_cache},
      {"empty_cache_pending", empty_cache_pending},
      {"oom_retry_pending", oom_retry_pending},
      {"prefetch_synchronized", prefetch_synchronized},
      {"prefetch_overlapped", prefetch_overlapped},
      {"idle_stream_record", idle_stream_record},
      {"events_and_wait", events_and_wait},
      {"three_streams", three_streams},
      {"side_stream_matmul", side_stream_matmul},
  };
  return all;
}

// ---------------------------------------------------------------------------------------- comparison

// Both sides alike (recorded_trace.h): streams numbered by first appearance in the trace, trace addresses as
// (n-th segment allocated, offset in it).
std::string normalize(const Run& run) {
  probe_data::StreamNumbers stream_number(run.trace);
  std::ostringstream out;
  for (const Mark& m : run.marks) {
    out << "mark '" << m.label << "':";
    for (const auto& [key, value] : m.figures) out << " " << key << "=" << value;
    std::vector<std::vector<uint64_t>> segs;
    for (const auto& seg : m.segments) segs.push_back({static_cast<uint64_t>(stream_number(seg[0])), seg[1], seg[2]});
    std::sort(segs.begin(), segs.end());
    out << " segments";
    for (const auto& seg : segs) out << " [" << seg[0] << " " << seg[1] << " " << seg[2] << "]";
    out << "\n";
  }
  return out.str() + probe_data::normalized_trace(run.trace, stream_number);
}

std::vector<std::pair<int, Run>> recorded(const std::string& program) {
  std::vector<std::pair<int, Run>> runs;
  for (const json::Value& v : probe_data::program_recordings("streams_h100.jsonl", program)) {
    Run run;
    for (const json::Value& m : v["marks"].items) {
      Mark mark{m["label"].string(), probe_data::figures_of(m), {}};
      for (const json::Value& seg : m["segments"].items)
        mark.segments.push_back({seg[0].unsigned_integer(), seg[1].unsigned_integer(), seg[2].unsigned_integer()});
      run.marks.push_back(std::move(mark));
    }
    run.trace = probe_data::trace_of(v["trace"]);
    runs.emplace_back(static_cast<int>(v["run"].integer()), std::move(run));
  }
  return runs;
}

// As the probe's run_one: a warm-up pass (the probe's loads CUDA's kernels lazily, which would otherwise
// wait for busy streams), then the recorded pass from an emptied cache with the statistics reset.
void warm_up_then_reset(const std::string& program, Device dev) {
  Recorder warm_up(dev, false);
  programs().at(program)(dev, warm_up);
  synchronize(dev);
  set_per_process_memory_fraction(1.0, dev);
  empty_cache(dev);
  reset_accumulated_memory_stats(dev);
  reset_peak_memory_stats(dev);
}

Run run_program(const std::string& program, Device dev) {
  warm_up_then_reset(program, dev);
  Recorder r(dev, true);
  programs().at(program)(dev, r);
  synchronize(dev);  // as the probe, before reading the trace
  return r.finish();
}

Run run_here(const std::string& program, Device dev) {
  if (dev.type == DeviceType::cuda) {
    // As the probe's fresh process: the first pool stream next, and no cuBLAS workspaces parked yet.
    restart_streams(dev);
    clear_blas_workspaces();
    return run_program(program, dev);
  }
  testing::FreshDevice fresh(dev);
  return run_program(program, dev);
}

void check_programs(Device dev) {
  for (const auto& [name, program] : programs()) {
    const auto runs = recorded(name);
    REQUIRE_MESSAGE(!runs.empty(), name << " has no recording");
    CAPTURE(name);
    CAPTURE(dev.str());
    const std::string ours = normalize(run_here(name, dev));
    for (const auto& [index, run] : runs) {
      CAPTURE(index);
      CHECK(ours == normalize(run));
    }
  }
}

}  // namespace

TEST_CASE("side-stream programs equal PyTorch's figures and traces on sim and meta") {
  check_programs(kSim);
  check_programs(kMeta);
}

// Which marks of the recorded programs depend on GPU timing: those where the figures differ between work
// still queued (the default timing, what the H100 showed: the goldens above) and work already done. Each
// follows from the allocator's rules: a freed block used on another stream (record_stream) is reused only
// once a malloc finds that stream's event completed.
TEST_CASE("side-stream programs: the marks that depend on GPU timing") {
  const std::map<std::string, std::vector<std::string>> dependent = {
      // z's malloc: x's block is free if the side stream is done (z takes it, merged with the rest of its
      // segment), pending if not (z takes the rest); synchronize then frees nothing, so x stays active.
      {"cross_stream_free_busy", {"z 4 MiB while pending", "synchronize"}},
      // y's malloc reuses x's 40 MiB if the side stream is done; if not, no room under the 64 MiB limit: a
      // retry after freeing pending blocks (num_alloc_retries, num_sync_all_streams, a segment freed and made).
      {"oom_retry_pending", {"y 40 MiB: retry after freeing pending", "end"}},
      // Each batch is used on the busy default stream: from step 1 on, the prefetch on the side stream reuses
      // the previous batch's block if the default stream is done, and takes a new one if not.
      {"prefetch_overlapped", {"step 1", "step 2", "step 3", "end"}},
      // y2's malloc on the side stream reuses y's block only if the default stream's wait has finished.
      {"events_and_wait", {"y2 on side stream while default is waiting"}},
      // No free waits on a stream still busy at the next malloc, or none before a synchronize.
      {"stream_owned_cache", {}},
      {"empty_cache_pending", {}},
      {"prefetch_synchronized", {}},
      {"idle_stream_record", {}},
      {"three_streams", {}},
      {"side_stream_matmul", {}},
  };
  for (Device dev : {kSim, kMeta}) {
    for (const auto& [name, body] : programs()) {
      CAPTURE(dev.str());
      CAPTURE(name);
      REQUIRE(dependent.count(name) == 1);
      const auto marks = testing::marks_under_both_timings(dev, [&, name = name](testing::MarkRecorder& m) {
        warm_up_then_reset(name, dev);
        Recorder r(m);
        programs().at(name)(dev, r);
      });
      std::vector<std::string> flagged;
      for (const testing::TimedMark& mark : marks)
        if (mark.timing_dependent) flagged.push_back(mark.label);
      CAPTURE(testing::describe_timed_marks(marks));
      CHECK(flagged == dependent.at(name));
    }
  }
}

TEST_CASE("side-stream programs equal PyTorch's figures and traces on cuda") {
  if (!cuda_is_available()) {
    MESSAGE("skipped: no GPU");
    return;
  }
  check_programs(kCuda);
}
