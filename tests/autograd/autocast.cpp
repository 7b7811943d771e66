// Autocast (tensor/autocast.h): PyTorch 2.11's CUDA op policy and cast cache, on sim and meta. Event
// sequences are PyTorch's as recorded on the H100 (tests/data/pytorch_probes/gpt2_ops/ws0/
// g_gpt2_tiny_bf16.events: the first block's c_attn under autocast casts its bias, then its weight, then its
// input, then allocates its output); sizes are worked out beside each check.
#include <doctest/doctest.h>

#include <algorithm>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/nn/linear.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/testing/memory_probe.h"
#include "tests/support/allocation_probe.h"
#include "tests/support/scoped_env.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

const TensorOptions f32(Device d) { return TensorOptions{ScalarType::float32, d}; }

AllocationEvents sorted(AllocationEvents events) {
  std::sort(events.begin(), events.end());
  return events;
}

}  // namespace

TEST_CASE("linear under bfloat16 autocast: bias, weight, input cast in that order; cached weight casts freed at exit") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    manual_seed(0);
    nn::Linear c_attn(64, 192, true, f32(d));
    const Tensor x = randn({4, 64, 64}, f32(d));  // no grad: the node saves only mat1 (the input's cast)
    Tensor y;
    AllocationEvents inside, second, at_exit;
    {
      AutocastGuard autocast(d.type, ScalarType::bfloat16);
      inside = allocation_events(d, [&] { y = c_attn.forward(x); });
      CHECK(autocast_cache_size() == 2);  // weight and bias: leaves that require grad
      // The second use finds both casts cached: only the input's cast and the output.
      Tensor y2;
      second = allocation_events(d, [&] { y2 = c_attn.forward(x); });
      at_exit = allocation_events(d, [&] { y2 = Tensor(); });
    }
    CHECK(autocast_cache_size() == 0);
    CHECK(y.dtype() == ScalarType::bfloat16);
    // bias 192 * 2 = 384; weight 192 * 64 * 2 = 24576; input 4 * 64 * 64 * 2 = 32768; output 4 * 64 * 192 * 2
    // = 98304 bytes (PyTorch's trace: alloc 384, 24576, 32768, 98304).
    CHECK(inside == AllocationEvents{{"alloc", 384}, {"alloc", 24576}, {"alloc", 32768}, {"alloc", 98304}});
    CHECK(second == AllocationEvents{{"alloc", 32768}, {"alloc", 98304}});
    // Dropping y2 frees its output and the input cast its node saved.
    CHECK(sorted(at_exit) == AllocationEvents{{"free", 32768}, {"free", 98304}});
  }
}

TEST_CASE("leaving the outermost region frees the cached casts no graph saved; a nested region keeps them") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  manual_seed(0);
  nn::Linear fc(64, 32, true, f32(d));
  const Tensor x = randn({8, 64}, f32(d));
  Tensor y;
  MemoryProbe probe(d);
  {
    AutocastGuard outer(d.type, ScalarType::bfloat16);
    {
      AutocastGuard inner(d.type, ScalarType::bfloat16, /*enabled=*/false);
      CHECK_FALSE(is_autocast_enabled());
      CHECK(fc.forward(x).dtype() == ScalarType::float32);  // autocast off inside: no casts
    }
    CHECK(is_autocast_enabled());
    y = fc.forward(x);
    { AutocastGuard inner(d.type, ScalarType::bfloat16); }
    CHECK(autocast_cache_size() == 2);  // the inner region's exit does not clear the cache
    // Live: bias cast block(32 * 2) = 512, weight cast 32 * 64 * 2 = 4096, input cast 8 * 64 * 2 = 1024,
    // output 8 * 32 * 2 = 512.
    CHECK(probe.allocated_delta_is(512 + 4096 + 1024 + 512));
  }
  // x needs no grad, so addmm's node saved only mat1 (the input's cast); the weight and bias casts go.
  CHECK(probe.allocated_delta_is(1024 + 512));
  CHECK(y.dtype() == ScalarType::bfloat16);
}

TEST_CASE("gradients reach float32 parameters through the casts; saved bf16 casts live until backward") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    manual_seed(0);
    nn::Linear fc(16, 8, true, f32(d));
    const Tensor x = randn({4, 16}, f32(d)).requires_grad_();
    Tensor loss;
    MemoryProbe probe(d);
    {
      AutocastGuard autocast(d.type, ScalarType::bfloat16);
      loss = fc.forward(x).sum();
    }
    // Live after the region: the input's cast (saved as mat1, 4 * 16 * 2 = 128 -> a 512-byte block), the
    // weight's cast (mat2, 8 * 16 * 2 = 256 -> 512) and the 0-d loss (512). The bias cast went with the
    // cache, and the product's output with its last reference (SumBackward0 keeps only the shape). sum runs
    // with dtype=float32 (fp32_set_opt_dtype), reading the bfloat16 product as it is: the loss is float32,
    // still one 512-byte block.
    CHECK(probe.allocated_delta_is(512 + 512 + 512));
    CHECK(loss.dtype() == ScalarType::float32);
    loss.backward();
    CHECK(fc.weight().grad().dtype() == ScalarType::float32);
    CHECK(fc.bias().grad().dtype() == ScalarType::float32);
    CHECK(x.grad().dtype() == ScalarType::float32);
  }
}

TEST_CASE("the policy: float32 ops cast up, lower-precision ops cast down, others keep their operands' dtype") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor a = randn({4, 8}, f32(d));
  const Tensor h = randn({4, 8}, f32(d)).to(ScalarType::bfloat16);
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  CHECK(matmul(a, h.t()).dtype() == ScalarType::bfloat16);  // lower precision
  CHECK(mm(a, a.t()).dtype() == ScalarType::bfloat16);
  CHECK(softmax(h, -1).dtype() == ScalarType::float32);  // float32 unless a dtype is given
  CHECK(log_softmax(h, -1).dtype() == ScalarType::float32);
  CHECK(exp(h).dtype() == ScalarType::float32);  // float32
  CHECK(layer_norm(h, {8}).dtype() == ScalarType::float32);
  CHECK(gelu(h).dtype() == ScalarType::bfloat16);  // not listed: its operand's dtype
  CHECK(gelu(a).dtype() == ScalarType::float32);
  CHECK(dot(a.flatten(), a.flatten()).dtype() == ScalarType::float32);  // promote: the widest operand
  CHECK(dot(h.flatten(), h.flatten()).dtype() == ScalarType::bfloat16);
  // fp32_set_opt_dtype: float32 when no dtype is given (free functions and members, with and without dims),
  // the given dtype otherwise; inputs autocast does not cast (integers, float64) keep their own rules.
  CHECK(sum(h).dtype() == ScalarType::float32);
  CHECK(sum(h, {1}).dtype() == ScalarType::float32);
  CHECK(h.sum().dtype() == ScalarType::float32);
  CHECK(h.sum({0}, true).dtype() == ScalarType::float32);
  CHECK(prod(h).dtype() == ScalarType::float32);
  CHECK(norm(h).dtype() == ScalarType::float32);
  CHECK(h.norm({1}).dtype() == ScalarType::float32);
  CHECK(sum(a).dtype() == ScalarType::float32);
  CHECK(sum(h, ScalarType::bfloat16).dtype() == ScalarType::bfloat16);
  CHECK(sum(h, {1}, false, ScalarType::float64).dtype() == ScalarType::float64);
  CHECK(norm(h, ScalarType::bfloat16).dtype() == ScalarType::bfloat16);
  CHECK(softmax(h, -1, ScalarType::bfloat16).dtype() == ScalarType::bfloat16);
  CHECK(sum(zeros({4}, TensorOptions{ScalarType::int32, d})).dtype() == ScalarType::int64);
  CHECK(sum(randn({4}, TensorOptions{ScalarType::float64, d})).dtype() == ScalarType::float64);
  CHECK(mean(h).dtype() == ScalarType::bfloat16);  // not listed
  const Tensor target = zeros({4}, TensorOptions{ScalarType::int64, d});
  CHECK(cross_entropy(h, target).dtype() == ScalarType::float32);  // log_softmax and nll_loss run in float32
  // nll_loss's class weights are cast with its other operands: a bfloat16 weight meets float32 log-probs
  const Tensor class_weights = ones({8}, f32(d)).to(ScalarType::bfloat16);
  CHECK(cross_entropy(h, target, {.weight = class_weights}).dtype() == ScalarType::float32);
}

TEST_CASE("rms_norm under autocast: input and weight cast to float32 first, then the fused kernel's allocations") {
  const Device d = kSim;
  fresh(d);
  const Tensor h = randn({64, 256}, f32(d)).to(ScalarType::bfloat16);
  const Tensor w = ones({256}, f32(d)).to(ScalarType::bfloat16);
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  NoGradGuard no_grad;
  Tensor y;
  const AllocationEvents events = allocation_events(d, [&] { y = rms_norm(h, {256}, w); });
  // the weight cast first (last operand first: 256 * 4 = 1024), the input's (64 * 256 * 4 = 65536), then the
  // float32 output (65536) and rstd (64 * 4 = 256); without a graph rstd goes when rms_norm returns, then
  // both casts (the order in which the wrapper drops its casts is not this test's business)
  REQUIRE(events.size() == 7);
  CHECK(AllocationEvents(events.begin(), events.begin() + 5) ==
        AllocationEvents{{"alloc", 1024}, {"alloc", 65536}, {"alloc", 65536}, {"alloc", 256}, {"free", 256}});
  AllocationEvents last_frees(events.begin() + 5, events.end());
  std::sort(last_frees.begin(), last_frees.end());
  CHECK(last_frees == AllocationEvents{{"free", 1024}, {"free", 65536}});
  CHECK(y.dtype() == ScalarType::float32);
}

TEST_CASE("softmax of a bfloat16 input: a float32 cast, the float32 output, the cast freed on return") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor att = randn({4, 2, 64, 64}, f32(d)).to(ScalarType::bfloat16);
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  Tensor p;
  const AllocationEvents events = allocation_events(d, [&] { p = softmax(att, -1); });
  // 4 * 2 * 64 * 64 * 4 = 131072 for the cast and for the output (PyTorch's trace: _to_copy alloc 131072,
  // _softmax alloc 131072; without a graph the cast goes at once).
  CHECK(events == AllocationEvents{{"alloc", 131072}, {"alloc", 131072}, {"free", 131072}});
}

// That cast is read by the softmax alone, so it is allocated and recorded but left unwritten and the kernel
// reads the bfloat16 input (issue 30); on the way back the softmax's float32 gradient has one reader, the
// cast's backward to bfloat16: log_softmax's kernel writes the bfloat16 values into its first bytes and the
// cast copies them; softmax's gradient is handed on deferred and the cast writes it from softmax_backward's
// operands in one pass (tensor/gradient_reader.h). Both give the bits, allocations and graph of the whole path: the
// user's own cast with a hook on it (a hook may read the float32 gradient, so nothing is handed on packed).
TEST_CASE("softmax of a bfloat16 input: the unwritten cast gives the written cast's bits, memory and graph") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor start = randn({4, 2, 64, 96}, f32(d)).to(ScalarType::bfloat16);
  const Tensor grad = randn({4, 2, 64, 96}, f32(d));
  struct Run {
    AllocationEvents events;
    std::vector<double> out, x_grad;
    uint64_t packed = 0;
  };
  const auto run = [&](bool whole_path, bool log) {
    const Tensor x = start.detach().clone().requires_grad_();
    Run r;
    const auto handed = [] {
      return packed_gradients_handed(PackedGradient::cast_values) + packed_gradients_handed(PackedGradient::deferred);
    };
    const uint64_t before = handed();
    r.events = allocation_events(d, [&] {
      Tensor y;
      if (whole_path) {
        const Tensor converted = x.to(ScalarType::float32);
        converted.register_hook([](const Tensor& g) { return g; });
        y = log ? log_softmax(converted, -1) : softmax(converted, -1);
      } else {
        y = log ? log_softmax(x, -1, ScalarType::float32) : softmax(x, -1, ScalarType::float32);
      }
      CHECK(y.grad_fn_name() == (log ? "LogSoftmaxBackward0" : "SoftmaxBackward0"));
      r.out = y.detach().flatten().tolist();
      y.backward(grad);
    });
    r.packed = handed() - before;
    r.x_grad = x.grad().to(ScalarType::float32).flatten().tolist();
    return r;
  };
  for (bool log : {false, true}) {
    const Run direct = run(false, log), whole = run(true, log);
    CHECK(direct.packed == 1);
    CHECK(whole.packed == 0);
    CHECK(direct.out == whole.out);  // bit for bit
    CHECK(direct.x_grad == whole.x_grad);
    CHECK(direct.events == whole.events);
  }
}

// PyTorch's softmax(x, dim, dtype=float32) sends a float16 CUDA input to _softmax(x, dim, half_to_float=true):
// no converted copy, and the gradient comes back in float16 (_softmax_backward_data(grad, result, dim, Half):
// the float16 grad_input, then grad * output in float32, freed). Found recorded in the GPT-2 sweep
// (small_fp16_4x256: bytegrad's extra copy moved later blocks).
TEST_CASE("softmax of a float16 input under float16 autocast: read as float16, written as float32, no copy") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor att = randn({4, 2, 64, 64}, f32(d)).to(ScalarType::float16).requires_grad_();
  Tensor p;
  AllocationEvents forward;
  {
    AutocastGuard autocast(d.type, ScalarType::float16);
    forward = allocation_events(d, [&] { p = softmax(att, -1); });
  }
  // 4 * 2 * 64 * 64 * 4 = 131072: the float32 output only.
  CHECK(forward == AllocationEvents{{"alloc", 131072}});
  CHECK(p.dtype() == ScalarType::float32);
  // Values as the float32 softmax of the same numbers.
  const Tensor reference = softmax(att.detach().to(ScalarType::float32), -1);
  CHECK((p.detach() - reference).abs().max().item() < 1e-6);
  const Tensor grad = randn({4, 2, 64, 64}, f32(d));
  const AllocationEvents backward = allocation_events(d, [&] { p.backward(grad); });
  // grad_input in float16 (4 * 2 * 64 * 64 * 2 = 65536), then the float32 product (131072), freed; the
  // gradient is stolen into .grad (no copy to float16 afterwards).
  CHECK(backward == AllocationEvents{{"alloc", 65536}, {"alloc", 131072}, {"free", 131072}});
  CHECK(att.grad().dtype() == ScalarType::float16);
  // The same gradient as through a float32 softmax (float16's rounding apart).
  const Tensor x32 = att.detach().to(ScalarType::float32).requires_grad_();
  softmax(x32, -1).backward(grad);
  CHECK((att.grad().to(ScalarType::float32) - x32.grad()).abs().max().item() < 2e-3);
}

// log_softmax's half_to_float path, as softmax's (its events against PyTorch's recording are in
// tests/programs/log_softmax_half.cpp): here the values and the gradient against the float32 path.
TEST_CASE(
    "log_softmax of a float16 input with dtype=float32: float32 values, a float16 gradient, as the float32 path") {
  const Device d = kSim;
  for (const int64_t dim : {int64_t{-1}, int64_t{0}}) {
    CAPTURE(dim);
    const Tensor x = (randn({64, 1000}, f32(d)) * 4.0).to(ScalarType::float16).requires_grad_();
    Tensor y;
    const AllocationEvents forward = allocation_events(d, [&] { y = log_softmax(x, dim, ScalarType::float32); });
    CHECK(forward == AllocationEvents{{"alloc", 256000}});  // 64 * 1000 * 4: the output only, no copy of x
    CHECK(y.dtype() == ScalarType::float32);
    const Tensor x32 = x.detach().to(ScalarType::float32).requires_grad_();
    const Tensor reference = log_softmax(x32, dim);
    CHECK((y.detach() - reference.detach()).abs().max().item() < 1e-5);
    const Tensor grad = randn({64, 1000}, f32(d));
    const AllocationEvents backward = allocation_events(d, [&] { y.backward(grad); });
    CHECK(backward == AllocationEvents{{"alloc", 128000}});  // grad_input in float16, nothing else
    CHECK(x.grad().dtype() == ScalarType::float16);
    reference.backward(grad);
    // The float32 gradient rounded once to float16: within float16's half-ulp of it.
    const Tensor expected = x32.grad();
    const Tensor difference = (x.grad().to(ScalarType::float32) - expected).abs();
    CHECK((difference - expected.abs() * (1.001 / 2048) - 1e-7).max().item() <= 0.0);
    CHECK(expected.abs().max().item() > 1.0);  // a gradient with something in it
  }
  // Under float16 autocast log_softmax takes the same path (fp32_set_opt_dtype); bfloat16 does not.
  const Tensor h = randn({8, 16}, f32(d)).to(ScalarType::float16);
  {
    AutocastGuard autocast(d.type, ScalarType::float16);
    Tensor y;
    CHECK(allocation_events(d, [&] { y = log_softmax(h, -1); }) == AllocationEvents{{"alloc", 512}});
    CHECK(y.dtype() == ScalarType::float32);
  }
  const Tensor b = randn({8, 16}, f32(d)).to(ScalarType::bfloat16);
  Tensor yb;
  CHECK(allocation_events(d, [&] { yb = log_softmax(b, -1, ScalarType::float32); }) ==
        AllocationEvents{{"alloc", 512}, {"alloc", 512}, {"free", 512}});
}

TEST_CASE("sum of a bfloat16 (1024, 1024) under autocast: one float32 output, no copy of the input") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    const Tensor x = randn({1024, 1024}, f32(d)).to(ScalarType::bfloat16);
    // PyTorch's sum(x, dtype=float32), which autocast's fp32_set_opt_dtype wrapper calls: the 0-d float32
    // output (4 bytes: a 512-byte block), then the kernel reads the bfloat16 input as it is
    // (make_reduction_from_out_ty's gpu_lowp_to_f32; sum_functor<BFloat16, float, float> converts in
    // registers), so there is no 1024 * 1024 * 4 = 4194304-byte float32 copy of it, which an fp32-policy cast
    // would make. 1048576 inputs into one output are split across 128 blocks of 512 threads: a staging
    // buffer of 128 float accumulators (512 bytes) and one 4-byte semaphore, freed (semaphore first) before
    // the op returns. That launch is the recorded float32 sum's of as many elements (events.jsonl "sum
    // [1048576] dims=None f32": alloc 4, 512, 4, free 4, 512): the accumulator is float in both, and 2-byte
    // inputs change only the width of vector loads (8 instead of 4), which leaves a 512-thread block.
    const AllocationEvents expected{{"alloc", 4}, {"alloc", 512}, {"alloc", 4}, {"free", 4}, {"free", 512}};
    Tensor s, explicit_dtype;
    AllocationEvents inside;
    {
      AutocastGuard autocast(d.type, ScalarType::bfloat16);
      MemoryProbe probe(d);
      inside = allocation_events(d, [&] { s = sum(x); });
      CHECK(probe.allocated_delta_is(512));           // the output's block, nothing else stays
      CHECK(probe.peak_allocated_delta_is(512 * 3));  // output, staging buffer, semaphore
    }
    CHECK(s.dtype() == ScalarType::float32);
    CHECK(s.dim() == 0);
    CHECK(inside == expected);
    // The same call outside autocast with the dtype given allocates the same; without it, a bfloat16 sum.
    CHECK(allocation_events(d, [&] { explicit_dtype = sum(x, ScalarType::float32); }) == expected);
    CHECK(explicit_dtype.dtype() == ScalarType::float32);
    CHECK(sum(x).dtype() == ScalarType::bfloat16);
    if (d == kSim) CHECK(s.item() == doctest::Approx(explicit_dtype.item()));
  }
}

TEST_CASE("a float32 sum's gradient reaches its bfloat16 leaf as bfloat16 (the engine's conversion)") {
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    const Tensor x = randn({1024, 1024}, f32(d)).to(ScalarType::bfloat16).requires_grad_();
    Tensor loss;
    {
      AutocastGuard autocast(d.type, ScalarType::bfloat16);
      loss = sum(x);
    }
    CHECK(loss.dtype() == ScalarType::float32);
    MemoryProbe probe(d);
    loss.backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == ScalarType::bfloat16);
    // The root gradient (a 0-d float32 one: a 512-byte block) is expanded by SumBackward0 (a view); the
    // engine converts it to the input's bfloat16 (validate_outputs' grad.to(bfloat16) of the expanded view: a
    // contiguous 1024 * 1024 * 2 = 2097152 bytes), which AccumulateGrad keeps as x.grad. The root's block
    // goes when backward returns.
    CHECK(probe.allocated_delta_is(2097152));
    CHECK(probe.peak_allocated_delta_is(512 + 2097152));
  }
}

TEST_CASE("prod and norm of a bfloat16 input under autocast: float32 outputs, no copies") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  for (Device d : {kSim, kMeta}) {
    CAPTURE(d.str());
    const Tensor x = (randn({64, 64}, f32(d)) * 0.01 + 1.0).to(ScalarType::bfloat16);
    const Tensor column = randn({64, 1}, f32(d)).to(ScalarType::bfloat16);
    AutocastGuard autocast(d.type, ScalarType::bfloat16);
    Tensor p, whole, rows, ones;
    // prod(x, dtype=float32): the 0-d output (4 bytes) and nothing else (make_reduction_from_out_ty, as sum;
    // 4096 inputs need no split across blocks: the recorded float32 prod of 65536 had none).
    CHECK(allocation_events(d, [&] { p = prod(x); }) == AllocationEvents{{"alloc", 4}});
    // linalg_vector_norm(x, 2, dtype=float32): the output in float32, then make_reduction reads the bfloat16
    // input as it is (gpu_lowp_to_f32). Whole: 4 bytes; over dim 1: 64 * 4 = 256 bytes. No split either.
    CHECK(allocation_events(d, [&] { whole = norm(x); }) == AllocationEvents{{"alloc", 4}});
    CHECK(allocation_events(d, [&] { rows = x.norm({1}); }) == AllocationEvents{{"alloc", 256}});
    // Reducing only size-1 dims is abs(x.to(dtype)) written into the output (linalg_vector_norm_out): the
    // float32 output (64 * 4 = 256), then x.to(float32) (another 256 bytes), freed on return.
    CHECK(allocation_events(d, [&] { ones = norm(column, {1}); }) ==
          AllocationEvents{{"alloc", 256}, {"alloc", 256}, {"free", 256}});
    for (const Tensor* t : {&p, &whole, &rows, &ones}) CHECK(t->dtype() == ScalarType::float32);
    CHECK(rows.sizes() == Shape{64});
    CHECK(ones.sizes() == Shape{64});
  }
}

TEST_CASE("fp32_set_opt_dtype keeps a given dtype: a conversion other than to float32 copies the input") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor h = randn({4, 8}, f32(d)).to(ScalarType::bfloat16);
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  Tensor kept, wide_sum, wide_norm, counted;
  // sum(h, dtype=bfloat16) runs as given: one 2-byte output.
  CHECK(allocation_events(d, [&] { kept = sum(h, ScalarType::bfloat16); }) == AllocationEvents{{"alloc", 2}});
  // sum(h, dtype=float64): gpu_lowp_to_f32 does not apply, so make_reduction_from_out_ty reduces
  // h.to(float64): the 8-byte output, then the 4 * 8 * 8 = 256-byte copy, freed on return. norm the same.
  const AllocationEvents to_float64{{"alloc", 8}, {"alloc", 256}, {"free", 256}};
  CHECK(allocation_events(d, [&] { wide_sum = sum(h, ScalarType::float64); }) == to_float64);
  CHECK(allocation_events(d, [&] { wide_norm = norm(h, ScalarType::float64); }) == to_float64);
  // An integer sum is not autocast's: int64 with its int64 copy as always (4 * 8 = 32 elements: 8 + 256).
  const Tensor counts = zeros({4, 8}, TensorOptions{ScalarType::int32, d});
  CHECK(allocation_events(d, [&] { counted = sum(counts); }) == to_float64);
  CHECK(kept.dtype() == ScalarType::bfloat16);
  CHECK(wide_sum.dtype() == ScalarType::float64);
  CHECK(wide_norm.dtype() == ScalarType::float64);
  CHECK(counted.dtype() == ScalarType::int64);
  CHECK(wide_sum.item() == doctest::Approx(sum(h.to(ScalarType::float64)).item()));
  // linalg.vector_norm refuses a narrowing dtype, and a non-floating one.
  const Tensor a = randn({4, 8}, f32(d));
  CHECK_THROWS_WITH_AS(norm(a, ScalarType::bfloat16), doctest::Contains("without narrowing"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(norm(a, ScalarType::int64), doctest::Contains("floating point"), std::invalid_argument);
}

TEST_CASE("norm's gradient under autocast: a float32 norm of a bfloat16 leaf, a bfloat16 gradient") {
  const Device d = kSim;
  manual_seed(0);
  const Tensor x = randn({8, 16}, f32(d)).to(ScalarType::bfloat16).requires_grad_();
  Tensor loss;
  {
    AutocastGuard autocast(d.type, ScalarType::bfloat16);
    const Tensor rows = norm(x, {1});
    CHECK(rows.dtype() == ScalarType::float32);
    loss = sum(rows);
  }
  loss.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == ScalarType::bfloat16);
  // d/dx sum_i |x_i| = x / |x_i| row by row, in bfloat16.
  NoGradGuard no_grad;
  const Tensor expected = x.to(ScalarType::float32) / norm(x.to(ScalarType::float32), {1}, true);
  CHECK(max(abs(x.grad().to(ScalarType::float32) - expected)).item() < 1e-2);
}

TEST_CASE("only float32 leaves that require grad and are not views are cached") {
  ScopedEnv no_workspace("CUBLAS_WORKSPACE_CONFIG", ":0:0");
  const Device d = kSim;
  const Tensor w = randn({8, 8}, f32(d)).requires_grad_();
  const Tensor plain = randn({8, 8}, f32(d));
  AutocastGuard autocast(d.type, ScalarType::bfloat16);
  Tensor nonleaf = w * 2.0;
  (void)mm(plain, plain);  // no grad: not cached
  CHECK(autocast_cache_size() == 0);
  (void)mm(nonleaf, nonleaf);  // not a leaf
  CHECK(autocast_cache_size() == 0);
  (void)mm(w.t(), w.t());  // a view of the leaf
  CHECK(autocast_cache_size() == 0);
  (void)mm(w, w);  // the leaf itself: one entry, used for both operands
  CHECK(autocast_cache_size() == 1);
}

TEST_CASE("AutocastGuard refuses cpu and dtypes other than float16 and bfloat16") {
  CHECK_THROWS_WITH_AS(AutocastGuard(DeviceType::cpu, ScalarType::bfloat16),
                       doctest::Contains("autocast on cpu is not supported"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(AutocastGuard(DeviceType::sim, ScalarType::float32),
                       doctest::Contains("float16 or bfloat16, not float32"), std::invalid_argument);
  CHECK_FALSE(is_autocast_enabled());
}
