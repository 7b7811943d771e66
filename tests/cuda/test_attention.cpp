// scaled_dot_product_attention's cuda kernels (kernels/cuda/cuda_attention.cu) against the cpu reference and
// the math composition: forward output and logsumexp, and dq, dk, dv, through both fused backends, in
// float32, float64, float16 and bfloat16, causal and not, Sq != Sk, Dv != D, head dims up to 256, on
// GPT-2's strided views (the transposed split of a (B, T, 3C) tensor) and on contiguous tensors. Then the
// device memory: the cuda run of a recorded case makes the same allocations and frees as sim.
#include <optional>
#include <tuple>

#include "bytegrad/kernels/cuda/cuda_cudnn_attention.h"
#include "bytegrad/tensor/ops.h"
#include "tests/cuda/gpu_test_helpers.h"
#include "tests/support/allocation_probe.h"

namespace bytegrad::testing {
namespace {

struct Shape6 {
  int64_t B, H, Sq, Sk, D, Dv;
};

// q, k, v on both devices: GPT-2's layout (views of one (B, T, 3 * H * D) tensor) when `packed` (then
// Sq == Sk and D == Dv), else contiguous (B, H, S, D) tensors.
struct Inputs {
  Pair q, k, v, grad;
};

Inputs make_inputs(const Shape6& s, ScalarType dtype, bool packed) {
  Inputs in;
  if (packed) {
    const Pair qkv = random_pair({s.B, s.Sq, 3 * s.H * s.D}, dtype);
    auto part = [&](int i) {
      return qkv.map([&](const Tensor& t) {
        return t.slice(2, i * s.H * s.D, (i + 1) * s.H * s.D).view({s.B, s.Sq, s.H, s.D}).transpose(1, 2);
      });
    };
    in.q = part(0);
    in.k = part(1);
    in.v = part(2);
  } else {
    in.q = random_pair({s.B, s.H, s.Sq, s.D}, dtype);
    in.k = random_pair({s.B, s.H, s.Sk, s.D}, dtype);
    in.v = random_pair({s.B, s.H, s.Sk, s.Dv}, dtype);
  }
  in.grad = random_pair({s.B, s.H, s.Sq, s.Dv}, dtype);
  return in;
}

double tolerance(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float64: return 1e-10;
    case ScalarType::float32: return 2e-4;
    case ScalarType::float16: return 5e-3;
    default: return 3e-2;  // bfloat16
  }
}

void compare(const Shape6& s, ScalarType dtype, bool packed, bool causal, bool efficient, std::optional<double> scale) {
  CAPTURE(s.B);
  CAPTURE(s.H);
  CAPTURE(s.Sq);
  CAPTURE(s.Sk);
  CAPTURE(s.D);
  CAPTURE(s.Dv);
  CAPTURE(scalar_type_name(dtype));
  CAPTURE(packed);
  CAPTURE(causal);
  CAPTURE(efficient);
  const Inputs in = make_inputs(s, dtype, packed);
  auto forward = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return efficient ? scaled_dot_product_efficient_attention(q, k, v, true, causal, scale)
                     : scaled_dot_product_cudnn_attention(q, k, v, true, causal, scale);
  };
  const AttentionResult rc = forward(in.q.cpu, in.k.cpu, in.v.cpu);
  const AttentionResult rg = forward(in.q.gpu, in.k.gpu, in.v.gpu);
  const double tol = tolerance(dtype);
  check_close(rg.output.to(kCpu), rc.output, tol, tol * std::max(1.0, max_abs(rc.output)), "output");
  const Tensor lse_c = rc.logsumexp.slice(2, 0, s.Sq), lse_g = rg.logsumexp.slice(2, 0, s.Sq).to(kCpu);
  check_close(lse_g, lse_c, dtype == ScalarType::float64 ? 1e-10 : 1e-4, 1e-4, "logsumexp");
  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(s.D)));
  auto backward = [&](const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionResult& r) {
    return efficient ? scaled_dot_product_efficient_attention_backward(g, q, k, v, r.output, r.logsumexp, causal, sc)
                     : scaled_dot_product_cudnn_attention_backward(g, q, k, v, r.output, r.logsumexp, causal, sc);
  };
  const AttentionGrads gc = backward(in.grad.cpu, in.q.cpu, in.k.cpu, in.v.cpu, rc);
  const AttentionGrads gg = backward(in.grad.gpu, in.q.gpu, in.k.gpu, in.v.gpu, rg);
  const double gtol = dtype == ScalarType::bfloat16 ? 6e-2 : dtype == ScalarType::float16 ? 1e-2 : tol;
  check_close(gg.grad_query.to(kCpu), gc.grad_query, gtol, gtol * std::max(1.0, max_abs(gc.grad_query)), "dq");
  check_close(gg.grad_key.to(kCpu), gc.grad_key, gtol, gtol * std::max(1.0, max_abs(gc.grad_key)), "dk");
  check_close(gg.grad_value.to(kCpu), gc.grad_value, gtol, gtol * std::max(1.0, max_abs(gc.grad_value)), "dv");
}

}  // namespace

TEST_CASE("attention forward and backward: cuda matches the cpu reference") {
  require_gpu();
  manual_seed(71);
  const std::vector<Shape6> packed_shapes = {
      {2, 2, 64, 64, 32, 32}, {1, 4, 100, 100, 64, 64}, {3, 5, 77, 77, 48, 48}, {1, 2, 37, 37, 128, 128}};
  for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16, ScalarType::float32, ScalarType::float64})
    for (const Shape6& s : packed_shapes)
      for (bool causal : {true, false}) compare(s, dtype, true, causal, false, std::nullopt);
  for (const Shape6& s : packed_shapes) compare(s, ScalarType::float32, true, true, true, std::nullopt);
  // contiguous inputs, Sq != Sk (both ways), Dv != D, odd sizes, a given scale, head dims up to 256
  // (the 16-bit ones with D == Dv <= 128 run on the tensor-core kernels: Sq != Sk across 64-row tiles, and
  // D = 20, whose rows are not 16-byte aligned, through their element-wise loads)
  const std::vector<Shape6> other_shapes = {
      {2, 3, 5, 9, 8, 16},     {1, 2, 33, 7, 16, 8},     {2, 1, 1, 1, 8, 8},
      {1, 1, 70, 130, 24, 40}, {1, 2, 50, 50, 256, 256}, {1, 2, 33, 100, 64, 64},
      {2, 3, 130, 70, 32, 32}, {1, 2, 45, 45, 20, 20},   {1, 1, 200, 200, 128, 128}};
  for (ScalarType dtype : {ScalarType::float32, ScalarType::float64, ScalarType::bfloat16, ScalarType::float16})
    for (const Shape6& s : other_shapes)
      for (bool causal : {true, false}) compare(s, dtype, false, causal, false, 0.37);
  // The memory-efficient op where PyTorch sends 16-bit calls to it (causal with one key and several queries,
  // head dims above 256: the SIMT kernel's 16-columns-a-lane instantiation), and float32 above 256.
  const std::vector<Shape6> efficient_shapes = {{2, 2, 16, 1, 64, 64},
                                                {1, 3, 40, 1, 160, 160},
                                                {1, 2, 37, 90, 264, 264},
                                                {1, 1, 50, 50, 512, 512},
                                                {1, 2, 33, 70, 320, 136}};
  for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float16, ScalarType::float32})
    for (const Shape6& s : efficient_shapes)
      for (bool causal : {true, false}) compare(s, dtype, false, causal, true, std::nullopt);
}

// Where the build has cuDNN (tools/get_cudnn_frontend.sh), GPT-2's calls run on it, inside the workspace
// blocks PyTorch's cuDNN backend allocates (so bytegrad's memory stays PyTorch's), and match the cpu reference.
TEST_CASE("cuDNN's fused attention runs in PyTorch's cuDNN workspace and matches the cpu reference") {
  require_gpu();
  if (!cuda::cudnn_attention_enabled()) {
    MESSAGE("cuDNN attention is not in this build (or BYTEGRAD_CUDNN_ATTENTION=0): nothing to check");
    return;
  }
  manual_seed(79);
  struct Case {
    Shape6 s;
    bool packed, causal;
  };
  for (const Case& c : {Case{{2, 12, 256, 256, 64, 64}, true, true}, Case{{1, 4, 100, 100, 64, 64}, false, false},
                        Case{{2, 2, 64, 64, 128, 128}, false, true}, Case{{1, 3, 40, 72, 32, 32}, false, false}}) {
    const Shape6& s = c.s;
    CAPTURE(s.H);
    CAPTURE(s.Sq);
    CAPTURE(s.D);
    CAPTURE(c.causal);
    const Inputs in = make_inputs(s, ScalarType::bfloat16, c.packed);
    const double sc = 1.0 / std::sqrt(static_cast<double>(s.D));
    const AttentionResult rc = scaled_dot_product_cudnn_attention(in.q.cpu, in.k.cpu, in.v.cpu, true, c.causal);
    const TensorOptions bf16{ScalarType::bfloat16, kCuda};
    const Tensor out = empty({s.B, s.H, s.Sq, s.Dv}, bf16);
    const Tensor lse = empty({s.B, s.H, s.Sq}, TensorOptions{ScalarType::float32, kCuda});
    // PyTorch's cuDNN forward workspace: 256 bytes in every recorded case (ops_attention.cpp).
    const Tensor forward_workspace = empty({256}, TensorOptions{ScalarType::uint8, kCuda});
    const StridedView lse_view = lse.view_for_kernels();
    const bool ran_forward = cuda::cudnn_attention_forward(
        out.view_for_kernels(), &lse_view, in.q.gpu.view_for_kernels(), in.k.gpu.view_for_kernels(),
        in.v.gpu.view_for_kernels(), sc, c.causal, DeviceScratch{forward_workspace.view_for_kernels().data, 256});
    REQUIRE_MESSAGE(ran_forward, cuda::cudnn_attention_refusal());
    check_close(out.to(kCpu), rc.output, 3e-2, 3e-2 * std::max(1.0, max_abs(rc.output)), "output");
    check_close(lse.to(kCpu), rc.logsumexp, 1e-4, 1e-4, "logsumexp");
    // Without a gradient to come (no logsumexp asked for): cuDNN's inference graph, the same output.
    const Tensor out_only = empty({s.B, s.H, s.Sq, s.Dv}, bf16);
    const bool ran_inference = cuda::cudnn_attention_forward(
        out_only.view_for_kernels(), nullptr, in.q.gpu.view_for_kernels(), in.k.gpu.view_for_kernels(),
        in.v.gpu.view_for_kernels(), sc, c.causal, DeviceScratch{forward_workspace.view_for_kernels().data, 256});
    CHECK_MESSAGE(ran_inference, cuda::cudnn_attention_refusal());
    if (ran_inference)
      check_close(out_only.to(kCpu), rc.output, 3e-2, 3e-2 * std::max(1.0, max_abs(rc.output)), "inference output");
    // PyTorch's cuDNN backward workspace: a float dQ accumulator, a float per-row sum and 256 bytes.
    const int64_t backward_bytes = 4 * s.B * s.H * s.Sq * s.D + 4 * s.B * s.H * s.Sq + 256;
    const Tensor backward_workspace = empty({backward_bytes}, TensorOptions{ScalarType::uint8, kCuda});
    const Tensor dq = empty_like(in.q.gpu), dk = empty_like(in.k.gpu), dv = empty_like(in.v.gpu);
    const bool ran = cuda::cudnn_attention_backward(
        dq.view_for_kernels(), dk.view_for_kernels(), dv.view_for_kernels(), in.grad.gpu.view_for_kernels(),
        in.q.gpu.view_for_kernels(), in.k.gpu.view_for_kernels(), in.v.gpu.view_for_kernels(), out.view_for_kernels(),
        lse_view, sc, c.causal, DeviceScratch{backward_workspace.view_for_kernels().data, backward_bytes});
    CHECK_MESSAGE(ran, cuda::cudnn_attention_refusal());
    if (!ran) continue;
    const AttentionGrads gc = scaled_dot_product_cudnn_attention_backward(in.grad.cpu, in.q.cpu, in.k.cpu, in.v.cpu,
                                                                          rc.output, rc.logsumexp, c.causal, sc);
    for (auto [got, want, what] :
         {std::tuple{dq, gc.grad_query, "dq"}, std::tuple{dk, gc.grad_key, "dk"}, std::tuple{dv, gc.grad_value, "dv"}})
      check_close(got.to(kCpu), want, 6e-2, 6e-2 * std::max(1.0, max_abs(want)), what);
  }
}

// With the cuDNN backend's workspace the tensor-core backward accumulates dq atomically in it (one pass over
// the scores); without scratch it runs dq as a second kernel. Both against the cpu reference.
TEST_CASE("attention backward on tensor cores without scratch: the two-kernel path") {
  require_gpu();
  manual_seed(73);
  for (const Shape6& s : {Shape6{2, 3, 100, 100, 64, 64}, Shape6{1, 2, 70, 130, 32, 32}}) {
    for (bool causal : {true, false}) {
      CAPTURE(s.Sq);
      CAPTURE(causal);
      const Inputs in = make_inputs(s, ScalarType::bfloat16, false);
      const AttentionResult rc = scaled_dot_product_cudnn_attention(in.q.cpu, in.k.cpu, in.v.cpu, true, causal);
      const AttentionResult rg = scaled_dot_product_cudnn_attention(in.q.gpu, in.k.gpu, in.v.gpu, true, causal);
      const double sc = 1.0 / std::sqrt(static_cast<double>(s.D));
      const AttentionGrads gc = scaled_dot_product_cudnn_attention_backward(in.grad.cpu, in.q.cpu, in.k.cpu, in.v.cpu,
                                                                            rc.output, rc.logsumexp, causal, sc);
      const Tensor dq = empty_like(in.q.gpu), dk = empty_like(in.k.gpu), dv = empty_like(in.v.gpu);
      gpu().attention_backward(dq.view_for_kernels(), dk.view_for_kernels(), dv.view_for_kernels(),
                               in.grad.gpu.view_for_kernels(), in.q.gpu.view_for_kernels(), in.k.gpu.view_for_kernels(),
                               in.v.gpu.view_for_kernels(), rg.output.view_for_kernels(),
                               rg.logsumexp.view_for_kernels(), sc, causal, DeviceScratch{}, AttentionExtras{});
      for (auto [got, want, what] : {std::tuple{dq, gc.grad_query, "dq"}, std::tuple{dk, gc.grad_key, "dk"},
                                     std::tuple{dv, gc.grad_value, "dv"}})
        check_close(got.to(kCpu), want, 6e-2, 6e-2 * std::max(1.0, max_abs(want)), what);
    }
  }
}

TEST_CASE("scaled_dot_product_attention on cuda matches the math composition, values and gradients") {
  require_gpu();
  manual_seed(73);
  // Each backend PyTorch picks (select_sdpa_backend): cuDNN (bf16, head dims multiples of 8 up to 256: 160 runs
  // the SIMT kernel), flash for 16-bit head dims that are not multiples of 8 (padded to 8, then sliced back:
  // y's own node is the slice's), the memory-efficient kernels for float32 and for 16-bit head dims above 256
  // (the SIMT kernel with 16 columns a lane).
  const char* cudnn = "ScaledDotProductCudnnAttentionBackward0";
  const char* efficient = "ScaledDotProductEfficientAttentionBackward0";
  const char* flash_sliced = "SliceBackward0";
  struct Case {
    ScalarType dtype;
    int64_t D;
    const char* node;
  };
  for (const Case& c : {Case{ScalarType::bfloat16, 32, cudnn}, Case{ScalarType::float32, 32, efficient},
                        Case{ScalarType::bfloat16, 160, cudnn}, Case{ScalarType::bfloat16, 20, flash_sliced},
                        Case{ScalarType::float16, 60, flash_sliced}, Case{ScalarType::bfloat16, 320, efficient},
                        Case{ScalarType::float16, 512, efficient}}) {
    const ScalarType dtype = c.dtype;
    CAPTURE(scalar_type_name(dtype));
    CAPTURE(c.D);
    const int64_t B = 2, H = 4, T = 96, D = c.D;
    const Tensor qkv_host = randn({B, T, 3 * H * D}, TensorOptions{}.with_device(kCpu)).to(dtype);
    Tensor qkv = qkv_host.to(kCuda);
    qkv.requires_grad_(true);
    std::vector<Tensor> parts = qkv.split(H * D, 2);
    const Tensor q = parts[0].view({B, T, H, D}).transpose(1, 2), k = parts[1].view({B, T, H, D}).transpose(1, 2),
                 v = parts[2].view({B, T, H, D}).transpose(1, 2);
    const Tensor y = scaled_dot_product_attention(q, k, v, true);
    CHECK(y.grad_fn_name() == c.node);
    const Tensor w = randn(y.sizes(), TensorOptions{}.with_device(kCpu)).to(dtype);
    sum((y * w.to(kCuda)).to(ScalarType::float32)).backward();

    // The reference: the math path in float64 on the host.
    Tensor ref = qkv_host.to(ScalarType::float64);
    ref.requires_grad_(true);
    std::vector<Tensor> rp = ref.split(H * D, 2);
    const Tensor rq = rp[0].view({B, T, H, D}).transpose(1, 2), rk = rp[1].view({B, T, H, D}).transpose(1, 2),
                 rv = rp[2].view({B, T, H, D}).transpose(1, 2);
    const Tensor ry = scaled_dot_product_attention_math(rq, rk, rv, true);
    sum(ry * w.to(ScalarType::float64)).backward();
    const double tol = tolerance(dtype) * (dtype == ScalarType::float32 ? 0.5 : 1.0);
    check_close(y.to(kCpu).to(ScalarType::float64), ry.detach(), tol, tol * std::max(1.0, max_abs(ry)), "output");
    check_close(qkv.grad().to(kCpu).to(ScalarType::float64), ref.grad(), 2 * tol,
                2 * tol * std::max(1.0, max_abs(ref.grad())), "qkv grad");
  }
}

TEST_CASE("attention's device memory on cuda is sim's, event for event") {
  require_gpu();
  for (ScalarType dtype : {ScalarType::bfloat16, ScalarType::float32}) {
    CAPTURE(scalar_type_name(dtype));
    AllocationEvents per_device[2];
    int index = 0;
    for (Device device : {kSim, kCuda}) {
      fresh(device);
      manual_seed(3);
      Tensor qkv = randn({4, 256, 3 * 768}, TensorOptions{dtype, device});
      qkv.requires_grad_(true);
      per_device[index++] = allocation_events(device, [&] {
        std::vector<Tensor> parts = qkv.split(768, 2);
        Tensor q = parts[0].view({4, 256, 12, 64}).transpose(1, 2), k = parts[1].view({4, 256, 12, 64}).transpose(1, 2),
               v = parts[2].view({4, 256, 12, 64}).transpose(1, 2);
        parts.clear();
        Tensor y = scaled_dot_product_attention(q, k, v, true);
        {
          Tensor ones = empty_strided(y.sizes(), y.strides(), TensorOptions{dtype, device});
          ones.fill_(1.0);
          y.backward(ones);
        }
        q = k = v = y = Tensor();
        qkv = Tensor();
      });
    }
    CHECK(per_device[0] == per_device[1]);
    CHECK(per_device[0].size() > 10);
  }
}

// The math backend on cuda (issue 25): 3-d inputs, bool / additive masks, causal, 16-bit inputs computed in
// float32 copies, dropout; values against the float64 composition on the host, and the allocations of sim.
TEST_CASE("sdpa's math backend on cuda: 3-d inputs, masks, causal and 16-bit match the float64 reference") {
  require_gpu();
  manual_seed(91);
  const int64_t N = 6, L = 40, S = 37, E = 24;
  const Tensor q_host = randn({N, L, E}, TensorOptions{}.with_device(kCpu));
  const Tensor k_host = randn({N, S, E}, TensorOptions{}.with_device(kCpu));
  const Tensor v_host = randn({N, S, E}, TensorOptions{}.with_device(kCpu));
  const Tensor w_host = randn({N, L, E}, TensorOptions{}.with_device(kCpu));
  Tensor keep = rand({L, S}, TensorOptions{}.with_device(kCpu)) > 0.5;
  keep.select(-1, 0).fill_(1.0);
  const Tensor additive = randn({N, 1, S}, TensorOptions{}.with_device(kCpu));
  for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::float64}) {
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(scalar_type_name(dtype));
      CAPTURE(variant);
      const bool causal = variant == 0;
      std::optional<Tensor> mask_host;
      if (variant == 1) mask_host = keep;
      if (variant == 2) mask_host = additive.to(dtype == ScalarType::float64 ? dtype : ScalarType::float32);
      Tensor q = q_host.to(dtype).to(kCuda), k = k_host.to(dtype).to(kCuda), v = v_host.to(dtype).to(kCuda);
      for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
      const std::optional<Tensor> mask = mask_host ? std::optional<Tensor>(mask_host->to(kCuda)) : std::nullopt;
      const Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, causal);
      CHECK(y.dtype() == dtype);
      sum((y * w_host.to(dtype).to(kCuda)).to(ScalarType::float32)).backward();
      Tensor rq = q_host.to(dtype).to(ScalarType::float64), rk = k_host.to(dtype).to(ScalarType::float64),
             rv = v_host.to(dtype).to(ScalarType::float64);
      for (Tensor* t : {&rq, &rk, &rv}) t->requires_grad_(true);
      std::optional<Tensor> rmask;
      if (mask_host) rmask = mask_host->dtype() == ScalarType::bool_ ? *mask_host : mask_host->to(ScalarType::float64);
      const Tensor ry = scaled_dot_product_attention(rq, rk, rv, rmask, 0.0, causal);
      sum(ry * w_host.to(dtype).to(ScalarType::float64)).backward();
      const double tol = dtype == ScalarType::float64 ? 1e-10 : dtype == ScalarType::float32 ? 1e-4 : 2e-2;
      check_close(y.to(kCpu).to(ScalarType::float64), ry.detach(), tol, tol * std::max(1.0, max_abs(ry)), "output");
      check_close(q.grad().to(kCpu).to(ScalarType::float64), rq.grad(), 2 * tol,
                  2 * tol * std::max(1.0, max_abs(rq.grad())), "dq");
      check_close(k.grad().to(kCpu).to(ScalarType::float64), rk.grad(), 2 * tol,
                  2 * tol * std::max(1.0, max_abs(rk.grad())), "dk");
      check_close(v.grad().to(kCpu).to(ScalarType::float64), rv.grad(), 2 * tol,
                  2 * tol * std::max(1.0, max_abs(rv.grad())), "dv");
    }
  }
}

TEST_CASE("sdpa dropout on cuda (math backend): keep fraction, determinism, one mask for forward and backward") {
  require_gpu();
  const int64_t N = 16, L = 64, S = 64;
  const double p = 0.25;
  const TensorOptions f64{ScalarType::float64, kCuda};
  const Tensor q = zeros({N, L, 16}, f64), k = randn({N, S, 16}, f64);
  const Tensor v = eq(arange(S, f64).view({S, 1}), arange(S, f64).view({1, S}))
                       .to(ScalarType::float64)
                       .expand({N, S, S})
                       .contiguous();
  auto run = [&](uint64_t seed) {
    manual_seed(seed);
    return scaled_dot_product_attention(q, k, v, std::nullopt, p).to(kCpu);
  };
  const Tensor a = run(5), b = run(5), c = run(6);
  CHECK(a.tolist() == b.tolist());
  CHECK(a.tolist() != c.tolist());
  const std::vector<double> values = a.tolist();
  int64_t zeros_seen = 0;
  for (double x : values) zeros_seen += x == 0.0;
  const double fraction = static_cast<double>(zeros_seen) / static_cast<double>(values.size());
  CHECK(std::fabs(fraction - p) < 0.01);  // 65536 draws: 5 standard deviations are 0.0085
  const Tensor vg = v.detach().requires_grad_(true);
  manual_seed(7);
  const Tensor y = scaled_dot_product_attention(q, k, vg, std::nullopt, p);
  y.backward(ones_like(y));
  const Tensor expect_dv = matmul(y.detach().transpose(-2, -1), ones({N, L, S}, f64));
  CHECK(max(abs(vg.grad() - expect_dv)).item() < 1e-12);
}

TEST_CASE("sdpa's math backend: cuda's device memory is sim's, event for event (3-d, bool mask, bfloat16)") {
  require_gpu();
  AllocationEvents per_device[2];
  int index = 0;
  for (Device device : {kSim, kCuda}) {
    fresh(device);
    manual_seed(3);
    const TensorOptions o{ScalarType::bfloat16, device};
    Tensor q = randn({6, 40, 64}, o).requires_grad_(true), k = randn({6, 37, 64}, o).requires_grad_(true),
           v = randn({6, 37, 64}, o).requires_grad_(true);
    Tensor keep = ones({40, 37}, TensorOptions{ScalarType::bool_, device});
    per_device[index++] = allocation_events(device, [&] {
      Tensor y = scaled_dot_product_attention(q, k, v, keep, 0.0);
      y.backward(ones_like(y));
      y = Tensor();
    });
  }
  CHECK(per_device[0] == per_device[1]);
  CHECK(per_device[0].size() > 20);
}

// The fused backends with masks and dropout (issue 25): cuda's kernels against the cpu reference on the same
// values and the same dropout draw (tests/nn/sdpa_fused_mask.cpp checks the cpu reference against float64),
// output and the gradients of q, k, v and the mask; then cuda's device memory is sim's, event for event (the
// kernels allocate nothing beyond PyTorch's blocks).
namespace {

struct FusedCase {
  const char* name;
  ScalarType dtype;
  int64_t L, S, D;
  const char* mask;  // "none", "bool" (a fully masked row), "float" (a key hidden by -inf)
  Shape mask_shape;
  bool mask_grad, causal;
  double dropout;
};

const std::vector<FusedCase> kFusedCases{
    {"efficient f32 bool LS, 37 keys", ScalarType::float32, 40, 37, 64, "bool", {40, 37}, false, false, 0.0},
    {"efficient f32 float B1LS grad", ScalarType::float32, 40, 48, 64, "float", {2, 1, 40, 48}, true, false, 0.0},
    {"efficient f32 float LS grad, 37 keys, causal",
     ScalarType::float32,
     40,
     37,
     32,
     "float",
     {40, 37},
     true,
     true,
     0.0},
    {"efficient f32 dropout, float mask grad",
     ScalarType::float32,
     40,
     40,
     64,
     "float",
     {2, 1, 40, 40},
     true,
     false,
     0.2},
    {"efficient f32 dropout causal", ScalarType::float32, 70, 70, 64, "none", {}, false, true, 0.25},
    {"efficient bf16 float LS grad", ScalarType::bfloat16, 40, 40, 64, "float", {40, 40}, true, false, 0.0},
    {"cudnn bf16 bool LS causal", ScalarType::bfloat16, 40, 40, 64, "bool", {40, 40}, false, true, 0.0},
    {"cudnn f16 float BHLS", ScalarType::float16, 40, 48, 64, "float", {2, 3, 40, 48}, false, false, 0.0},
    {"cudnn bf16 dropout", ScalarType::bfloat16, 64, 64, 128, "none", {}, false, false, 0.1},
    {"flash bf16 D20 dropout causal", ScalarType::bfloat16, 40, 40, 20, "none", {}, false, true, 0.1},
};

struct FusedRun {
  Tensor y, dq, dk, dv, dmask;
};

struct FusedInputs {
  Tensor q, k, v, w;
  std::optional<Tensor> mask;
};

FusedInputs fused_inputs(const FusedCase& c, Device device) {
  manual_seed(41);
  const TensorOptions o{c.dtype, device};
  const int64_t B = 2, H = 3;
  Tensor q = randn({B, H, c.L, c.D}, o).requires_grad_(true), k = randn({B, H, c.S, c.D}, o).requires_grad_(true),
         v = randn({B, H, c.S, c.D}, o).requires_grad_(true);
  const Tensor w = randn({B, H, c.L, c.D}, o);
  std::optional<Tensor> mask;
  if (std::string(c.mask) == "bool") {
    Tensor keep = rand(c.mask_shape, TensorOptions{ScalarType::float32, device}) > 0.4;
    keep.select(-1, 0).fill_(1.0);
    keep.select(-2, 7).fill_(0.0);
    mask = keep;
  } else if (std::string(c.mask) == "float") {
    Tensor m = randn(c.mask_shape, o);
    m.select(-1, 2).fill_(-INFINITY);
    mask = m.requires_grad_(c.mask_grad);
  }
  return {q, k, v, w, mask};
}

// Forward and backward; the gradients stay in the leaves.
Tensor fused_call(const FusedCase& c, const FusedInputs& in) {
  manual_seed(77);
  Tensor y = scaled_dot_product_attention(in.q, in.k, in.v, in.mask, c.dropout, c.causal);
  sum((y * in.w).to(ScalarType::float32)).backward();
  return y;
}

FusedRun run_fused(const FusedCase& c, Device device) {
  const FusedInputs in = fused_inputs(c, device);
  const Tensor y = fused_call(c, in);
  FusedRun r{y.detach().to(kCpu), in.q.grad().to(kCpu), in.k.grad().to(kCpu), in.v.grad().to(kCpu), Tensor()};
  if (c.mask_grad) r.dmask = in.mask->grad().to(kCpu);
  return r;
}

}  // namespace

TEST_CASE("sdpa's fused backends with masks and dropout: cuda matches the cpu reference") {
  require_gpu();
  for (const FusedCase& c : kFusedCases) {
    CAPTURE(c.name);
    const FusedRun want = run_fused(c, kCpu), got = run_fused(c, kCuda);
    const double tol = tolerance(c.dtype);
    check_close(got.y, want.y, tol, tol * std::max(1.0, max_abs(want.y)), "output");
    check_close(got.dq, want.dq, 2 * tol, 2 * tol * std::max(1.0, max_abs(want.dq)), "dq");
    check_close(got.dk, want.dk, 2 * tol, 2 * tol * std::max(1.0, max_abs(want.dk)), "dk");
    check_close(got.dv, want.dv, 2 * tol, 2 * tol * std::max(1.0, max_abs(want.dv)), "dv");
    if (c.mask_grad) check_close(got.dmask, want.dmask, 2 * tol, 2 * tol * std::max(1.0, max_abs(want.dmask)), "dmask");
  }
}

TEST_CASE("sdpa's fused backends with masks and dropout: cuda's device memory is sim's, event for event") {
  require_gpu();
  for (const FusedCase& c : kFusedCases) {
    CAPTURE(c.name);
    AllocationEvents per_device[2];
    int index = 0;
    for (Device device : {kSim, kCuda}) {
      fresh(device);
      const FusedInputs in = fused_inputs(c, device);
      per_device[index++] = allocation_events(device, [&] { fused_call(c, in); });
    }
    CHECK(per_device[0] == per_device[1]);
    CHECK(per_device[0].size() > 10);
  }
}

}  // namespace bytegrad::testing
