// PyTorch's MemPool programs on sim, meta and cuda: the figures at every mark, each pool's use count and
// segments, the out-of-memory messages and the allocator's trace equal PyTorch 2.11's on the H100
// (tests/data/pytorch_probes/mempool_h100.jsonl, recorded by tools/probes/mempool_probe.py; each program here
// is its namesake there, line for line, and frees what Python frees, in Python's order).
//
// The recorder holds the pools a program watches, as the probe's Recorder holds references to them: such a
// pool lives until the program forgets it (Python: `r.forget(name); del pool`) or, if never forgotten, until
// the trace has been read.
//
// Segments at a mark are compared as (default or private pool, stream, size, allocated, expandable, blocks),
// sorted; which private pool holds each is checked through the pools' own snapshots (segment counts). Traces
// are compared by segment and offset, as in stream_programs.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/core/json.h"
#include "bytegrad/memory/mem_pool.h"
#include "bytegrad/memory/memory_functions.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "bytegrad/testing/fresh_device.h"
#include "bytegrad/testing/stream_work.h"
#include "tests/streams/recorded_trace.h"

using namespace bytegrad;

namespace {

constexpr int64_t MiB = 1 << 20;  // elements: float32 tensors of MiB elements are 4 MiB

struct Mark {
  std::string label;
  std::map<std::string, int64_t> figures;
  std::vector<std::vector<uint64_t>> segments;               // [private?, stream, size, allocated, expandable, blocks]
  std::map<std::string, std::pair<int64_t, int64_t>> pools;  // name -> (use_count, segments)
};

struct Run {
  std::vector<Mark> marks;
  std::vector<std::string> errors;
  std::vector<TraceEntry> trace;
};

class Recorder {
 public:
  explicit Recorder(Device device) : device_(device) { caching_allocator(device).record_history(true); }
  ~Recorder() {
    pools_.clear();
    caching_allocator(device_).record_history(false);
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // A pool the recorder holds (the probe's `pool = MemPool(...); r.watch(name, pool)`).
  MemPool& watch(const std::string& name, bool use_on_oom = false, bool no_split = false) {
    auto& slot = pools_[name];
    slot = std::make_unique<MemPool>(device_, use_on_oom, no_split);
    return *slot;
  }
  // `r.forget(name); del pool`: the pool is destroyed now.
  void forget(const std::string& name) { pools_.erase(name); }

  void mark(const std::string& label) {
    Mark m{label, probe_data::figures_now(device_), {}, {}};
    for (const SegmentInfo& s : caching_allocator(device_).snapshot().segments)
      m.segments.push_back({s.pool_id != kDefaultMempool ? 1U : 0U, s.stream, s.total_size, s.allocated_size,
                            s.is_expandable ? 1U : 0U, s.blocks.size()});
    for (const auto& [name, pool] : pools_)
      m.pools[name] = {pool->use_count(), static_cast<int64_t>(pool->snapshot().size())};
    run_.marks.push_back(std::move(m));
  }

  void error(const std::exception& e) { run_.errors.push_back(e.what()); }

  Run finish() {
    run_.trace = probe_data::trace_now(device_);
    return run_;
  }

  Device device() const { return device_; }

 private:
  Device device_;
  std::map<std::string, std::unique_ptr<MemPool>> pools_;
  Run run_;
};

// The probe's limit_memory: what the allocator holds now plus extra_mib, and 1 MiB against rounding.
void limit_memory(Device dev, int64_t extra_mib) {
  const int64_t total = mem_get_info(dev).second;
  const int64_t allowed = memory_reserved(dev) + (extra_mib + 1) * MiB;
  set_per_process_memory_fraction(static_cast<double>(allowed) / static_cast<double>(total), dev);
}

// ---------------------------------------------------------------------- the programs (mempool_probe.py)

void pool_basic(Device dev, Recorder& r) {
  MemPool& pool = r.watch("pool");
  r.mark("pool made");
  auto x = empty({MiB}, device(dev));
  Tensor a, small;
  {
    auto in_pool = use_mem_pool(pool);
    a = empty({MiB}, device(dev));
    small = empty({1000}, device(dev));
    r.mark("inside: 4 MiB and 4000 B in the pool");
  }
  r.mark("outside");
  a = Tensor();
  small = Tensor();
  r.mark("pool blocks freed");
  auto b = empty({4 * MiB}, device(dev));
  auto c = empty({4 * MiB}, device(dev));
  r.mark("default 16 MiB twice");
  Tensor d;
  {
    auto in_pool = use_mem_pool(pool);
    d = empty({MiB}, device(dev));
  }
  r.mark("pool again: reuses its block");
  d = Tensor();
  empty_cache(dev);
  r.mark("empty_cache: live pool keeps its segments");
  r.forget("pool");
  r.mark("del pool: its free segments released");
  x = Tensor();
  b = Tensor();
  c = Tensor();
  empty_cache(dev);
  r.mark("end");
}

void pool_outlives_tensor(Device dev, Recorder& r) {
  auto pool = std::make_unique<MemPool>(dev);
  Tensor x, y;
  {
    auto in_pool = use_mem_pool(*pool);
    x = empty({5 * MiB}, device(dev));
    y = empty({256}, device(dev));
  }
  y = Tensor();
  pool.reset();
  r.mark("pool deleted, x alive");
  x = Tensor();
  r.mark("x freed into the released pool");
  empty_cache(dev);
  r.mark("empty_cache");
}

void empty_cache_inside_context(Device dev, Recorder& r) {
  MemPool& pool = r.watch("pool");
  auto x = empty({MiB}, device(dev));
  x = Tensor();
  {
    auto in_pool = use_mem_pool(pool);
    auto y = empty({MiB}, device(dev));
    y = Tensor();
    empty_cache(dev);
    r.mark("empty_cache inside the context");
  }
  empty_cache(dev);
  r.mark("empty_cache outside, pool alive");
  r.forget("pool");
  r.mark("pool deleted");
}

void nested_pools(Device dev, Recorder& r) {
  MemPool& p1 = r.watch("p1");
  MemPool& p2 = r.watch("p2");
  MemPool& p3 = r.watch("p3");
  std::vector<Tensor> data;
  {
    auto in_p1 = use_mem_pool(p1);
    data.push_back(empty({5 * MiB}, device(dev)));
    {
      auto in_p2 = use_mem_pool(p2);
      data.push_back(empty({5 * MiB}, device(dev)));
      {
        auto in_p3 = use_mem_pool(p3);
        data.push_back(empty({5 * MiB}, device(dev)));
        r.mark("innermost");
      }
      data.push_back(empty({5 * MiB}, device(dev)));
    }
    data.push_back(empty({5 * MiB}, device(dev)));
  }
  r.mark("after");
  while (!data.empty()) data.pop_back();  // Python's list.clear() drops the last item first
  r.mark("freed");
}

void no_split_pool(Device dev, Recorder& r) {
  MemPool& split = r.watch("split");
  MemPool& nosplit = r.watch("no_split", false, true);
  std::vector<Tensor> keep;
  for (int i = 0; i < 2; ++i) {
    {
      auto in_pool = use_mem_pool(split);
      keep.push_back(empty({MiB}, device(dev)));
    }
    {
      auto in_pool = use_mem_pool(nosplit);
      keep.push_back(empty({MiB}, device(dev)));
    }
    r.mark("4 MiB in each pool");
  }
  {
    auto in_pool = use_mem_pool(nosplit);
    keep.push_back(empty({100}, device(dev)));
  }
  r.mark("400 B in the no-split pool");
  while (!keep.empty()) keep.pop_back();
  r.mark("freed");
}

void use_on_oom(Device dev, Recorder& r) {
  MemPool& pool_no = r.watch("no");
  MemPool& pool_use = r.watch("use", true);
  limit_memory(dev, 80);
  Tensor a, b, c, e;
  {
    auto in_pool = use_mem_pool(pool_no);
    a = empty({10 * MiB}, device(dev));
  }
  {
    auto in_pool = use_mem_pool(pool_use);
    b = empty({10 * MiB}, device(dev));
  }
  r.mark("40 MiB in each pool");
  try {
    c = empty({10 * MiB}, device(dev));
  } catch (const OutOfMemoryError& error) {
    r.error(error);
  }
  r.mark("default 40 MiB: out of memory");
  a = Tensor();
  b = Tensor();
  c = empty({15 * MiB / 2}, device(dev));
  r.mark("default 30 MiB: served by the use_on_oom pool");
  try {
    auto d = empty({15 * MiB / 2}, device(dev));
  } catch (const OutOfMemoryError& error) {
    r.error(error);
  }
  r.mark("another 30 MiB: out of memory");
  c = Tensor();
  {
    auto in_pool = use_mem_pool(pool_use);
    e = empty({5 * MiB}, device(dev));
  }
  r.mark("pool_use 20 MiB");
  e = Tensor();
  r.forget("no");
  r.forget("use");
  set_per_process_memory_fraction(1.0, dev);
  r.mark("end");
}

void use_on_oom_order(Device dev, Recorder& r) {
  MemPool& pool_use = r.watch("use", true);
  limit_memory(dev, 80);
  Tensor b;
  {
    auto in_pool = use_mem_pool(pool_use);
    b = empty({10 * MiB}, device(dev));
  }
  b = Tensor();
  auto x = empty({MiB}, device(dev));
  x = Tensor();
  r.mark("free: 40 MiB in the pool, 20 MiB default");
  auto c = empty({15 * MiB / 2}, device(dev));
  r.mark("default 30 MiB");
  c = Tensor();
  r.forget("use");
  set_per_process_memory_fraction(1.0, dev);
}

void oom_message_private_pool(Device dev, Recorder& r) {
  MemPool& pool = r.watch("pool");
  limit_memory(dev, 60);
  Tensor a, s;
  {
    auto in_pool = use_mem_pool(pool);
    a = empty({5 * MiB}, device(dev));
    s = empty({1000}, device(dev));
  }
  a = Tensor();
  auto keep = empty({5 * MiB}, device(dev));
  r.mark("pool holds a free 20 MiB segment");
  try {
    auto z = empty({10 * MiB}, device(dev));
  } catch (const OutOfMemoryError& error) {
    r.error(error);
  }
  r.mark("after the out-of-memory error");
  keep = Tensor();
  s = Tensor();
  r.forget("pool");
  set_per_process_memory_fraction(1.0, dev);
}

void pool_side_stream(Device dev, Recorder& r) {
  MemPool& pool = r.watch("pool");
  Stream s = get_stream_from_pool(dev);
  Tensor a, b, c;
  {
    auto in_pool = use_mem_pool(pool);
    a = empty({MiB}, device(dev));
    StreamGuard on_s(s);
    b = empty({MiB}, device(dev));
  }
  r.mark("pool block on each stream");
  a = Tensor();
  b = Tensor();
  {
    auto in_pool = use_mem_pool(pool);
    StreamGuard on_s(s);
    c = empty({MiB}, device(dev));
  }
  r.mark("side stream reuses its own pool block");
  c = Tensor();
  r.forget("pool");
  synchronize(dev);
  r.mark("pool deleted");
}

void pool_expandable(Device dev, Recorder& r) {
  set_allocator_settings("expandable_segments:True");
  MemPool& pool = r.watch("pool");
  Tensor a;
  {
    auto in_pool = use_mem_pool(pool);
    a = empty({MiB}, device(dev));
  }
  auto b = empty({MiB}, device(dev));
  r.mark("4 MiB in the pool and in the default pool");
  a = Tensor();
  r.forget("pool");
  r.mark("pool deleted");
  b = Tensor();
  empty_cache(dev);
  set_allocator_settings("expandable_segments:False");
}

void record_stream_free_in_scope(Device dev, Recorder& r) {
  MemPool& pool = r.watch("pool");
  Stream s = get_stream_from_pool(dev);
  ones({1}, device(dev)).add_(1);  // the probe loads its kernels first
  testing::queue_busy_work(s);
  synchronize(dev);
  auto x = empty({MiB}, device(dev));
  s.wait_stream(current_stream(dev));
  {
    StreamGuard on_s(s);
    testing::queue_busy_work(s);  // torch.cuda._sleep: about a second
    x.add_(1);
  }
  x.record_stream(s);
  Tensor y;
  {
    auto in_pool = use_mem_pool(pool);
    x = Tensor();
    r.mark("x freed inside a scope");
    y = empty({MiB}, device(dev));
    r.mark("malloc inside the scope");
  }
  auto z = empty({MiB}, device(dev));
  r.mark("malloc after the scope, side stream busy");
  synchronize(dev);
  auto w = empty({MiB}, device(dev));
  r.mark("malloc after synchronize");
  y = Tensor();
  z = Tensor();
  w = Tensor();
  r.forget("pool");
  r.mark("end");
}

const std::map<std::string, std::function<void(Device, Recorder&)>>& programs() {
  static const std::map<std::string, std::function<void(Device, Recorder&)>> all = {
      {"pool_basic", pool_basic},
      {"pool_outlives_tensor", pool_outlives_tensor},
      {"empty_cache_inside_context", empty_cache_inside_context},
      {"nested_pools", nested_pools},
      {"no_split_pool", no_split_pool},
      {"use_on_oom", use_on_oom},
      {"use_on_oom_order", use_on_oom_order},
      {"oom_message_private_pool", oom_message_private_pool},
      {"pool_side_stream", pool_side_stream},
      {"pool_expandable", pool_expandable},
      {"record_stream_free_in_scope", record_stream_free_in_scope},
  };
  return all;
}

// ---------------------------------------------------------------------------------------- comparison

// The parts of an out-of-memory message that do not depend on the process (the CUDA context's size):
// "Tried to allocate X" and everything from "Of the allocated memory" to the advice.
std::string stable_message_part(const std::string& message) {
  const auto tried = message.find("Tried to allocate");
  const auto gpu = message.find(". GPU");
  const auto of = message.find("Of the allocated memory");
  const auto advice = message.find(" If reserved but unallocated");
  if (tried == std::string::npos || gpu == std::string::npos || of == std::string::npos) return message;
  return message.substr(tried, gpu - tried) + " | " +
         message.substr(of, advice == std::string::npos ? std::string::npos : advice - of);
}

std::string normalize(const Run& run) {
  probe_data::StreamNumbers stream_number(run.trace);
  std::ostringstream out;
  for (const Mark& m : run.marks) {
    out << "mark '" << m.label << "':";
    for (const auto& [key, value] : m.figures) out << " " << key << "=" << value;
    auto segs = m.segments;
    for (auto& seg : segs) seg[1] = static_cast<uint64_t>(stream_number(seg[1]));
    std::sort(segs.begin(), segs.end());
    out << "\n  segments";
    for (const auto& seg : segs) {
      out << " [" << (seg[0] ? "private" : "default");
      for (size_t i = 1; i < seg.size(); ++i) out << " " << seg[i];
      out << "]";
    }
    out << "\n  pools";
    for (const auto& [name, figures] : m.pools)
      out << " " << name << ": use_count " << figures.first << ", " << figures.second << " segments;";
    out << "\n";
  }
  for (const std::string& error : run.errors) out << "error: " << stable_message_part(error) << "\n";
  out << probe_data::normalized_trace(run.trace, stream_number);
  return out.str();
}

Run recorded(const std::string& program) {
  for (const json::Value& v : probe_data::program_recordings("mempool_h100.jsonl", program)) {
    Run run;
    for (const json::Value& m : v["marks"].items) {
      Mark mark{m["label"].string(), {}, {}, {}};
      mark.figures = probe_data::figures_of(m);
      for (const json::Value& seg : m["segments"].items)
        mark.segments.push_back({seg[0].integer() != 0 ? 1U : 0U, seg[1].unsigned_integer(), seg[2].unsigned_integer(),
                                 seg[3].unsigned_integer(), seg[4].boolean ? 1U : 0U, seg[5].unsigned_integer()});
      for (const auto& [name, pool] : m["pools"].members)
        mark.pools[name] = {pool["use_count"].integer(), pool["segments"].integer()};
      run.marks.push_back(std::move(mark));
    }
    for (const json::Value& e : v["errors"].items) run.errors.push_back(e.string());
    run.trace = probe_data::trace_of(v["trace"]);
    return run;
  }
  FAIL("no recording of " << program);
  return {};
}

// As the probe's run_one in a fresh process: an emptied cache, the statistics reset, then the program.
Run run_program(const std::string& program, Device dev) {
  empty_cache(dev);
  reset_accumulated_memory_stats(dev);
  reset_peak_memory_stats(dev);
  Recorder r(dev);
  programs().at(program)(dev, r);
  synchronize(dev);
  return r.finish();
}

void check_programs(Device dev) {
  for (const auto& [name, program] : programs()) {
    CAPTURE(name);
    CAPTURE(dev.str());
    const Run theirs = recorded(name);
    std::string ours;
    if (dev.type == DeviceType::cuda) {
      restart_streams(dev);
      ours = normalize(run_program(name, dev));
    } else {
      testing::FreshDevice fresh(dev);
      ours = normalize(run_program(name, dev));
    }
    CHECK(ours == normalize(theirs));
  }
}

}  // namespace

TEST_CASE("MemPool programs equal PyTorch's figures and traces on sim and meta") {
  check_programs(kSim);
  check_programs(kMeta);
}

TEST_CASE("MemPool programs equal PyTorch's figures and traces on cuda") {
  if (!cuda_is_available()) {
    MESSAGE("skipped: no GPU");
    return;
  }
  check_programs(kCuda);
}
