// scaled_dot_product_attention where PyTorch 2.11 on the H100 runs its flash backend (and the cuDNN calls of
// the same recording), against tests/data/pytorch_probes/sdpa_flash (tools/probes/sdpa_flash_probe.py), and
// its memory-efficient backend (16-bit head dims above 256, causal calls with one key, float32 head dims above
// 64), against tests/data/pytorch_probes/sdpa_efficient (tools/probes/sdpa_efficient_probe.py):
//  - every recorded case (flash.events, flash_splits.events, efficient.events) replayed on sim and meta: the whole
//  allocation
//    and free sequence from the case's start mark to its `freed` mark, allocated / reserved at each mark, the
//    fused op's forward allocations, the output's strides and grad_fn;
//  - the backend rule against torch._fused_sdp_choice over the recorded grids (flash_choices*.txt);
//  - flash_num_splits against the key-split forwards recorded;
//  - values and gradients of the flash path (padded or not) on sim against the math composition in float64;
//  - the flash op's refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/recorded_replay.h"
#include "tests/support/attention_reference.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

std::string data_path(const std::string& relative) { return std::string(BYTEGRAD_TEST_DATA_DIR) + "/" + relative; }

struct Mark {
  std::string label;
  int64_t allocated = 0, reserved = 0;
  size_t event_index = 0;
};

struct FlashCase {
  std::string name, mode, layout, backend, y_strides, y_grad_fn;
  std::vector<std::string> grad_strides;  // each leaf's .grad, after backward
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0;
  ScalarType dtype = ScalarType::bfloat16;
  bool causal = false, grad = false, nograd_mode = false;
  AllocationEvents events;
  std::vector<Mark> marks;
  AllocationEvents forward_allocs;  // the allocations under the fused forward op's `# op` line (tagged mode)
};

std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

std::vector<FlashCase> read_cases(const std::string& file) {
  const std::string path = data_path("pytorch_probes/" + file);
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::vector<FlashCase> cases;
  const std::regex mark_re(R"(# mark (\S+) allocated=(\d+) reserved=(\d+) peak=(\d+))");
  const std::regex strides_re(R"(# strides y=(.*) grad_fn=(\S+))");
  bool open = false, in_forward_op = false;
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.rfind("# case ", 0) == 0) {
      const auto f = fields(line);
      FlashCase c;
      c.name = f.at("name");
      c.mode = f.at("mode");
      c.layout = f.at("layout");
      c.backend = f.at("backend");
      c.B = std::stoll(f.at("B"));
      c.H = std::stoll(f.at("H"));
      c.Sq = std::stoll(f.at("Sq"));
      c.Sk = std::stoll(f.at("Sk"));
      c.D = std::stoll(f.at("D"));
      c.dtype = f.at("dtype") == "float16"   ? ScalarType::float16
                : f.at("dtype") == "float32" ? ScalarType::float32
                                             : ScalarType::bfloat16;
      c.causal = f.at("causal") == "1";
      c.grad = f.at("grad") == "1";
      c.nograd_mode = f.at("nograd_mode") == "1";
      cases.push_back(std::move(c));
      open = true;
      in_forward_op = false;
      continue;
    }
    if (!open) continue;
    FlashCase& c = cases.back();
    if (std::regex_match(line, m, mark_re)) {
      c.marks.push_back({m[1], std::stoll(m[2]), std::stoll(m[3]), c.events.size()});
      if (m[1] == "freed") open = false;
    } else if (line.rfind("# strides grad0=", 0) == 0) {
      const std::regex grad_re(R"(grad\d=(\([^)]*\):\([^)]*\)))");
      for (auto it = std::sregex_iterator(line.begin(), line.end(), grad_re); it != std::sregex_iterator(); ++it)
        c.grad_strides.push_back((*it)[1]);
    } else if (std::regex_match(line, m, strides_re)) {
      c.y_strides = m[1];
      c.y_grad_fn = m[2];
    } else if (line.rfind("# op ", 0) == 0) {
      in_forward_op = line == "# op aten._scaled_dot_product_flash_attention.default" ||
                      line == "# op aten._scaled_dot_product_cudnn_attention.default" ||
                      line == "# op aten._scaled_dot_product_efficient_attention.default";
    } else if (line.rfind("alloc ", 0) == 0 || line.rfind("free_completed ", 0) == 0) {
      const bool alloc = line[0] == 'a';
      const int64_t bytes = std::stoll(line.substr(alloc ? 6 : 15));
      c.events.emplace_back(alloc ? "alloc" : "free", bytes);
      if (alloc && in_forward_op) c.forward_allocs.emplace_back("alloc", bytes);
    }
  }
  return cases;
}

struct Replayed {
  AllocationEvents events, forward_allocs;
  std::vector<Mark> marks;
  std::string y_strides, y_grad_fn;
  std::vector<std::string> grad_strides;
  SdpaBackend backend = SdpaBackend::math;
};

// The probe's program for one case on `device` (tools/probes/sdpa_flash_probe.py's run_case).
Replayed replay(const FlashCase& c, Device device) {
  fresh(device);
  CachingAllocator& allocator = caching_allocator(device);
  manual_seed(0);
  const TensorOptions options{c.dtype, device};
  std::vector<Tensor> leaves;
  if (c.layout == "split") {
    leaves.push_back(randn({c.B, c.Sq, 3 * c.H * c.D}, options));
  } else {
    leaves.push_back(randn({c.B, c.H, c.Sq, c.D}, options));
    leaves.push_back(randn({c.B, c.H, c.Sk, c.D}, options));
    leaves.push_back(randn({c.B, c.H, c.Sk, c.D}, options));
  }
  for (Tensor& t : leaves) t.requires_grad_(c.grad);
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
    Tensor q, k, v;
    if (c.layout == "split") {
      std::vector<Tensor> parts = leaves[0].split(c.H * c.D, 2);
      q = parts[0].view({c.B, c.Sq, c.H, c.D}).transpose(1, 2);
      k = parts[1].view({c.B, c.Sk, c.H, c.D}).transpose(1, 2);
      v = parts[2].view({c.B, c.Sk, c.H, c.D}).transpose(1, 2);
    } else {
      q = leaves[0];
      k = leaves[1];
      v = leaves[2];
    }
    r.backend = select_sdpa_backend(q, k, v, c.causal);
    mark("start");
    Tensor y;
    if (c.nograd_mode) {
      NoGradGuard no_grad;
      y = scaled_dot_product_attention(q, k, v, c.causal);
    } else {
      y = scaled_dot_product_attention(q, k, v, c.causal);
    }
    mark("forward");
    r.y_strides = sizes_and_strides(y);
    r.y_grad_fn = y.grad_fn_name().empty() ? "None" : y.grad_fn_name();
    if (c.grad && !c.nograd_mode) {
      // torch.ones_like(y): y's strides when y is dense, else the dense layout in y's order (here contiguous)
      const bool dense = y.is_contiguous() || y.transpose(1, 2).is_contiguous();
      Tensor ones = dense ? empty_strided(y.sizes(), y.strides(), options) : empty(y.sizes(), options);
      ones.fill_(1.0);
      y.backward(ones);
      ones = Tensor();
      mark("backward");
      for (const Tensor& t : leaves) r.grad_strides.push_back(sizes_and_strides(t.grad()));
    }
    // del q, k, v, y; leaves.clear(); del qkv / q0, k0, v0
    q = Tensor();
    k = Tensor();
    v = Tensor();
    y = Tensor();
    for (Tensor& t : leaves) t = Tensor();
    mark("freed");
  }
  const std::string fwd_tag = r.backend == SdpaBackend::flash_attention       ? "scaled_dot_product_flash_attention"
                              : r.backend == SdpaBackend::efficient_attention ? "scaled_dot_product_efficient_attention"
                                                                              : "scaled_dot_product_cudnn_attention";
  const MemorySnapshot snapshot = allocator.snapshot();
  for (size_t i = first_entry; i < snapshot.trace.size(); ++i) {
    const TraceEntry& e = snapshot.trace[i];
    if (e.action != TraceAction::alloc && e.action != TraceAction::free_completed) continue;
    const std::pair<std::string, int64_t> event{e.action == TraceAction::alloc ? "alloc" : "free",
                                                static_cast<int64_t>(e.size)};
    r.events.push_back(event);
    if (e.action == TraceAction::alloc && e.tag == fwd_tag) r.forward_allocs.push_back(event);
  }
  allocator.record_history(false);
  return r;
}

SdpaBackend backend_named(const std::string& name) {
  if (name == "FLASH_ATTENTION") return SdpaBackend::flash_attention;
  if (name == "CUDNN_ATTENTION") return SdpaBackend::cudnn_attention;
  if (name == "EFFICIENT_ATTENTION") return SdpaBackend::efficient_attention;
  return SdpaBackend::math;
}

// The CPU reference is slow on the big cases; those are replayed on meta only (sim allocates alike).
bool small_enough_for_sim(const FlashCase& c) { return c.B * c.H * c.Sq * c.Sk * c.D <= (int64_t{1} << 24); }

void check_replays(const std::string& file, size_t expected_cases) {
  const std::vector<FlashCase> cases = read_cases(file);
  REQUIRE(cases.size() == expected_cases);
  for (const FlashCase& c : cases) {
    CAPTURE(c.name);
    CAPTURE(c.mode);
    std::vector<Device> devices{kMeta};
    if (small_enough_for_sim(c) && c.mode == "plain") devices.insert(devices.begin(), kSim);
    for (Device device : devices) {
      CAPTURE(device.str());
      const Replayed r = replay(c, device);
      CHECK(r.backend == backend_named(c.backend));
      CHECK(r.y_strides == c.y_strides);
      CHECK(r.y_grad_fn == c.y_grad_fn);
      CHECK(r.grad_strides == c.grad_strides);
      if (c.mode == "tagged") {
        INFO("recorded forward allocations " << show(c.forward_allocs) << "\nreplayed " << show(r.forward_allocs));
        CHECK(r.forward_allocs == c.forward_allocs);
      }
      INFO("recorded " << show(c.events) << "\nreplayed " << show(r.events));
      CHECK(r.events == c.events);
      REQUIRE(r.marks.size() == c.marks.size());
      for (size_t i = 0; i < c.marks.size(); ++i) {
        CAPTURE(c.marks[i].label);
        CHECK(r.marks[i].label == c.marks[i].label);
        CHECK(r.marks[i].allocated == c.marks[i].allocated);
        CHECK(r.marks[i].reserved == c.marks[i].reserved);
        CHECK(r.marks[i].event_index == c.marks[i].event_index);
      }
    }
  }
}

}  // namespace

TEST_CASE("sdpa_flash/flash.events: every case's allocations and frees, forward and backward, on sim and meta") {
  check_replays("sdpa_flash/flash.events", 40);
}

TEST_CASE("sdpa_flash/flash_splits.events: key-split forwards, padded head dims above 128, on sim and meta") {
  check_replays("sdpa_flash/flash_splits.events", 16);
}

TEST_CASE(
    "sdpa_efficient/efficient.events: the memory-efficient backend for 16-bit head dims above 256, causal "
    "calls with one key, and float32 head dims above 64, on sim and meta") {
  check_replays("sdpa_efficient/efficient.events", 44);
}

TEST_CASE("the backend rule equals torch._fused_sdp_choice on the H100 over the recorded grids") {
  fresh(kMeta);
  auto pick = [](ScalarType dtype, int64_t D, int64_t Dv, bool causal, int64_t Sq, int64_t Sk) {
    const TensorOptions o{dtype, kMeta};
    return select_sdpa_backend(empty({2, 2, Sq, D}, o), empty({2, 2, Sk, D}, o), empty({2, 2, Sk, Dv}, o), causal);
  };
  auto from_choice = [](int choice) {
    switch (choice) {
      case 1: return SdpaBackend::flash_attention;
      case 2: return SdpaBackend::efficient_attention;
      case 3: return SdpaBackend::cudnn_attention;
      default: return SdpaBackend::math;
    }
  };
  {
    std::ifstream in(data_path("pytorch_probes/sdpa_flash/flash_choices.txt"));
    REQUIRE(in.good());
    std::string dtype, name;
    int64_t D = 0, Sq = 0, Sk = 0;
    int causal = 0, choice = 0, lines = 0;
    while (in >> dtype >> D >> causal >> Sq >> Sk >> choice >> name) {
      CAPTURE(dtype);
      CAPTURE(D);
      CAPTURE(causal);
      CAPTURE(Sq);
      CAPTURE(Sk);
      const ScalarType t = dtype == "float16" ? ScalarType::float16 : ScalarType::bfloat16;
      CHECK(pick(t, D, D, causal != 0, Sq, Sk) == from_choice(choice));
      ++lines;
    }
    CHECK(lines == 384);
  }
  {
    std::ifstream in(data_path("pytorch_probes/sdpa_flash/flash_choices_dv.txt"));
    REQUIRE(in.good());
    std::string line;
    const std::regex re(R"(bfloat16 D=(\d+) Dv=(\d+) causal=(\d) 16x16 (\d) \S+)");
    int lines = 0;
    while (std::getline(in, line)) {
      std::smatch m;
      REQUIRE(std::regex_match(line, m, re));
      CAPTURE(line);
      CHECK(pick(ScalarType::bfloat16, std::stoll(m[1]), std::stoll(m[2]), m[3] == "1", 16, 16) ==
            from_choice(std::stoi(m[4])));
      ++lines;
    }
    CHECK(lines == 72);
  }
}

TEST_CASE("flash_num_splits: the key splits of the recorded forwards") {
  CHECK(flash_num_splits(1, 2, 1024, 1024, 64) == 4);  // out_accum 4 x 1 x 2 x 1024 x 64 floats
  CHECK(flash_num_splits(1, 1, 512, 512, 104) == 4);   // 4 x 512 x 128
  CHECK(flash_num_splits(2, 3, 1, 600, 24) == 3);      // 3 x 6 x 1 x 32
  CHECK(flash_num_splits(2, 2, 256, 256, 144) == 4);   // 4 x 4 x 256 x 192
  CHECK(flash_num_splits(8, 12, 256, 256, 24) == 1);   // enough query tiles to fill the SMs
  CHECK(flash_num_splits(2, 3, 50, 50, 24) == 1);      // one key block
  CHECK(flash_num_splits(2, 4, 128, 128, 64) == 1);
  CHECK(flash_num_splits(1, 2, 64, 1, 200) == 1);
}

TEST_CASE(
    "the flash and 16-bit memory-efficient paths' values and gradients on sim equal the math composition "
    "(float64)") {
  struct Case {
    int64_t B, H, Sq, Sk, D;
    bool causal, split;
    std::optional<double> scale;
    SdpaBackend backend = SdpaBackend::flash_attention;
  };
  const std::vector<Case> shapes = {{2, 3, 9, 9, 20, true, true, std::nullopt},    // padded to 24, nanoGPT's views
                                    {1, 2, 7, 11, 12, false, false, 0.4},          // Sq != Sk, padded to 16
                                    {2, 2, 6, 1, 16, false, false, std::nullopt},  // Sk == 1, unpadded
                                    {1, 1, 1, 1, 20, true, false, std::nullopt},   // Sq == Sk == 1, causal
                                    {1, 2, 5, 5, 60, true, false, std::nullopt},
                                    // memory-efficient: a head dim above 256 (nanoGPT's views), causal with one key
                                    {1, 2, 6, 6, 264, true, true, std::nullopt, SdpaBackend::efficient_attention},
                                    {2, 1, 7, 1, 64, true, false, 0.3, SdpaBackend::efficient_attention},
                                    {1, 1, 5, 1, 160, true, false, std::nullopt, SdpaBackend::efficient_attention}};
  for (const Case& s : shapes) {
    CAPTURE(s.D);
    CAPTURE(s.Sq);
    CAPTURE(s.Sk);
    CAPTURE(s.causal);
    fresh(kSim);
    manual_seed(29);
    const TensorOptions f32{ScalarType::float32, kSim};
    const Tensor q0 = randn({s.B, s.H, s.Sq, s.D}, f32), k0 = randn({s.B, s.H, s.Sk, s.D}, f32),
                 v0 = randn({s.B, s.H, s.Sk, s.D}, f32), w = randn({s.B, s.H, s.Sq, s.D}, f32);
    const AttentionReference ref = attention_math_reference(q0, k0, v0, w, s.causal, s.scale);
    for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16}) {
      CAPTURE(scalar_type_name(dtype));
      const double tolerance = dtype == ScalarType::bfloat16 ? 3e-2 : 1e-2;
      Tensor q, k, v, qkv;
      if (s.split) {
        // q, k, v as the transposed views of one (B, T, 3C) leaf
        qkv =
            cat({q0.transpose(1, 2).reshape({s.B, s.Sq, s.H * s.D}), k0.transpose(1, 2).reshape({s.B, s.Sk, s.H * s.D}),
                 v0.transpose(1, 2).reshape({s.B, s.Sk, s.H * s.D})},
                2)
                .to(dtype)
                .detach();
        qkv.requires_grad_(true);
        std::vector<Tensor> parts = qkv.split(s.H * s.D, 2);
        q = parts[0].view({s.B, s.Sq, s.H, s.D}).transpose(1, 2);
        k = parts[1].view({s.B, s.Sk, s.H, s.D}).transpose(1, 2);
        v = parts[2].view({s.B, s.Sk, s.H, s.D}).transpose(1, 2);
      } else {
        q = q0.to(dtype).detach();
        k = k0.to(dtype).detach();
        v = v0.to(dtype).detach();
        for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
      }
      REQUIRE(select_sdpa_backend(q, k, v, s.causal) == s.backend);
      const Tensor out = scaled_dot_product_attention(q, k, v, s.causal, s.scale);
      CHECK(out.sizes() == Shape{s.B, s.H, s.Sq, s.D});
      sum((out * w.to(dtype)).to(ScalarType::float32)).backward();
      check_close_to_reference(out.to(ScalarType::float64).tolist(), ref.out, tolerance, "output");
      if (s.split) {
        const Tensor g = qkv.grad();
        const int64_t C = s.H * s.D;
        auto part = [&](int64_t i, int64_t S) {
          return g.narrow(2, i * C, C).reshape({s.B, S, s.H, s.D}).transpose(1, 2).to(ScalarType::float64).tolist();
        };
        check_close_to_reference(part(0, s.Sq), ref.dq, tolerance, "dq");
        check_close_to_reference(part(1, s.Sk), ref.dk, tolerance, "dk");
        check_close_to_reference(part(2, s.Sk), ref.dv, tolerance, "dv");
      } else {
        check_close_to_reference(q.grad().to(ScalarType::float64).tolist(), ref.dq, tolerance, "dq");
        check_close_to_reference(k.grad().to(ScalarType::float64).tolist(), ref.dk, tolerance, "dk");
        check_close_to_reference(v.grad().to(ScalarType::float64).tolist(), ref.dv, tolerance, "dv");
      }
    }
  }
}

TEST_CASE(
    "the flash op itself (float32, beyond PyTorch) equals the math composition tightly, and refuses bad "
    "shapes") {
  fresh(kSim);
  manual_seed(31);
  const TensorOptions f32{ScalarType::float32, kSim};
  const Tensor q0 = randn({1, 2, 6, 8}, f32), k0 = randn({1, 2, 9, 8}, f32), v0 = randn({1, 2, 9, 8}, f32),
               w = randn({1, 2, 6, 8}, f32);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const AttentionReference ref = attention_math_reference(q0, k0, v0, w, causal, 0.5);
    Tensor q = q0.detach(), k = k0.detach(), v = v0.detach();
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
    const AttentionResult r = scaled_dot_product_flash_attention(q, k, v, causal, 0.5);
    CHECK(r.output.grad_fn_name() == "ScaledDotProductFlashAttentionBackward0");
    CHECK(r.logsumexp.sizes() == Shape{1, 2, 6});
    CHECK(r.philox_seed.nbytes() == 16);
    CHECK(r.philox_offset.nbytes() == 8);
    sum(r.output * w).backward();
    check_close_to_reference(r.output.to(ScalarType::float64).tolist(), ref.out, 2e-5, "output");
    check_close_to_reference(q.grad().to(ScalarType::float64).tolist(), ref.dq, 2e-5, "dq");
    check_close_to_reference(k.grad().to(ScalarType::float64).tolist(), ref.dk, 2e-5, "dk");
    check_close_to_reference(v.grad().to(ScalarType::float64).tolist(), ref.dv, 2e-5, "dv");
  }
  const TensorOptions bf{ScalarType::bfloat16, kMeta};
  CHECK_THROWS_WITH_AS(
      scaled_dot_product_flash_attention(empty({1, 1, 4, 20}, bf), empty({1, 1, 4, 20}, bf), empty({1, 1, 4, 20}, bf)),
      doctest::Contains("multiple of 8"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(scaled_dot_product_flash_attention(empty({1, 1, 4, 264}, bf), empty({1, 1, 4, 264}, bf),
                                                          empty({1, 1, 4, 264}, bf)),
                       doctest::Contains("at most 256"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      scaled_dot_product_flash_attention(empty({1, 1, 4, 16}, bf), empty({1, 1, 4, 16}, bf), empty({1, 1, 4, 8}, bf)),
      doctest::Contains("D == Dv"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(scaled_dot_product_flash_attention(empty({1, 1, 16, 4}, bf).transpose(2, 3),
                                                          empty({1, 1, 4, 16}, bf), empty({1, 1, 4, 16}, bf)),
                       doctest::Contains("contiguous last dimension"), std::invalid_argument);
  CHECK_THROWS_AS(scaled_dot_product_attention(empty({1, 1, 4, 20}, bf), empty({1, 1, 4, 20}, bf),
                                               empty({1, 1, 4, 20}, TensorOptions{ScalarType::float16, kMeta})),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(constant_pad_nd(empty({2, 3}, bf), {1}), doctest::Contains("even length"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(constant_pad_nd(empty({2, 3}, bf), {-2, -2}), doctest::Contains("negative size"),
                       std::invalid_argument);
}

TEST_CASE("constant_pad_nd pads with the value, crops with negative pads, and its gradient crops back") {
  fresh(kSim);
  const Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, TensorOptions{ScalarType::float32, kSim});
  CHECK(constant_pad_nd(x, {1, 2}, 9.0).tolist() == std::vector<double>{9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9});
  CHECK(constant_pad_nd(x, {0, 0, 1, 0}).tolist() == std::vector<double>{0, 0, 0, 1, 2, 3, 4, 5, 6});
  CHECK(constant_pad_nd(x, {-1, 0}).tolist() == std::vector<double>{2, 3, 5, 6});
  CHECK(constant_pad_nd(x, {1, -1}).tolist() == std::vector<double>{0, 1, 2, 0, 4, 5});
  Tensor leaf = x.detach();
  leaf.requires_grad_(true);
  const Tensor padded = constant_pad_nd(leaf, {0, 5});
  CHECK(padded.grad_fn_name() == "ConstantPadNdBackward0");
  sum(padded * arange(16.0, TensorOptions{ScalarType::float32, kSim}).view({2, 8})).backward();
  CHECK(leaf.grad().tolist() == std::vector<double>{0, 1, 2, 8, 9, 10});
}
