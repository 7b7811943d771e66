// scaled_dot_product_attention with masks and dropout where PyTorch 2.11 runs its fused kernels (issue 25;
// their memory is replayed against the H100 recording in tests/nn/sdpa_mask.cpp): values and gradients on cpu
// and sim against float64 compositions.
//  - masks on the memory-efficient backend (float32: bool with a fully masked row, additive with -inf entries,
//    a key count that PyTorch pads, masks that require grad, a mask together with is_causal) and on cuDNN
//    (bfloat16, float16), against the math backend in float64 (which applies _safe_softmax);
//  - dropout on the memory-efficient, cuDNN and flash backends against softmax(scores) * Z @ v in float64,
//    Z rebuilt from the documented draw (kernels/attention_dropout.h, keyed by a 53-bit seed the call draws
//    from the process generator), so forward and backward are checked to drop the same elements;
//  - dropout_p = 1: zeros on the memory-efficient backend (PyTorch's kernel gives NaN; math's answer kept),
//    refused on cuDNN as PyTorch's cuDNN frontend refuses it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/kernels/attention_dropout.h"
#include "bytegrad/tensor/ops.h"
#include "tests/support/attention_reference.h"
#include "tests/support/devices.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

Tensor leaf64(const Tensor& t) { return t.detach().to(kCpu).to(ScalarType::float64).requires_grad_(true); }

// 0 where the key takes part, -inf where it does not (PyTorch's meaning of a bool mask), float64 on the host.
Tensor additive64(const Tensor& keep) {
  const Tensor k = keep.to(kCpu);
  return masked_fill(zeros(k.sizes(), TensorOptions{ScalarType::float64, kCpu}), logical_not(k),
                     -std::numeric_limits<double>::infinity());
}

// The causal part as an additive (L, S) mask: key j hidden from query i where j > i.
Tensor causal64(int64_t L, int64_t S) {
  const TensorOptions f64{ScalarType::float64, kCpu};
  const Tensor hidden = gt(arange(S, f64).view({1, S}), arange(L, f64).view({L, 1}));
  return masked_fill(zeros({L, S}, f64), hidden, -std::numeric_limits<double>::infinity());
}

double tolerance_of(ScalarType dtype) {
  return dtype == ScalarType::float32 ? 2e-5 : dtype == ScalarType::float16 ? 6e-3 : 3e-2;
}

struct MaskVariant {
  const char* name;
  ScalarType dtype;
  int64_t B, H, L, S, D;
  const char* kind;  // "bool" or "float"
  Shape mask_shape;
  bool mask_grad, causal, fully_masked_row;
  SdpaBackend backend;
};

}  // namespace

TEST_CASE("sdpa with masks on the memory-efficient and cuDNN backends: values and gradients against float64") {
  const SdpaBackend eff = SdpaBackend::efficient_attention, cudnn = SdpaBackend::cudnn_attention;
  const std::vector<MaskVariant> variants{
      {"f32 bool LS, a fully masked row, 37 keys (padded)",
       ScalarType::float32,
       2,
       3,
       40,
       37,
       64,
       "bool",
       {40, 37},
       false,
       false,
       true,
       eff},
      {"f32 float B1LS with -inf, grad",
       ScalarType::float32,
       2,
       3,
       40,
       48,
       64,
       "float",
       {2, 1, 40, 48},
       true,
       false,
       false,
       eff},
      {"f32 float LS, 37 keys, grad (padded, sliced back)",
       ScalarType::float32,
       2,
       3,
       40,
       37,
       32,
       "float",
       {40, 37},
       true,
       false,
       false,
       eff},
      {"f32 float 11LS with is_causal",
       ScalarType::float32,
       2,
       3,
       40,
       40,
       64,
       "float",
       {1, 1, 40, 40},
       false,
       true,
       false,
       eff},
      {"bf16 float LS, grad", ScalarType::bfloat16, 2, 3, 40, 40, 64, "float", {40, 40}, true, false, false, eff},
      {"bf16 bool LS", ScalarType::bfloat16, 2, 3, 40, 40, 64, "bool", {40, 40}, false, false, false, cudnn},
      {"bf16 float BHLS with is_causal",
       ScalarType::bfloat16,
       2,
       3,
       40,
       48,
       64,
       "float",
       {2, 3, 40, 48},
       false,
       true,
       false,
       cudnn},
      {"f16 float B1LS, 37 keys",
       ScalarType::float16,
       2,
       3,
       40,
       37,
       64,
       "float",
       {2, 1, 40, 37},
       false,
       false,
       false,
       cudnn},
  };
  for (Device device : {kCpu, kSim}) {
    for (const MaskVariant& c : variants) {
      CAPTURE(device.str());
      CAPTURE(c.name);
      manual_seed(17);
      const TensorOptions o{c.dtype, device};
      const Tensor q = randn({c.B, c.H, c.L, c.D}, o).requires_grad_(true);
      const Tensor k = randn({c.B, c.H, c.S, c.D}, o).requires_grad_(true);
      const Tensor v = randn({c.B, c.H, c.S, c.D}, o).requires_grad_(true);
      const Tensor w = randn({c.B, c.H, c.L, c.D}, o);
      Tensor mask;
      if (std::string(c.kind) == "bool") {
        mask = rand(c.mask_shape, TensorOptions{ScalarType::float32, device}) > 0.4;
        mask.select(-1, 0).fill_(1.0);
        if (c.fully_masked_row) mask.select(-2, 5).fill_(0.0);
      } else {
        mask = randn(c.mask_shape, o);
        mask.select(-1, 3).fill_(-std::numeric_limits<double>::infinity());  // one key hidden from every row
        mask.requires_grad_(c.mask_grad);
      }
      CHECK(select_sdpa_backend(q, k, v, mask, 0.0, c.causal) == c.backend);
      const Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal);
      sum((y * w).to(ScalarType::float32)).backward();

      // The reference: the math backend in float64 on the same (rounded) values; the causal part joined to
      // the mask, as the fused kernels apply both (the math backend refuses the pair).
      const Tensor q64 = leaf64(q), k64 = leaf64(k), v64 = leaf64(v);
      Tensor m64 = std::string(c.kind) == "bool" ? additive64(mask) : leaf64(mask);
      Tensor joined = c.causal ? m64 + causal64(c.L, c.S) : m64;
      const Tensor ry = scaled_dot_product_attention(q64, k64, v64, joined, 0.0);
      sum(ry * w.to(kCpu).to(ScalarType::float64)).backward();
      const double tol = tolerance_of(c.dtype);
      check_close_to_reference(y.to(kCpu).to(ScalarType::float64).tolist(), ry.tolist(), tol, "out");
      check_close_to_reference(q.grad().to(kCpu).to(ScalarType::float64).tolist(), q64.grad().tolist(), 2 * tol, "dq");
      check_close_to_reference(k.grad().to(kCpu).to(ScalarType::float64).tolist(), k64.grad().tolist(), 2 * tol, "dk");
      check_close_to_reference(v.grad().to(kCpu).to(ScalarType::float64).tolist(), v64.grad().tolist(), 2 * tol, "dv");
      if (c.mask_grad) {
        REQUIRE(mask.grad().defined());
        CHECK(mask.grad().sizes() == mask.sizes());
        check_close_to_reference(mask.grad().to(kCpu).to(ScalarType::float64).tolist(), m64.grad().tolist(), 2 * tol,
                                 "dmask");
      }
      if (c.fully_masked_row) {  // PyTorch's memory-efficient kernel and _safe_softmax: 0, not NaN
        const std::vector<double> row = y.select(2, 5).to(kCpu).to(ScalarType::float64).tolist();
        for (double x : row) CHECK(x == 0.0);
      }
    }
  }
}

namespace {

struct DropoutVariant {
  const char* name;
  ScalarType dtype;
  int64_t D;
  bool mask, causal;
  SdpaBackend backend;
};

// Z of the call made right after manual_seed(seed): the call's draw is one random_uniform() scaled to 53 bits
// (ops_attention.cpp), its offset 0; element (b, h, i, j) is kept at the counter ((b H + h) L + i) S + j.
Tensor dropout_factors(uint64_t seed, double p, int64_t B, int64_t H, int64_t L, int64_t S) {
  manual_seed(seed);
  const DropoutDraw draw = dropout_draw(p, static_cast<uint64_t>(random_uniform() * 0x1.0p53), 0);
  std::vector<double> z(static_cast<size_t>(B * H * L * S));
  for (size_t i = 0; i < z.size(); ++i) z[i] = draw.kept(i) ? 1.0 / (1.0 - p) : 0.0;
  return from_vector(z, {B, H, L, S}, TensorOptions{ScalarType::float64, kCpu});
}

}  // namespace

TEST_CASE("sdpa dropout on the fused backends: the documented draw, values and gradients against float64") {
  const int64_t B = 2, H = 3, L = 40, S = 40;
  const double p = 0.25;
  const std::vector<DropoutVariant> variants{
      {"f32 memory-efficient", ScalarType::float32, 64, false, false, SdpaBackend::efficient_attention},
      {"f32 memory-efficient, causal", ScalarType::float32, 64, false, true, SdpaBackend::efficient_attention},
      {"f32 memory-efficient with a mask that requires grad", ScalarType::float32, 64, true, false,
       SdpaBackend::efficient_attention},
      {"bf16 cuDNN", ScalarType::bfloat16, 64, false, false, SdpaBackend::cudnn_attention},
      {"bf16 flash (D 20, padded to 24)", ScalarType::bfloat16, 20, false, true, SdpaBackend::flash_attention},
  };
  for (Device device : {kCpu, kSim}) {
    for (const DropoutVariant& c : variants) {
      CAPTURE(device.str());
      CAPTURE(c.name);
      manual_seed(29);
      const TensorOptions o{c.dtype, device};
      const Tensor q = randn({B, H, L, c.D}, o).requires_grad_(true);
      const Tensor k = randn({B, H, S, c.D}, o).requires_grad_(true);
      const Tensor v = randn({B, H, S, c.D}, o).requires_grad_(true);
      const Tensor w = randn({B, H, L, c.D}, o);
      std::optional<Tensor> mask;
      if (c.mask) mask = randn({B, 1, L, S}, o).requires_grad_(true);
      CHECK(select_sdpa_backend(q, k, v, mask, p, c.causal) == c.backend);
      manual_seed(1234);
      const Tensor y = scaled_dot_product_attention(q, k, v, mask, p, c.causal);
      sum((y * w).to(ScalarType::float32)).backward();

      const Tensor z = dropout_factors(1234, p, B, H, L, S);
      const Tensor q64 = leaf64(q), k64 = leaf64(k), v64 = leaf64(v);
      Tensor scores = matmul(q64, k64.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(c.D)));
      std::optional<Tensor> m64;
      if (mask) {
        m64 = leaf64(*mask);
        scores = scores + *m64;
      }
      if (c.causal) scores = scores + causal64(L, S);
      const Tensor ry = matmul(softmax(scores, -1) * z, v64);
      sum(ry * w.to(kCpu).to(ScalarType::float64)).backward();
      const double tol = tolerance_of(c.dtype);
      check_close_to_reference(y.to(kCpu).to(ScalarType::float64).tolist(), ry.tolist(), tol, "out");
      check_close_to_reference(q.grad().to(kCpu).to(ScalarType::float64).tolist(), q64.grad().tolist(), 2 * tol, "dq");
      check_close_to_reference(k.grad().to(kCpu).to(ScalarType::float64).tolist(), k64.grad().tolist(), 2 * tol, "dk");
      check_close_to_reference(v.grad().to(kCpu).to(ScalarType::float64).tolist(), v64.grad().tolist(), 2 * tol, "dv");
      if (mask)
        check_close_to_reference(mask->grad().to(kCpu).to(ScalarType::float64).tolist(), m64->grad().tolist(), 2 * tol,
                                 "dmask");
      // The draw keeps about 1 - p: 9600 draws, 5 standard deviations = 5 sqrt(p (1 - p) / 9600) = 0.022
      const double kept = sum(gt(z, 0.0).to(ScalarType::float64)).item() / static_cast<double>(B * H * L * S);
      CHECK(std::fabs(kept - (1.0 - p)) < 0.022);
      // The same seed gives the same output, another seed another one
      NoGradGuard no_grad;
      manual_seed(1234);
      CHECK(scaled_dot_product_attention(q, k, v, mask, p, c.causal).tolist() == y.tolist());
      manual_seed(1235);
      CHECK(scaled_dot_product_attention(q, k, v, mask, p, c.causal).tolist() != y.tolist());
    }
  }
}

TEST_CASE("sdpa dropout_p = 1 on the fused backends: zeros (memory-efficient), refused (cuDNN)") {
  for (Device device : {kCpu, kSim}) {
    CAPTURE(device.str());
    manual_seed(3);
    const TensorOptions f32{ScalarType::float32, device};
    const Tensor q = randn({2, 3, 16, 64}, f32).requires_grad_(true);
    const Tensor y = scaled_dot_product_attention(q, q, q, std::nullopt, 1.0);
    y.backward(ones_like(y));
    for (double x : y.tolist()) CHECK(x == 0.0);
    for (double x : q.grad().tolist()) CHECK(x == 0.0);
  }
  for (Device device : {kSim, kMeta}) {
    CAPTURE(device.str());
    fresh(device);
    const Tensor qb = randn({2, 3, 16, 64}, TensorOptions{ScalarType::bfloat16, device});
    const int64_t before = allocated(device);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(qb, qb, qb, std::nullopt, 1.0),
                         doctest::Contains("cannot be 1 on the cuDNN backend"), std::invalid_argument);
    CHECK(allocated(device) == before);
  }
}
