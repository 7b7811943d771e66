// scaled_dot_product_attention (tensor/ops_attention.cpp) against PyTorch 2.11 on the H100:
//  - every case of tests/data/pytorch_probes/gpt2_ops/ws0/sdpa.events (tools/probes/gpt2_op_events.py: q, k, v
//    the transposed views of a split (B, T, 3C) leaf, one causal call, backward with a ones gradient laid out
//    like the output, then everything deleted) replayed on sim and meta: the whole allocation and free sequence
//    from the case's start mark to its `freed` mark, the forward op's and the backward op's own events, and
//    allocated / reserved at each mark;
//  - the backend rule (select_sdpa_backend) on those inputs and on inputs the fused kernels refuse;
//  - the values and gradients of the fused paths (cpu/sim reference) against the math composition in float64;
//  - nanoGPT with AttentionKind::sdpa: GPT-2 small's model and data marks (g_gpt2_small_bf16_sdpa.json), and
//    in bfloat16 (built in bf16: no autocast) each attention's forward and backward events as in
//    g_gpt2_small_bf16_sdpa.events.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/attention_reference.h"
#include "tests/support/devices.h"
#include "tests/support/finite_differences.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

// ---------------------------------------------------------------------------------- .events files

// One `# op` section of an .events file: the aten op and the alloc / free_completed events listed under it
// (segment events dropped).
struct OpSection {
  std::string op;
  AllocationEvents events;
};

struct Mark {
  std::string label;
  int64_t allocated = 0, reserved = 0;
  size_t event_index = 0;  // events (of the case) before the mark
};

// A case of sdpa.events: from its `case_..._start` mark to its `freed` mark.
struct RecordedCase {
  std::string name;  // "4x12x256x64_bfloat16"
  int64_t B = 0, H = 0, T = 0, D = 0;
  ScalarType dtype = ScalarType::float32;
  AllocationEvents events;  // every alloc / free after the start mark, up to the freed mark
  std::vector<Mark> marks;  // start, forward, backward, freed
  std::vector<OpSection> ops;
};

std::string data_path(const std::string& relative) { return std::string(BYTEGRAD_TEST_DATA_DIR) + "/" + relative; }

// Reads an .events file as op sections (events before the first `# op` go to a section named "").
std::vector<OpSection> read_op_sections(const std::string& path, std::vector<Mark>* marks = nullptr) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::vector<OpSection> sections(1);
  size_t events = 0;
  std::string line;
  const std::regex mark_re(R"(# mark (\S+) allocated=(\d+) reserved=(\d+) peak=(\d+))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("# op ", 0) == 0) {
      sections.push_back({line.substr(5), {}});
    } else if (std::regex_match(line, m, mark_re)) {
      if (marks) marks->push_back({m[1], std::stoll(m[2]), std::stoll(m[3]), events});
    } else if (line.rfind("alloc ", 0) == 0) {
      sections.back().events.emplace_back("alloc", std::stoll(line.substr(6)));
      ++events;
    } else if (line.rfind("free_completed ", 0) == 0) {
      sections.back().events.emplace_back("free", std::stoll(line.substr(15)));
      ++events;
    }
  }
  return sections;
}

ScalarType dtype_named(const std::string& name) {
  if (name == "bfloat16") return ScalarType::bfloat16;
  if (name == "float16") return ScalarType::float16;
  if (name == "float32") return ScalarType::float32;
  FAIL("unknown dtype " << name);
  return ScalarType::float32;
}

// The cases of sdpa.events, split at their start marks.
std::vector<RecordedCase> recorded_cases() {
  const std::string path = data_path("pytorch_probes/gpt2_ops/ws0/sdpa.events");
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::vector<RecordedCase> cases;
  const std::regex start_re(R"(# mark case_(\d+)x(\d+)x(\d+)x(\d+)_(\w+)_start allocated=(\d+) reserved=(\d+).*)");
  const std::regex mark_re(R"(# mark (\S+) allocated=(\d+) reserved=(\d+).*)");
  bool in_case = false;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, start_re)) {
      RecordedCase c;
      c.name = m[1].str() + "x" + m[2].str() + "x" + m[3].str() + "x" + m[4].str() + "_" + m[5].str();
      c.B = std::stoll(m[1]);
      c.H = std::stoll(m[2]);
      c.T = std::stoll(m[3]);
      c.D = std::stoll(m[4]);
      c.dtype = dtype_named(m[5]);
      c.marks.push_back({"start", std::stoll(m[6]), std::stoll(m[7]), 0});
      cases.push_back(std::move(c));
      in_case = true;
      continue;
    }
    if (!in_case) continue;
    RecordedCase& c = cases.back();
    if (std::regex_match(line, m, mark_re)) {
      c.marks.push_back({m[1], std::stoll(m[2]), std::stoll(m[3]), c.events.size()});
      if (m[1] == "freed") in_case = false;
    } else if (line.rfind("# op ", 0) == 0) {
      c.ops.push_back({line.substr(5), {}});
    } else if (line.rfind("alloc ", 0) == 0 || line.rfind("free_completed ", 0) == 0) {
      const bool alloc = line[0] == 'a';
      const int64_t bytes = std::stoll(line.substr(alloc ? 6 : 15));
      c.events.emplace_back(alloc ? "alloc" : "free", bytes);
      if (!c.ops.empty()) c.ops.back().events.emplace_back(alloc ? "alloc" : "free", bytes);
    }
  }
  return cases;
}

const AllocationEvents& op_events(const RecordedCase& c, const std::string& aten_op) {
  for (const OpSection& s : c.ops)
    if (s.op.find(aten_op) != std::string::npos) return s.events;
  FAIL("no op " << aten_op << " in case " << c.name);
  static AllocationEvents none;
  return none;
}

std::string show(const AllocationEvents& events) {
  std::string out;
  for (const auto& [what, bytes] : events) out += (out.empty() ? "" : ", ") + what + " " + std::to_string(bytes);
  return "[" + out + "]";
}

// ------------------------------------------------------------------------------------ the replay

struct Replayed {
  AllocationEvents events;
  std::vector<Mark> marks;
  AllocationEvents forward, backward;  // the entries tagged with the attention op's forward / backward scope
  std::string grad_fn;
  SdpaBackend backend = SdpaBackend::math;
};

// The probe's program for one case on `device`: qkv = randn(B, T, 3C, requires_grad) (before the start
// mark), then split / view / transpose, the causal call, backward with ones laid out like y, del everything.
Replayed replay(const RecordedCase& c, Device device) {
  fresh(device);
  CachingAllocator& allocator = caching_allocator(device);
  const int64_t C = c.H * c.D;
  manual_seed(3);
  Tensor qkv = randn({c.B, c.T, 3 * C}, TensorOptions{c.dtype, device});
  qkv.requires_grad_(true);
  Replayed r;
  allocator.record_history(true);
  const size_t first_entry = allocator.snapshot().trace.size();
  auto mark = [&](const std::string& label) {
    const MemorySnapshot snapshot = allocator.snapshot();
    size_t n = 0;
    for (size_t i = first_entry; i < snapshot.trace.size(); ++i) {
      const TraceAction a = snapshot.trace[i].action;
      n += a == TraceAction::alloc || a == TraceAction::free_completed;
    }
    r.marks.push_back({label, allocator.memory_allocated(), allocator.memory_reserved(), n});
  };
  {
    std::vector<Tensor> parts = qkv.split(C, 2);
    Tensor q = parts[0].view({c.B, c.T, c.H, c.D}).transpose(1, 2);
    Tensor k = parts[1].view({c.B, c.T, c.H, c.D}).transpose(1, 2);
    Tensor v = parts[2].view({c.B, c.T, c.H, c.D}).transpose(1, 2);
    parts.clear();
    mark("start");
    r.backend = select_sdpa_backend(q, k, v, true);
    Tensor y = scaled_dot_product_attention(q, k, v, /*is_causal=*/true);
    r.grad_fn = y.grad_fn_name();
    mark("forward");
    {
      // torch.ones_like(y): y's strides (preserve_format)
      Tensor ones = empty_strided(y.sizes(), y.strides(), TensorOptions{c.dtype, device});
      ones.fill_(1.0);
      y.backward(ones);
    }
    mark("backward");
    // del q, k, v, y, qkv
    q = Tensor();
    k = Tensor();
    v = Tensor();
    y = Tensor();
    qkv = Tensor();
    mark("freed");
  }
  const MemorySnapshot snapshot = allocator.snapshot();
  const std::vector<TraceEntry>& trace = snapshot.trace;
  const std::string fwd_tag = r.backend == SdpaBackend::cudnn_attention ? "scaled_dot_product_cudnn_attention"
                                                                        : "scaled_dot_product_efficient_attention";
  const std::string bwd_tag = fwd_tag + "_backward";
  for (size_t i = first_entry; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (e.action != TraceAction::alloc && e.action != TraceAction::free_completed) continue;
    const std::pair<std::string, int64_t> event{e.action == TraceAction::alloc ? "alloc" : "free",
                                                static_cast<int64_t>(e.size)};
    r.events.push_back(event);
    if (e.tag == fwd_tag) r.forward.push_back(event);
  }
  allocator.record_history(false);
  return r;
}

// The recorded backward section is the backward op's own events followed by the node's releases (no op
// comes between them in the probe); the replay's is the same span: from the backward's first allocation to
// the next allocation made by anything else (the split's cat).
AllocationEvents backward_span(const Replayed& r, const RecordedCase& c, size_t recorded_size) {
  // The backward starts after the forward mark and the ones gradient: the recorded case's events before the
  // backward op tell how many.
  size_t before = 0;
  for (const OpSection& s : c.ops) {
    if (s.op.find("_backward") != std::string::npos) break;
    before += s.events.size();
  }
  if (before + recorded_size > r.events.size()) return {};
  return AllocationEvents(r.events.begin() + static_cast<std::ptrdiff_t>(before),
                          r.events.begin() + static_cast<std::ptrdiff_t>(before + recorded_size));
}

// The CPU reference takes a while on the big cases; those are replayed on meta only (sim allocates alike).
bool small_enough_for_sim(const RecordedCase& c) { return c.B * c.H * c.T * c.T * c.D <= (int64_t{1} << 28); }

}  // namespace

TEST_CASE("sdpa.events: every recorded case's allocations and frees, forward and backward, on sim and meta") {
  const std::vector<RecordedCase> cases = recorded_cases();
  REQUIRE(cases.size() == 9);
  for (const RecordedCase& c : cases) {
    CAPTURE(c.name);
    REQUIRE(c.marks.size() == 4);
    const bool half = c.dtype != ScalarType::float32;
    const std::string aten =
        half ? "aten._scaled_dot_product_cudnn_attention" : "aten._scaled_dot_product_efficient_attention";
    const AllocationEvents& recorded_forward = op_events(c, aten + ".default");
    const AllocationEvents& recorded_backward = op_events(c, aten + "_backward.default");
    std::vector<Device> devices{kMeta};
    if (small_enough_for_sim(c)) devices.insert(devices.begin(), kSim);
    for (Device device : devices) {
      CAPTURE(device.str());
      const Replayed r = replay(c, device);
      CHECK(r.backend == (half ? SdpaBackend::cudnn_attention : SdpaBackend::efficient_attention));
      CHECK(r.grad_fn ==
            (half ? "ScaledDotProductCudnnAttentionBackward0" : "ScaledDotProductEfficientAttentionBackward0"));
      INFO("recorded forward " << show(recorded_forward) << "\nreplayed forward " << show(r.forward));
      CHECK(r.forward == recorded_forward);
      const AllocationEvents replayed_backward = backward_span(r, c, recorded_backward.size());
      INFO("recorded backward " << show(recorded_backward) << "\nreplayed backward " << show(replayed_backward));
      CHECK(replayed_backward == recorded_backward);
      INFO("recorded " << show(c.events) << "\nreplayed " << show(r.events));
      CHECK(r.events == c.events);
      REQUIRE(r.marks.size() == c.marks.size());
      for (size_t i = 0; i < c.marks.size(); ++i) {
        CAPTURE(c.marks[i].label);
        CHECK(r.marks[i].allocated == c.marks[i].allocated);
        CHECK(r.marks[i].reserved == c.marks[i].reserved);
        CHECK(r.marks[i].event_index == c.marks[i].event_index);
      }
    }
  }
}

TEST_CASE(
    "the backend PyTorch 2.11 picks on an H100: cuDNN for 16-bit floats, flash for their odd head dims, "
    "memory-efficient for float32, else math") {
  fresh(kMeta);
  auto qkv_views = [](int64_t B, int64_t H, int64_t T, int64_t D, ScalarType dtype) {
    const Tensor qkv = empty({B, T, 3 * H * D}, TensorOptions{dtype, kMeta});
    std::vector<Tensor> parts = qkv.split(H * D, 2);
    std::vector<Tensor> out;
    for (const Tensor& p : parts) out.push_back(p.view({B, T, H, D}).transpose(1, 2));
    return out;
  };
  auto pick = [&](int64_t B, int64_t H, int64_t T, int64_t D, ScalarType dtype, bool causal = true) {
    const std::vector<Tensor> v = qkv_views(B, H, T, D, dtype);
    return select_sdpa_backend(v[0], v[1], v[2], causal);
  };
  // The recorded cases (sdpa.events)
  CHECK(pick(4, 12, 256, 64, ScalarType::bfloat16) == SdpaBackend::cudnn_attention);
  CHECK(pick(2, 4, 300, 64, ScalarType::float16) == SdpaBackend::cudnn_attention);
  CHECK(pick(2, 16, 512, 128, ScalarType::bfloat16) == SdpaBackend::cudnn_attention);
  CHECK(pick(4, 12, 256, 64, ScalarType::float32) == SdpaBackend::efficient_attention);
  CHECK(pick(3, 5, 77, 48, ScalarType::float32) == SdpaBackend::efficient_attention);
  // float64: no fused kernel takes it
  CHECK(pick(2, 2, 16, 8, ScalarType::float64) == SdpaBackend::math);
  // float32 head dims not a multiple of 4, or a last dimension that is not contiguous: math
  CHECK(pick(2, 2, 16, 6, ScalarType::float32) == SdpaBackend::math);
  {
    const Tensor q = empty({2, 2, 8, 16}, TensorOptions{ScalarType::float32, kMeta}).transpose(2, 3);
    CHECK(select_sdpa_backend(q, q, q, false) == SdpaBackend::math);
  }
  // 16-bit head dims that are not multiples of 8 go to flash (tests/nn/sdpa_flash.cpp replays its recordings);
  // cuDNN 9.19 takes multiples of 8 up to 256 (sdpa_flash/flash_choices.txt)
  CHECK(pick(2, 2, 16, 12, ScalarType::bfloat16) == SdpaBackend::flash_attention);
  CHECK(pick(2, 2, 16, 256, ScalarType::bfloat16) == SdpaBackend::cudnn_attention);
  CHECK(pick(2, 2, 16, 160, ScalarType::float16) == SdpaBackend::cudnn_attention);
  {
    const std::vector<Tensor> v = qkv_views(2, 2, 16, 12, ScalarType::bfloat16);
    CHECK(scaled_dot_product_attention(v[0], v[1], v[2], true).sizes() == Shape{2, 2, 16, 12});
  }
  // ... and those flash refuses too (a head dim above 256) to the memory-efficient kernels' 16-bit path
  CHECK(pick(1, 1, 16, 512, ScalarType::float16) == SdpaBackend::efficient_attention);
  // cuDNN refuses a key length of 1; flash takes a non-causal call
  CHECK(pick(2, 2, 1, 64, ScalarType::bfloat16, false) == SdpaBackend::flash_attention);
}

TEST_CASE("the fused paths' values and gradients equal the math composition (float64), on cpu and sim") {
  struct Case {
    int64_t B, H, Sq, Sk, D, Dv;
    bool causal;
    std::optional<double> scale;
  };
  const std::vector<Case> shapes = {{2, 3, 7, 7, 8, 8, true, std::nullopt},
                                    {1, 2, 5, 9, 8, 16, true, 0.3},  // Sq < Sk: causal is top-left aligned
                                    {2, 1, 9, 4, 16, 8, true, std::nullopt},
                                    {1, 2, 6, 10, 8, 8, false, 1.5},
                                    {1, 1, 40, 40, 32, 32, true, std::nullopt}};
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    for (const Case& s : shapes) {
      CAPTURE(s.Sq);
      CAPTURE(s.Sk);
      CAPTURE(s.causal);
      manual_seed(17);
      const TensorOptions f32{ScalarType::float32, device};
      const Tensor q0 = randn({s.B, s.H, s.Sq, s.D}, f32), k0 = randn({s.B, s.H, s.Sk, s.D}, f32),
                   v0 = randn({s.B, s.H, s.Sk, s.Dv}, f32), w = randn({s.B, s.H, s.Sq, s.Dv}, f32);
      const AttentionReference ref = attention_math_reference(q0, k0, v0, w, s.causal, s.scale);
      // float32 through both fused backends (the cuDNN one beyond PyTorch's dtypes), bfloat16 through cuDNN
      for (int variant = 0; variant < 3; ++variant) {
        CAPTURE(variant);
        const ScalarType dtype = variant == 2 ? ScalarType::bfloat16 : ScalarType::float32;
        const double tolerance = dtype == ScalarType::bfloat16 ? 3e-2 : 2e-5;
        Tensor q = q0.to(dtype).detach(), k = k0.to(dtype).detach(), v = v0.to(dtype).detach();
        for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
        const Tensor out = variant == 1
                               ? scaled_dot_product_efficient_attention(q, k, v, true, s.causal, s.scale).output
                               : scaled_dot_product_cudnn_attention(q, k, v, true, s.causal, s.scale).output;
        sum((out * w.to(dtype)).to(ScalarType::float32)).backward();
        check_close_to_reference(out.to(ScalarType::float64).tolist(), ref.out, tolerance, "output");
        check_close_to_reference(q.grad().to(ScalarType::float64).tolist(), ref.dq, tolerance, "dq");
        check_close_to_reference(k.grad().to(ScalarType::float64).tolist(), ref.dk, tolerance, "dk");
        check_close_to_reference(v.grad().to(ScalarType::float64).tolist(), ref.dv, tolerance, "dv");
      }
    }
  }
}

TEST_CASE("scaled_dot_product_attention on float64 takes the math path, whose gradients match finite differences") {
  manual_seed(23);
  const TensorOptions f64{ScalarType::float64, kSim};
  const Tensor q = randn({1, 2, 4, 3}, f64), k = randn({1, 2, 5, 3}, f64), v = randn({1, 2, 5, 2}, f64);
  const Tensor w = randn({1, 2, 4, 2}, f64);
  check_gradients(
      [&](const std::vector<Tensor>& x) { return sum(scaled_dot_product_attention(x[0], x[1], x[2], true) * w); },
      {q, k, v});
  Tensor qg = q.detach();
  qg.requires_grad_(true);
  CHECK(scaled_dot_product_attention(qg, k, v, true).grad_fn_name() != "ScaledDotProductCudnnAttentionBackward0");
}

TEST_CASE("without a gradient the fused forward keeps no logsumexp, and frees seed and offset at once") {
  for (Device device : {kSim, kMeta}) {
    CAPTURE(device.str());
    fresh(device);
    const Tensor qkv = randn({2, 16, 3 * 64}, TensorOptions{ScalarType::bfloat16, device});
    std::vector<Tensor> parts = qkv.split(64, 2);
    const Tensor q = parts[0].view({2, 16, 2, 32}).transpose(1, 2), k = parts[1].view({2, 16, 2, 32}).transpose(1, 2),
                 v = parts[2].view({2, 16, 2, 32}).transpose(1, 2);
    Tensor y;
    const AllocationEvents events = allocation_events(device, [&] { y = scaled_dot_product_attention(q, k, v, true); });
    // seed, offset, the output (2*2*16*32*2 bytes), the 256-byte workspace; the seed and offset dropped with the
    // op's other results (PyTorch's tuple, destroyed in order).
    const AllocationEvents want = {{"alloc", 8},  {"alloc", 8}, {"alloc", 4096}, {"alloc", 256},
                                   {"free", 256}, {"free", 8},  {"free", 8}};
    INFO(show(events));
    CHECK(events == want);
    // the output is laid out (B, T, H, D): y.transpose(1, 2) is contiguous
    CHECK(y.transpose(1, 2).is_contiguous());
  }
}

TEST_CASE("libtorch's argument order (attn_mask, dropout_p, is_causal) is the same call; an all-true mask is none") {
  for (Device device : {kSim, kMeta}) {
    CAPTURE(device.str());
    fresh(device);
    const TensorOptions bf16{ScalarType::bfloat16, device};
    const Tensor q = randn({1, 2, 8, 16}, bf16), k = randn({1, 2, 8, 16}, bf16), v = randn({1, 2, 8, 16}, bf16);
    Tensor short_form, libtorch_form;
    const AllocationEvents want =
        allocation_events(device, [&] { short_form = scaled_dot_product_attention(q, k, v, true); });
    const AllocationEvents got =
        allocation_events(device, [&] { libtorch_form = scaled_dot_product_attention(q, k, v, {}, 0.0, true); });
    CHECK(got == want);
    CHECK(libtorch_form.sizes() == short_form.sizes());
    CHECK(libtorch_form.strides() == short_form.strides());
    if (device == kSim)
      CHECK(max(abs(libtorch_form.to(ScalarType::float32) - short_form.to(ScalarType::float32))).item() == 0.0);
    // a mask that keeps every key is no mask (cuDNN with a mask: tests/nn/sdpa_mask.cpp and sdpa_fused_mask.cpp)
    const Tensor mask = ones({8, 8}, TensorOptions{ScalarType::bool_, device});
    const Tensor masked = scaled_dot_product_attention(q, k, v, mask, 0.0, false);
    if (device == kSim)
      CHECK(masked.to(ScalarType::float32).tolist() ==
            scaled_dot_product_attention(q, k, v, false).to(ScalarType::float32).tolist());
  }
}

TEST_CASE("nanoGPT with sdpa: no bias buffer, GPT-2 small's model and data marks as PyTorch's (meta)") {
  // shared/golden/gpt2/scenarios/g_gpt2_small_bf16_sdpa.json: model 498558976 allocated, 555745280 reserved;
  // data 498575360 (the slow path's model mark is 552298496: twelve 4 MiB `bias` buffers and their blocks).
  fresh(kMeta);
  nn::GPTConfig config{.n_layer = 12,
                       .n_head = 12,
                       .n_embd = 768,
                       .vocab_size = 50257,
                       .block_size = 1024,
                       .attention = nn::AttentionKind::sdpa};
  {
    // As programs/gpt2_programs/gpt2_training.cpp builds it on meta: on a second meta device, then moved.
    auto model = std::make_shared<nn::GPT>(config, TensorOptions{}.with_device(Device{DeviceType::meta, 1}));
    for (const auto& [name, buffer] : model->named_buffers()) FAIL("unexpected buffer " << name);
    model->to(kMeta);
    CHECK(allocated(kMeta) == 498558976);
    CHECK(caching_allocator(kMeta).memory_reserved() == 555745280);
    const Tensor x = randint(0, config.vocab_size, {4, 256}, TensorOptions{ScalarType::int64, kMeta});
    const Tensor y = randint(0, config.vocab_size, {4, 256}, TensorOptions{ScalarType::int64, kMeta});
    CHECK(allocated(kMeta) == 498575360);
  }
  fresh(kMeta);
  fresh(Device{DeviceType::meta, 1});
}

TEST_CASE(
    "nanoGPT with sdpa in bfloat16: each attention's forward and backward events as in the GPT-2 small "
    "training program (meta)") {
  // g_gpt2_small_bf16_sdpa.events: GPT-2 small, batch 4 x 256, under autocast. Built here in bfloat16 instead
  // (autocast is not bytegrad's yet), the attention's inputs and gradients are the same bf16 tensors, so its
  // twelve forward sections (seed, offset, output, logsumexp, workspace) and twelve backward sections (dq, dk,
  // dv, the workspace; then the incoming gradient, qkv, logsumexp, output, offset, seed freed) must agree.
  std::vector<OpSection> recorded_forward, recorded_backward;
  for (const OpSection& s : read_op_sections(data_path("pytorch_probes/gpt2_ops/ws0/g_gpt2_small_bf16_sdpa.events"))) {
    if (s.op == "aten._scaled_dot_product_cudnn_attention.default") recorded_forward.push_back(s);
    if (s.op == "aten._scaled_dot_product_cudnn_attention_backward.default") recorded_backward.push_back(s);
  }
  REQUIRE(recorded_forward.size() == 24);  // two training steps
  REQUIRE(recorded_backward.size() == 24);

  fresh(kMeta);
  nn::GPTConfig config{.n_layer = 12,
                       .n_head = 12,
                       .n_embd = 768,
                       .vocab_size = 50257,
                       .block_size = 1024,
                       .attention = nn::AttentionKind::sdpa};
  std::vector<AllocationEvents> forward, backward;
  {
    auto model = std::make_shared<nn::GPT>(config, TensorOptions{ScalarType::bfloat16, kMeta});
    const Tensor x = randint(0, config.vocab_size, {4, 256}, TensorOptions{ScalarType::int64, kMeta});
    const Tensor y = randint(0, config.vocab_size, {4, 256}, TensorOptions{ScalarType::int64, kMeta});
    CachingAllocator& allocator = caching_allocator(kMeta);
    allocator.record_history(true);
    const size_t first = allocator.snapshot().trace.size();
    {
      nn::GPT::Output out = model->forward(x, y);
      out.loss.backward();
    }
    const MemorySnapshot snapshot = allocator.snapshot();
    const std::vector<TraceEntry>& trace = snapshot.trace;
    // Sections as the recording draws them: a forward section is the entries of the op's scope; a backward
    // section runs from the backward op's first allocation to the next allocation of any other op.
    enum class In { none, forward, backward } in = In::none;
    for (size_t i = first; i < trace.size(); ++i) {
      const TraceEntry& e = trace[i];
      if (e.action != TraceAction::alloc && e.action != TraceAction::free_completed) continue;
      const bool alloc = e.action == TraceAction::alloc;
      const std::pair<std::string, int64_t> event{alloc ? "alloc" : "free", static_cast<int64_t>(e.size)};
      if (e.tag == "scaled_dot_product_cudnn_attention") {
        if (in != In::forward) forward.emplace_back();
        in = In::forward;
        forward.back().push_back(event);
      } else if (e.tag == "scaled_dot_product_cudnn_attention_backward") {
        if (in != In::backward) backward.emplace_back();
        in = In::backward;
        backward.back().push_back(event);
      } else if (in == In::backward && !alloc) {
        backward.back().push_back(event);
      } else {
        in = In::none;
      }
    }
    allocator.record_history(false);
  }
  REQUIRE(forward.size() == 12);
  REQUIRE(backward.size() == 12);
  for (size_t i = 0; i < 12; ++i) {
    CAPTURE(i);
    INFO("recorded " << show(recorded_forward[i].events) << "\nreplayed " << show(forward[i]));
    CHECK(forward[i] == recorded_forward[i].events);
    INFO("recorded " << show(recorded_backward[i].events) << "\nreplayed " << show(backward[i]));
    CHECK(backward[i] == recorded_backward[i].events);
  }
  fresh(kMeta);
}

TEST_CASE("nanoGPT with sdpa computes what the slow path computes, in float32 and bfloat16 on sim") {
  // A tiny GPT (bfloat16 built as such: no autocast): the fused attention's (memory-efficient for float32, cuDNN for
  // bfloat16) loss and gradients against nanoGPT's slow path on the same parameters.
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16}) {
    CAPTURE(scalar_type_name(dtype));
    const bool bf16 = dtype == ScalarType::bfloat16;
    fresh(kSim);
    nn::GPTConfig config{.n_layer = 2, .n_head = 2, .n_embd = 64, .vocab_size = 128, .block_size = 32};
    std::map<std::string, std::vector<double>> grads[2];
    double losses[2] = {0, 0};
    for (int kind = 0; kind < 2; ++kind) {
      config.attention = kind == 0 ? nn::AttentionKind::slow : nn::AttentionKind::sdpa;
      manual_seed(1337);
      nn::GPT model(config, TensorOptions{dtype, kSim});
      manual_seed(5);
      const Tensor x = randint(0, config.vocab_size, {2, 32}, TensorOptions{ScalarType::int64, kSim});
      const Tensor y = randint(0, config.vocab_size, {2, 32}, TensorOptions{ScalarType::int64, kSim});
      nn::GPT::Output out = model.forward(x, y);
      losses[kind] = out.loss.item();
      out.loss.backward();
      for (const auto& [name, p] : model.named_parameters())
        grads[kind][name] = p.grad().to(ScalarType::float64).tolist();
    }
    CHECK(std::isfinite(losses[1]));
    CHECK(losses[1] == doctest::Approx(losses[0]).epsilon(bf16 ? 2e-2 : 1e-5));
    for (const auto& [name, g] : grads[0]) {
      CAPTURE(name);
      check_close_to_reference(grads[1][name], g, bf16 ? 0.1 : 1e-4, "gradient");
    }
  }
}
