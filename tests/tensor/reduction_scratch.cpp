// PyTorch's CUDA reduction scratch, event for event: every "reduce" case PyTorch 2.11 recorded on an H100
// (tests/data/pytorch_probes/events.jsonl, made by tools/probes/pytorch_event_probe.py) is run on sim with
// the allocator's history on, and the op's alloc/free sequence (requested bytes, in order: outputs, an
// integer sum's int64 copy, staging buffer, semaphores, their frees) must equal PyTorch's. All 803 are run,
// norm (linalg_vector_norm) and var (the Welford kernel) included; an op bytegrad lacked would be skipped
// and counted.
#include <map>
#include <regex>
#include <sstream>

#include "helpers.h"
#include "bytegrad/kernels/reduce_scratch.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/pytorch_probes.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

using Events = AllocationEvents;

struct ReduceCase {
  std::string name;  // e.g. "sum [1024, 512] dims=(0,) f32"
  std::string op;
  Shape shape;
  bool transposed = false;
  bool all_dims = true;
  Shape dims;
  ScalarType dtype = ScalarType::float32;
  Events events;
};

Shape parse_ints(const std::string& text) {
  Shape out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (item.find_first_of("0123456789") != std::string::npos) out.push_back(std::stoll(item));
  return out;
}

std::vector<ReduceCase> read_reduce_cases() {
  static const std::regex case_re(R"re((\w+) \[([0-9, ]*)\](\.t\(\))? dims=(None|\(([0-9, ]*)\)) (\w+))re");
  static const std::map<std::string, ScalarType> dtypes = {{"f32", ScalarType::float32},   {"f16", ScalarType::float16},
                                                           {"bf16", ScalarType::bfloat16}, {"f64", ScalarType::float64},
                                                           {"i64", ScalarType::int64},     {"i32", ScalarType::int32},
                                                           {"u8", ScalarType::uint8},      {"bool", ScalarType::bool_}};
  std::vector<ReduceCase> cases;
  for (const Json& row : probe_rows("reduce")) {
    const std::string& name = row["case"].string();
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_match(name, m, case_re), name);
    ReduceCase c;
    c.op = m[1];
    c.shape = parse_ints(m[2]);
    c.transposed = m[3].matched;
    c.all_dims = m[4] == "None";
    if (!c.all_dims) c.dims = parse_ints(m[5]);
    c.dtype = dtypes.at(m[6]);
    c.name = name;
    c.events = events_of(row["events"]);
    cases.push_back(std::move(c));
  }
  return cases;
}

// Runs the case's op as the probe does (x.sum(), x.sum(dims), x.max(dims[0]), ...); returns its results.
std::vector<Tensor> run_case(const ReduceCase& c, const Tensor& x) {
  const std::string& op = c.op;
  const int64_t d0 = c.dims.empty() ? 0 : c.dims[0];
  if (op == "sum") return {c.all_dims ? sum(x) : sum(x, c.dims)};
  if (op == "mean") return {c.all_dims ? mean(x) : mean(x, c.dims)};
  if (op == "prod" && c.all_dims) return {prod(x)};
  if (op == "norm") return {c.all_dims ? norm(x) : norm(x, c.dims)};  // x.norm(), x.norm(dim=dims)
  if (op == "var") return {c.all_dims ? var(x) : var(x, c.dims)};     // x.var(), x.var(dims)
  if (op == "amax") return {c.all_dims ? amax(x) : amax(x, c.dims)};
  if (op == "argmax") return {c.all_dims ? argmax(x) : argmax(x, d0)};
  if (op == "max" || op == "min") {
    if (c.all_dims) return {op == "max" ? max(x) : min(x)};
    ValuesIndices r = op == "max" ? max(x, d0) : min(x, d0);
    return {r.values, r.indices};
  }
  return {};
}

size_t results_count(const ReduceCase& c) { return (c.op == "max" || c.op == "min") && !c.all_dims ? 2 : 1; }

bool supported(const ReduceCase& c) {
  return c.op == "sum" || c.op == "mean" || (c.op == "prod" && c.all_dims) || c.op == "amax" || c.op == "argmax" ||
         c.op == "max" || c.op == "min" || c.op == "norm" || c.op == "var";
}

// Runs every case on `on` and checks its events; reports how many matched, had scratch, were skipped (by op).
void check_all_cases(Device on) {
  const std::vector<ReduceCase> cases = read_reduce_cases();
  REQUIRE(cases.size() == 803);
  fresh(on);
  CachingAllocator& allocator = caching_allocator(on);
  std::map<std::string, int> skipped;  // op -> cases
  int matched = 0, with_scratch = 0;
  for (const ReduceCase& c : cases) {
    if (!supported(c)) {
      ++skipped[c.op];
      continue;
    }
    CAPTURE(c.name);
    Events events;
    {
      Tensor x = zeros(c.shape, TensorOptions{c.dtype, on});
      if (c.transposed) x = x.t();
      std::vector<Tensor> results;  // held until recording stops, as the probe held its outputs
      events = allocation_events(on, [&] { results = run_case(c, x); });
    }
    allocator.empty_cache();
    CHECK(events == c.events);
    if (events == c.events) {
      ++matched;
      if (events.size() > results_count(c)) ++with_scratch;
    }
  }
  int skipped_total = 0;
  for (const auto& [op, n] : skipped) {
    MESSAGE(on.str() << ": " << n << " " << op << " cases skipped: bytegrad has no " << op);
    skipped_total += n;
  }
  MESSAGE(on.str() << ": " << matched << " of " << cases.size() - skipped_total
                   << " supported reduce cases match PyTorch event for event (" << with_scratch
                   << " of them with an int64 copy or scratch); " << skipped_total << " skipped");
  CHECK(matched + skipped_total == static_cast<int>(cases.size()));
  CHECK(allocated(on) == 0);
}

}  // namespace

TEST_CASE("every PyTorch-recorded reduction allocates and frees its scratch in PyTorch's order (sim)") {
  check_all_cases(kSim);
}

TEST_CASE("every PyTorch-recorded reduction allocates and frees its scratch in PyTorch's order (meta)") {
  check_all_cases(kMeta);
}

TEST_CASE("the scratch follows the device's SM count: a simulated card with half the H100's SMs") {
  // sum of 16777216 floats: 512 threads per block, 4 blocks per SM. On 132 SMs the grid targets 528 blocks
  // (2112-byte buffer, one float each); on 66 SMs, 264 (1056 bytes). One grid column: one semaphore.
  SimulatedCapacity half;
  half.multiprocessor_count = 66;
  configure_simulated_device(kMeta, half);
  {
    Tensor x = empty({16777216}, TensorOptions{ScalarType::float32, kMeta});
    caching_allocator(kMeta).record_history(true);
    Tensor s = sum(x);
    std::vector<std::pair<size_t, std::string>> allocs;
    for (const TraceEntry& e : caching_allocator(kMeta).snapshot().trace)
      if (e.action == TraceAction::alloc) allocs.emplace_back(e.size, e.tag);
    caching_allocator(kMeta).record_history(false);
    const std::vector<std::pair<size_t, std::string>> expected = {{4, "sum"}, {1056, "scratch"}, {4, "scratch"}};
    CHECK(allocs == expected);
  }
  configure_simulated_device(kMeta, SimulatedCapacity{});
  CHECK(device_launch_limits(kMeta).multiprocessor_count == 132);
  CHECK(device_launch_limits(kMeta).max_threads_per_multiprocessor == 2048);
  // The pure rule with the H100's figures.
  ReduceIterGeometry g;
  g.input_sizes = {16777216};
  g.input_strides = {1};
  g.output_sizes = {1};
  g.output_strides = {1};
  const ReduceScratch h100 = reduce_scratch(g, ReduceKernelTraits{}, ReduceDeviceLimits{});
  CHECK(h100.buffer_bytes == 2112);
  CHECK(h100.semaphore_bytes == 4);
}
