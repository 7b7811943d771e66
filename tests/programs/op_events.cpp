// bytegrad's allocator events per op (forward and backward) and per optimizer step against PyTorch's, from
// tests/data/pytorch_probes/events.jsonl ("ops" and "optim" rows, recorded on the H100 by
// tools/probes/pytorch_event_probe.py: [["alloc"|"free", requested bytes], ...] for the op alone, its inputs
// and the backward's ones-like gradient made before recording). Each case is rebuilt here with the same
// shapes and replayed on sim (on meta where the inputs exceed 2^24 elements or the product 2^33 flops:
// meta allocates exactly as sim, and the CPU kernels would take minutes), under CUBLAS_WORKSPACE_CONFIG=:0:0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/optim/adam.h"
#include "bytegrad/optim/sgd.h"
#include "programs/checks.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/json.h"
#include "tests/support/pytorch_probes.h"

using namespace bytegrad;
using namespace bytegrad::programs;
using namespace bytegrad::testing;

namespace {

// ------------------------------------------------------------------------ event sequences
using Events = AllocationEvents;

std::string show(const Events& events) {
  std::string out;
  for (const auto& [what, bytes] : events) out += (out.empty() ? "" : ", ") + what + " " + std::to_string(bytes);
  return "[" + out + "]";
}

// PyTorch's sequences were recorded with the default CUBLAS_WORKSPACE_CONFIG in one process: the first
// matrix product of each thread parks a 32 MiB cuBLAS workspace (the forward's on the main thread, then
// the backward's on the autograd thread) and the first bias-fused one a 1 MiB cuBLASLt block, none of
// them freed. bytegrad models those (tensor/blas_workspace.h), but replays each case here with the
// workspaces off, so they are dropped from PyTorch's sequence: a 32 MiB allocation never freed within
// the sequence, and a 1 MiB allocation right after it.
Events without_workspaces(const Events& events) {
  constexpr int64_t kCublas = 33554432, kCublasLt = 1048576;
  Events out;
  bool after_workspace = false;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& [what, bytes] = events[i];
    if (what == "alloc" && bytes == kCublas) {
      bool freed = false;
      for (size_t j = i + 1; j < events.size(); ++j)
        freed = freed || (events[j] == std::make_pair(std::string("free"), kCublas));
      if (!freed) {
        after_workspace = true;
        continue;
      }
    }
    if (after_workspace && what == "alloc" && bytes == kCublasLt) {
      after_workspace = false;
      continue;
    }
    after_workspace = false;
    out.push_back(events[i]);
  }
  return out;
}

// Runs fn with the allocator's history on and returns its alloc / free_completed events.

std::vector<int64_t> ints_in(const std::string& text) {
  std::vector<int64_t> out;
  const std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoll(it->str()));
  return out;
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// ------------------------------------------------------------------------ the "ops" cases
struct OpCase {
  std::function<std::vector<Tensor>(Device)> inputs;  // made before recording
  std::function<Tensor(const std::vector<Tensor>&)> op;
  bool heavy = false;  // run on meta
};

Tensor rg(const Shape& s, Device d) { return randn(s, TensorOptions{ScalarType::float32, d}).requires_grad_(); }

// The op of a case named as in pytorch_event_probe.py's ops_cases(); nullopt when bytegrad lacks it.
std::optional<OpCase> op_case(const std::string& name) {
  const std::vector<int64_t> n = ints_in(name.substr(name.find('[')));  // the shapes (and idx=), not "3d"
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  const auto shape_of = [&](size_t from, size_t count) { return Shape(n.begin() + from, n.begin() + from + count); };
  const double inf = std::numeric_limits<double>::infinity();
  OpCase c;
  if (starts("cross_entropy ") || starts("nll_loss ")) {
    const Shape s = shape_of(0, 2);
    const Reduction red = name.find(" sum ") != std::string::npos    ? Reduction::sum
                          : name.find(" none ") != std::string::npos ? Reduction::none
                                                                     : Reduction::mean;
    const bool ce = starts("cross_entropy ");
    const size_t smoothing_at = name.find(" ls=");  // "cross_entropy ls=0.1 mean [64,10]": label_smoothing
    const double smoothing = smoothing_at == std::string::npos ? 0.0 : std::stod(name.substr(smoothing_at + 4));
    const bool weighted = name.find(" weight ") != std::string::npos;  // class weights rand(C), made first
    c.inputs = [s, weighted](Device d) {
      std::vector<Tensor> in{rg(s, d), randint(0, s[1], {s[0]}, TensorOptions{ScalarType::int64, d})};
      if (weighted) in.push_back(rand({s[1]}, TensorOptions{ScalarType::float32, d}));
      return in;
    };
    c.op = [ce, red, smoothing](const std::vector<Tensor>& in) {
      const std::optional<Tensor> weight = in.size() > 2 ? std::optional<Tensor>(in[2]) : std::nullopt;
      return ce ? cross_entropy(
                      in[0], in[1],
                      {.weight = weight, .ignore_index = -100, .reduction = red, .label_smoothing = smoothing})
                : nll_loss(in[0], in[1], red, -100, weight);
    };
    c.heavy = numel_of(s) > (1 << 24);
  } else if (starts("log_softmax ") || starts("softmax ")) {
    const Shape s = shape_of(0, 2);
    const bool log = starts("log_");
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d)}; };
    c.op = [log](const std::vector<Tensor>& in) { return log ? log_softmax(in[0], -1) : softmax(in[0], -1); };
    c.heavy = numel_of(s) > (1 << 24);
  } else if (starts("mse_loss ") || starts("sum [") || starts("mean [")) {
    const Shape s(n.begin(), n.end());
    const bool mse = starts("mse_loss "), sum_red = name.find(" sum ") != std::string::npos || starts("sum [");
    c.inputs = [s, mse](Device d) {
      std::vector<Tensor> in{rg(s, d)};
      if (mse) in.push_back(randn(s, TensorOptions{ScalarType::float32, d}));
      return in;
    };
    c.op = [mse, sum_red](const std::vector<Tensor>& in) {
      if (mse) return mse_loss(in[0], in[1], sum_red ? Reduction::sum : Reduction::mean);
      return sum_red ? sum(in[0]) : mean(in[0]);
    };
  } else if (starts("linear3d bias ")) {
    const Shape s = shape_of(0, 3);
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d), rg({s[2], s[2]}, d), rg({s[2]}, d)}; };
    c.op = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  } else if (starts("linear ")) {
    const int64_t rows = n[0], in_f = n[1], out_f = n[2];
    const bool bias = name.find(" bias ") != std::string::npos;
    c.inputs = [=](Device d) {
      std::vector<Tensor> in{rg({rows, in_f}, d), rg({out_f, in_f}, d)};
      if (bias) in.push_back(rg({out_f}, d));
      return in;
    };
    c.op = [bias](const std::vector<Tensor>& in) { return bias ? linear(in[0], in[1], in[2]) : linear(in[0], in[1]); };
    c.heavy = rows * in_f * out_f > (int64_t{1} << 32);
  } else if (starts("embedding ")) {
    const int64_t v = n[0], dim = n[1], count = n[2];
    c.inputs = [=](Device d) {
      return std::vector<Tensor>{randint(0, v, {count}, TensorOptions{ScalarType::int64, d}), rg({v, dim}, d)};
    };
    c.op = [](const std::vector<Tensor>& in) { return embedding(in[1], in[0]); };
    c.heavy = v * dim > (1 << 24);
  } else if (starts("masked_fill causal ") || starts("masked_fill_ inplace ") || starts("add float mask ")) {
    const Shape s = shape_of(0, 4);
    const int64_t l = s[3];
    const bool add = starts("add "), inplace = starts("masked_fill_");
    c.inputs = [=](Device d) {
      Tensor mask = triu(ones({l, l}, TensorOptions{ScalarType::bool_, d}), 1);
      if (add) mask = zeros({l, l}, TensorOptions{ScalarType::float32, d}).masked_fill(mask, -inf);
      return std::vector<Tensor>{rg(s, d), mask};
    };
    c.op = [=](const std::vector<Tensor>& in) {
      if (add) return (in[0] + in[1]).softmax(-1);
      if (inplace) {
        Tensor scaled = in[0] * 1.0;
        scaled.masked_fill_(in[1], -inf);
        return scaled.softmax(-1);
      }
      return in[0].masked_fill(in[1], -inf).softmax(-1);
    };
  } else if (starts("gelu ") || starts("relu ") || starts("dropout ") || starts("sigmoid ") || starts("tanh ") ||
             starts("exp ") || starts("expm1 ") || starts("silu ")) {
    const Shape s(n.begin(), n.end());
    const std::string op = name.substr(0, name.find(' '));
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d)}; };
    c.op = [op](const std::vector<Tensor>& in) {
      if (op == "exp") return exp(in[0]);
      if (op == "expm1") return expm1(in[0]);
      if (op == "gelu") return gelu(in[0]);
      if (op == "relu") return relu(in[0]);
      if (op == "sigmoid") return sigmoid(in[0]);
      if (op == "tanh") return tanh(in[0]);
      if (op == "silu") return silu(in[0]);
      return dropout(in[0], 0.1, true);
    };
  } else if (starts("reciprocal ") || starts("clamp_min ") || starts("clamp_max ") || starts("clamp ") ||
             starts("rsqrt ") || starts("cos ") || starts("sin ") || starts("leaky_relu ")) {
    const Shape s(n.begin(), n.end());
    const std::string op = name.substr(0, name.find(' '));
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d)}; };
    c.op = [op](const std::vector<Tensor>& in) {
      if (op == "reciprocal") return reciprocal(in[0]);
      if (op == "rsqrt") return rsqrt(in[0]);
      if (op == "cos") return cos(in[0]);
      if (op == "sin") return sin(in[0]);
      if (op == "leaky_relu") return leaky_relu(in[0], 0.01);
      if (op == "clamp_min") return clamp_min(in[0], -0.5);
      if (op == "clamp_max") return clamp_max(in[0], 0.5);
      return clamp(in[0], -0.5, 0.5);
    };
  } else if (starts("binary_cross_entropy_with_logits ")) {  // "... mean [1024, 1024]": target rand, no grad
    const Shape s(n.begin(), n.end());
    const Reduction red = name.find(" sum ") != std::string::npos    ? Reduction::sum
                          : name.find(" none ") != std::string::npos ? Reduction::none
                                                                     : Reduction::mean;
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d), rand(s, TensorOptions{ScalarType::float32, d})}; };
    c.op = [red](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], red); };
  } else if (starts("repeat_interleave ")) {  // "repeat_interleave r=2 dim=1 [64, 32]"
    const Shape s(n.begin(), n.end());
    const int64_t repeats = std::stoll(name.substr(name.find("r=") + 2));
    const int64_t dim = std::stoll(name.substr(name.find("dim=") + 4));
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d)}; };
    c.op = [repeats, dim](const std::vector<Tensor>& in) { return repeat_interleave(in[0], repeats, dim); };
  } else if (starts("cumsum ") || starts("sort ") || starts("topk ")) {
    // "cumsum dim=1 [1024, 1024]", "cumsum dim=1 i32 [64, 1000]" (no grad), "sort dim=1 desc=0 [...]",
    // "topk k=5 dim=1 largest=1 [...]": the values are the case's result (indices saved by the node).
    const Shape s(n.begin(), n.end());
    const auto param = [&](const char* key) { return std::stoll(name.substr(name.find(key) + std::strlen(key))); };
    const int64_t dim = param("dim=");
    const std::string op = name.substr(0, name.find(' '));
    const bool int32_input = name.find(" i32 ") != std::string::npos;
    c.inputs = [s, int32_input](Device d) {
      if (int32_input) return std::vector<Tensor>{randint(0, 5, s, TensorOptions{ScalarType::int32, d})};
      return std::vector<Tensor>{rg(s, d)};
    };
    if (op == "cumsum") {
      c.op = [dim](const std::vector<Tensor>& in) { return cumsum(in[0], dim); };
    } else if (op == "sort") {
      const bool descending = param("desc=") == 1;
      c.op = [dim, descending](const std::vector<Tensor>& in) { return sort(in[0], dim, descending).first; };
    } else {
      const int64_t k = param("k=");
      const bool largest = param("largest=") == 1;
      c.op = [k, dim, largest](const std::vector<Tensor>& in) { return topk(in[0], k, dim, largest).first; };
    }
  } else if (starts("fused_rms_norm ")) {  // "fused_rms_norm weight norm=2 [16, 64, 256]": F.rms_norm
    const Shape s(n.begin(), n.end());
    const auto dims = static_cast<size_t>(std::stoll(name.substr(name.find("norm=") + 5)));
    const Shape normalized(s.end() - static_cast<std::ptrdiff_t>(dims), s.end());
    const bool affine = name.find(" weight ") != std::string::npos;
    c.inputs = [s, normalized, affine](Device d) {
      std::vector<Tensor> in{rg(s, d)};
      if (affine) in.push_back(rg(normalized, d));
      return in;
    };
    c.op = [normalized](const std::vector<Tensor>& in) {
      return rms_norm(in[0], normalized, in.size() > 1 ? std::optional<Tensor>(in[1]) : std::nullopt);
    };
    c.heavy = numel_of(s) > (1 << 24);
  } else if (starts("one_hot ")) {  // "one_hot classes=10 [64]": arange(n) % classes; classes=-1 inferred
    const int64_t count = n.at(0);
    const int64_t classes = std::stoll(name.substr(name.find("classes=") + 8));
    const int64_t modulus = classes > 0 ? classes : (count == 64 ? 10 : 1000);  // the probe's c for -1 cases
    c.inputs = [count, modulus](Device d) {
      std::vector<int64_t> values(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = i % modulus;
      return std::vector<Tensor>{from_vector(values, {count}, TensorOptions{ScalarType::int64, d})};
    };
    c.op = [classes](const std::vector<Tensor>& in) { return one_hot(in[0], classes); };
  } else if (starts("masked_select ")) {  // "masked_select [4, 256] mask=[256]": mask[i] = i % 2 == 1 (flat)
    const size_t mask_at = name.find(" mask=");
    const std::vector<int64_t> xs = ints_in(name.substr(0, mask_at)), ms = ints_in(name.substr(mask_at));
    const Shape s(xs.begin(), xs.end()), m(ms.begin(), ms.end());
    c.inputs = [s, m](Device d) {
      std::vector<double> flags(static_cast<size_t>(numel_of(m)));
      for (size_t i = 0; i < flags.size(); ++i) flags[i] = static_cast<double>(i % 2);
      return std::vector<Tensor>{rg(s, d), from_vector(flags, m, TensorOptions{ScalarType::bool_, d})};
    };
    c.op = [](const std::vector<Tensor>& in) { return masked_select(in[0], in[1]); };
  } else if (starts("sdpa gqa ")) {  // "sdpa gqa [bf16 |f16 ]causal [B,Hq,Hkv,L,D]": float32 unless named
    const bool causal = name.find(" causal ") != std::string::npos;
    const ScalarType dtype = starts("sdpa gqa bf16 ")  ? ScalarType::bfloat16
                             : starts("sdpa gqa f16 ") ? ScalarType::float16
                                                       : ScalarType::float32;
    const int64_t b = n[0], hq = n[1], hk = n[2], l = n[3], dim = n[4];
    c.inputs = [=](Device d) {
      const TensorOptions o{dtype, d};
      return std::vector<Tensor>{randn({b, hq, l, dim}, o).requires_grad_(), randn({b, hk, l, dim}, o).requires_grad_(),
                                 randn({b, hk, l, dim}, o).requires_grad_()};
    };
    // The CPU reference takes B*Hq*L*L*D multiply-adds three times; the largest cases replay on meta.
    c.heavy = b * hq * l * l * dim > (int64_t{1} << 26);
    c.op = [causal](const std::vector<Tensor>& in) {
      return scaled_dot_product_attention(in[0], in[1], in[2], std::nullopt, 0.0, causal, std::nullopt, true);
    };
  } else if (starts("randperm ")) {  // "randperm [1000]": int64 on the device, no inputs, forward only
    const int64_t count = n.at(0);
    // The one input, empty (no allocation), carries the device.
    c.inputs = [](Device d) { return std::vector<Tensor>{empty({0}, TensorOptions{ScalarType::int64, d})}; };
    c.op = [count](const std::vector<Tensor>& in) {
      return randperm(count, TensorOptions{ScalarType::int64, in[0].device()});
    };
  } else if (starts("norm ") && name.find(" ord=") != std::string::npos) {  // forward only, no grad
    const Shape s(n.begin(), n.end());
    const double ord = name.find("ord=inf") != std::string::npos ? inf : 1.0;
    c.inputs = [s](Device d) { return std::vector<Tensor>{randn(s, TensorOptions{ScalarType::float32, d})}; };
    c.op = [ord](const std::vector<Tensor>& in) { return vector_norm(in[0], ord); };
    c.heavy = numel_of(s) > (1 << 24);
  } else if (starts("dot ") || starts("mv ")) {  // through matmul, as the probe calls them
    const Shape a = starts("dot ") ? Shape{n[0]} : Shape{n[0], n[1]};
    const Shape b{a.back()};
    c.inputs = [a, b](Device d) { return std::vector<Tensor>{rg(a, d), rg(b, d)}; };
    c.op = [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  } else if (starts("bias broadcast add ") || starts("mul broadcast ")) {
    const Shape s(n.begin(), n.end());
    const bool add = starts("bias ");
    c.inputs = [s](Device d) { return std::vector<Tensor>{rg(s, d), rg({s.back()}, d)}; };
    c.op = [add](const std::vector<Tensor>& in) { return add ? in[0] + in[1] : in[0] * in[1]; };
  } else {
    return std::nullopt;
  }
  return c;
}

// Cases bytegrad does not reproduce yet, each with the reason (the test lists them as it skips them).
const std::map<std::string, std::string>& known_differences() {
  static const std::map<std::string, std::string> known = {
      {"sdpa", "bytegrad has no scaled_dot_product_attention (flash/efficient kernels)"},
      {"embedding [50257,768] idx=4096",
       "more than 3072 indices: PyTorch's embedding_dense_backward sorts the indices (radix-sort buffers, "
       "segment offsets); bytegrad has only the small-count path (zeros + index_add)"},
      {"embedding [1000,64] idx=3073", "more than 3072 indices: the sort-based embedding backward (see above)"},
  };
  return known;
}

std::string known_difference(const std::string& name) {
  for (const auto& [key, why] : known_differences())
    if (name.find(key) != std::string::npos) return why;
  return "";
}

}  // namespace

namespace {

// Replays one recorded case on sim (meta when heavy) and compares forward and backward events.
void check_op_events(const Json& row) {
  const std::string name = row.find("case")->string();
  CAPTURE(name);
  const std::optional<OpCase> c = op_case(name);
  REQUIRE_MESSAGE(c.has_value(), "no bytegrad case for " << name);
  const Device d = c->heavy ? kMeta : kSim;
  GoldenConditions conditions(d);
  manual_seed(0);
  std::vector<Tensor> inputs = c->inputs(d);
  Tensor y;
  const Events forward = allocation_events(d, [&] { y = c->op(inputs); });
  const Events want_forward = without_workspaces(events_of(*row.find("events")->find("forward")));
  CHECK_MESSAGE(forward == want_forward, name << " forward: got " << show(forward) << ", want " << show(want_forward));
  if (const Json* bw = row.find("events")->find("backward")) {
    REQUIRE(y.requires_grad());
    const Tensor g = ones_like(y);
    const Events backward = allocation_events(d, [&] { y.backward(g); });
    const Events want_backward = without_workspaces(events_of(*bw));
    CHECK_MESSAGE(backward == want_backward,
                  name << " backward: got " << show(backward) << ", want " << show(want_backward));
  }
}

}  // namespace

TEST_CASE("op events: every ops row of events.jsonl, forward and backward, event for event as PyTorch") {
  int compared = 0;
  for (const Json& row : probe_rows("ops")) {
    const std::string name = row.find("case")->string();
    if (const std::string why = known_difference(name); !why.empty()) {
      MESSAGE("not compared: " << name << ": " << why);
      continue;
    }
    check_op_events(row);
    ++compared;
  }
  CHECK(compared == 91);  // 96 rows less the 5 known differences
}

namespace {

// The op table's unary rows (the activations' among them) without recorded events yet, each with the reason.
// Every other unary row has cases in events.jsonl's "ops" group or in op_table_events.jsonl.
const std::map<std::string, std::string>& unary_rows_not_recorded() {
  static const std::map<std::string, std::string> rows = {
      {"neg", "in the table before the probe's op_table group; not recorded yet"},
      {"abs", "no_grad in bytegrad (no derivative); not recorded yet"},
      {"log", "in the table before the probe's op_table group; not recorded yet"},
      {"sqrt", "in the table before the probe's op_table group; not recorded yet"},
      {"logical_not", "a bool result, never part of a graph; not recorded yet"},
      {"log_sigmoid", "no_grad in bytegrad: computed inside binary_cross_entropy_with_logits, recorded there"},
  };
  return rows;
}

// Rows added since op_table_events.jsonl was last recorded, whose cases tools/probes/pytorch_event_probe.py
// has (op_table_cases()) but the file does not yet: their checks are skipped, naming the missing recording,
// until the probe is run on the GPU machine and the file committed; then they are compared as every row.
const std::set<std::string>& rows_awaiting_recording() {
  // Rows added to the table whose probe cases (op_table_cases()) are not recorded yet; empty when the
  // recording has every row (re-record on the GPU machine after adding one, docs/adding-an-op.md).
  static const std::set<std::string> rows = {};
  return rows;
}

std::string op_of_case(const std::string& name) { return name.substr(0, name.find(' ')); }

}  // namespace

// Ops added with the op table (docs/adding-an-op.md), recorded by the probe's op_table group: every case is
// a row of the table and is replayed; every unary row of the table is recorded or listed above.
TEST_CASE("op_table events: every op_table case forward and backward as PyTorch; every unary row recorded") {
  const std::vector<Json> rows = probe_rows("op_table", "op_table_events.jsonl");
  REQUIRE(!rows.empty());
  std::set<std::string> recorded;
  for (const Json& row : rows) {
    const std::string op = op_of_case(row.find("case")->string());
    CAPTURE(op);
    CHECK(std::any_of(all_ops().begin(), all_ops().end(), [&](const OpInfo& info) { return info.name == op; }));
    recorded.insert(op);
    check_op_events(row);
  }
  for (const Json& row : probe_rows("ops")) recorded.insert(op_of_case(row.find("case")->string()));
  for (const OpInfo& info : all_ops()) {
    if (info.kernel != "unary") continue;
    const std::string op(info.name);
    CAPTURE(op);
    const auto listed = unary_rows_not_recorded().find(op);
    if (rows_awaiting_recording().count(op) == 1 && recorded.count(op) == 0) continue;  // reported below
    if (listed == unary_rows_not_recorded().end()) {
      CHECK_MESSAGE(recorded.count(op) == 1,
                    "no recorded events for this unary row: add its cases to the "
                    "probe's op_table_cases() (docs/adding-an-op.md)");
    } else {
      CHECK_MESSAGE(recorded.count(op) == 0, "recorded now: remove it from unary_rows_not_recorded()");
      MESSAGE("not recorded: " << op << ": " << listed->second);
    }
  }
  for (const std::string& op : rows_awaiting_recording()) {
    CAPTURE(op);
    CHECK(std::any_of(all_ops().begin(), all_ops().end(), [&](const OpInfo& info) { return info.name == op; }));
    if (recorded.count(op) == 0)
      MESSAGE("not compared: " << op << ": tests/data/pytorch_probes/op_table_events.jsonl has no '" << op
                               << " [...]' case yet; run tools/probes/pytorch_event_probe.py (op_table) on the GPU "
                                  "machine and commit the file");
  }
}

// Composite ops PyTorch builds from others (no node of their own), recorded by the probe's "composite" group
// into op_table_events.jsonl: replayed as the op_table cases are. Until recorded, the test says so.
TEST_CASE("composite events: cross_entropy with label_smoothing or weights, forward and backward as PyTorch") {
  const std::vector<Json> rows = probe_rows("composite", "op_table_events.jsonl");
  if (rows.empty()) {
    MESSAGE(
        "not compared: op_table_events.jsonl has no 'composite' rows yet; run "
        "tools/probes/pytorch_event_probe.py OUT op_table composite on the GPU machine and commit the file");
    return;
  }
  for (const Json& row : rows) check_op_events(row);
}

// SDPA with enable_gqa in bf16 and fp16 (the probe's gqa16 group): PyTorch 2.11 ran every case on cuDNN with
// the grouped heads as they are (the node of each output, recorded beside it, is
// ScaledDotProductCudnnAttentionBackward0); bytegrad takes its cuDNN path and must match event for event.
TEST_CASE("gqa16 events: 16-bit SDPA with enable_gqa on cuDNN, forward and backward as PyTorch") {
  const std::vector<Json> rows = probe_rows("gqa16", "op_table_events.jsonl");
  REQUIRE(rows.size() == 20);
  for (const Json& row : rows) {
    const Json* node = row.find("node");
    REQUIRE(node);
    CHECK(node->string() == "ScaledDotProductCudnnAttentionBackward0");
    check_op_events(row);
  }
  // The node bytegrad records is cuDNN's too.
  GoldenConditions conditions(kMeta);
  const TensorOptions bf16{ScalarType::bfloat16, kMeta};
  const Tensor q = randn({2, 8, 64, 64}, bf16).requires_grad_();
  const Tensor k = randn({2, 2, 64, 64}, bf16).requires_grad_(), v = randn({2, 2, 64, 64}, bf16).requires_grad_();
  const Tensor y = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true, std::nullopt, true);
  CHECK(y.grad_fn_name() == "ScaledDotProductCudnnAttentionBackward0");
}

TEST_CASE("optimizer events: every optim row of events.jsonl bytegrad has, step1, step2, zero_grad as PyTorch") {
  int compared = 0;
  for (const Json& row : probe_rows("optim")) {
    const std::string name = row.find("case")->string();
    CAPTURE(name);
    const std::string opt = name.substr(0, name.find(' '));
    // params=[(1024, 256), (1024,), (1, 1024), (1,)]: one shape per parenthesis.
    std::vector<Shape> shapes;
    const std::string list = name.substr(name.find('['));
    for (size_t open = list.find('('); open != std::string::npos; open = list.find('(', open + 1)) {
      const std::vector<int64_t> dims = ints_in(list.substr(open, list.find(')', open) - open));
      shapes.emplace_back(dims.begin(), dims.end());
    }
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
    if (opt == "sgd") make = [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1); };
    if (opt == "sgd_momentum") make = [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9); };
    if (opt == "sgd_momentum_foreach")
      make = [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .foreach = true});
      };
    if (opt == "sgd_momentum_wd")
      make = [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.0, 0.01); };
    if (opt == "adam_single") make = [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, 1e-3); };
    if (opt == "adam_single_wd")
      make = [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(p, 1e-3, std::pair{0.9, 0.999}, 1e-8, 0.01);
      };
    if (opt == "adam_single_amsgrad")
      make = [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(p, 1e-3, std::pair{0.9, 0.999}, 1e-8, 0.0, true);
      };
    if (opt == "adamw_single") make = [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, 1e-3); };
    // torch.optim.Adam(params, lr) on CUDA: the multi-tensor path.
    if (opt == "adam_default")
      make = [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(p, optim::AdamOptions{.foreach = true});
      };
    if (opt == "adamw_default")
      make = [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(p, optim::AdamOptions{.foreach = true});
      };

    if (!make) {
      MESSAGE("not compared: " << name << " (bytegrad has no such optimizer path)");
      continue;
    }
    const Device d = kSim;
    GoldenConditions conditions(d);
    manual_seed(0);
    std::vector<Tensor> params;
    for (const Shape& s : shapes) {
      params.push_back(rg(s, d));
      params.back().set_grad(randn(s, TensorOptions{ScalarType::float32, d}));
    }
    std::unique_ptr<optim::Optimizer> optimizer = make(params);
    const Json& ev = *row.find("events");
    for (const char* phase : {"step1", "step2", "zero_grad"}) {
      const Events got = allocation_events(d, [&] {
        if (std::string(phase) == "zero_grad") optimizer->zero_grad();
        else optimizer->step();
      });
      const Events want = events_of(*ev.find(phase));
      CHECK_MESSAGE(got == want, name << " " << phase << ": got " << show(got) << ", want " << show(want));
    }
    ++compared;
  }
  CHECK(compared == 30);  // all ten optimizer settings, three parameter lists each
}

TEST_CASE("norm, var and std: forward and backward events as PyTorch's (norm_var_backward.json)") {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/norm_var_backward.json");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const Json recorded = parse_json(text.str());
  // The losses of tools/probes/pytorch_norm_var_backward.py, on a (1024, 512) float32 x.
  const std::map<std::string, std::function<Tensor(const Tensor&)>> losses = {
      {"norm dim1", [](const Tensor& x) { return norm(x, {1}).sum(); }},
      {"vector_norm dim1", [](const Tensor& x) { return norm(x, {1}).sum(); }},
      {"norm all", [](const Tensor& x) { return norm(x); }},
      {"var dim1", [](const Tensor& x) { return var(x, {1}).sum(); }},
      {"var all", [](const Tensor& x) { return var(x); }},
      {"std dim1", [](const Tensor& x) { return x.std({1}).sum(); }},
      {"std all", [](const Tensor& x) { return x.std(); }},
      {"var dim1 correction0", [](const Tensor& x) { return var(x, {1}, false, 0.0); }},
  };
  int compared = 0;
  for (const auto& [name, want] : recorded.members) {
    CAPTURE(name);
    REQUIRE(losses.count(name) == 1);
    const Device d{DeviceType::sim, 0};
    GoldenConditions conditions(d);
    Tensor x = randn({1024, 512}, TensorOptions{ScalarType::float32, d}).requires_grad_();
    Tensor loss;
    auto loss_of = losses.at(name);
    const Events forward = allocation_events(d, [&] {
      loss = loss_of(x);
      if (name == "var dim1 correction0") loss = loss.sum();
    });
    const Events backward = allocation_events(d, [&] { loss.backward(); });
    const Events want_forward = events_of(*want.find("forward"));
    const Events want_backward = events_of(*want.find("backward"));
    CHECK_MESSAGE(forward == want_forward, "forward: got " << show(forward) << ", want " << show(want_forward));
    CHECK_MESSAGE(backward == want_backward, "backward: got " << show(backward) << ", want " << show(want_backward));
    ++compared;
  }
  CHECK(compared == 8);
}
