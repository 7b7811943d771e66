// scaled_dot_product_attention with PyTorch 2.11's memory on an H100: which backend PyTorch picks for the
// inputs (select_sdpa_backend), and for each fused backend exactly the blocks its forward and backward
// allocate, in PyTorch's order, on every device (cuda computes with cuda_attention.cu, cpu and sim with the
// reference in cpu_attention.cpp, meta computes nothing).
//
// The evidence: tests/data/pytorch_probes/gpt2_ops/ws0/sdpa.events (tools/probes/gpt2_op_events.py, PyTorch
// 2.11 on the H100: one causal call forward and backward per case, q/k/v the transposed views of a split
// (B, T, 3C) tensor as nanoGPT's) and g_gpt2_small_bf16_sdpa.events (the GPT-2 training program); for the
// flash backend (and cuDNN at head dims above 128, Sq != Sk, non-causal, contiguous q/k/v)
// tests/data/pytorch_probes/sdpa_flash/{flash,flash_splits}.events (tools/probes/sdpa_flash_probe.py: split
// views and contiguous leaves, causal or not, Sk == 1, no-grad forwards, key-split forwards) with
// torch._fused_sdp_choice grids beside them; for the memory-efficient backend's 16-bit calls and float32 head
// dims above 64, tests/data/pytorch_probes/sdpa_efficient/efficient.events (tools/probes/sdpa_efficient_probe.py).
// The code paths are aten/src/ATen/native/transformers/{attention.cpp (the composite: flash's pad_last_dim<8>
// and the output slice), cuda/attention.cu, cuda/attention_backward.cu, cuda/flash_attn/flash_api.cpp
// (mha_fwd / mha_bwd), sdp_utils.cpp} and aten/src/ATen/native/cudnn/MHA.cpp.
// tests/nn/sdpa.cpp and tests/nn/sdpa_flash.cpp replay every recorded case event by event. Also read for the
// memory-efficient backward: mem_eff_attention/kernel_backward.h (workspace_size, kOutputInRF,
// kKernelComputesDelta) and kernels/cutlassB.h (the kernel order).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

// ------------------------------------------------------------------------------------------- checks

struct Dims {
  int64_t B, H, Sq, Sk, D, Dv;
  int64_t Hk;  // key and value heads: H, or (grouped-query attention on cuDNN) a divisor of H
};

// Query, key and value: defined, on one device, of one floating dtype.
void check_qkv_tensors(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v}) check_defined(op, *t);
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  check_same_dtype(op, q, k);
  check_same_dtype(op, q, v);
  check_floating(op, q);
}

bool last_dim_contiguous(const Tensor& t) { return t.size(-1) == 1 || t.stride(-1) == 1; }

// What every path needs: three defined 4-d (B, H, S, D) tensors of one floating dtype on one device, with
// equal batch and head counts, q and k of one head dimension, k and v of one sequence length. `grouped`
// (cuDNN, which takes grouped-query attention natively): key and value may have Hk heads, equal, dividing
// query's H; query head h then reads key/value head h / (H / Hk).
Dims check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool grouped = false) {
  check_qkv_tensors(op, q, k, v);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"query", &q}, {"key", &k}, {"value", &v}})
    if (t->dim() != 4)
      throw std::invalid_argument(
          fmt::format("{}: expected {} of 4 dimensions (batch, heads, sequence, head dim), "
                      "got {}",
                      op, name, describe(*t)));
  const Dims n{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), k.size(1)};
  const bool heads_ok =
      grouped ? v.size(1) == n.Hk && (n.Hk == n.H || (n.Hk > 0 && n.H % n.Hk == 0)) : n.Hk == n.H && v.size(1) == n.H;
  if (k.size(0) != n.B || v.size(0) != n.B || !heads_ok)
    throw std::invalid_argument(
        grouped ? fmt::format("{}: query {}, key {} and value {} must share batch size, and key and value one number "
                              "of heads that divides query's",
                              op, describe(q), describe(k), describe(v))
                : fmt::format("{}: query {}, key {} and value {} must share batch size and number of "
                              "heads (grouped-query attention is not supported)",
                              op, describe(q), describe(k), describe(v)));
  if (k.size(3) != n.D)
    throw std::invalid_argument(
        fmt::format("{}: query {} and key {} must share the head dimension", op, describe(q), describe(k)));
  if (v.size(2) != n.Sk)
    throw std::invalid_argument(
        fmt::format("{}: key {} and value {} must share the sequence length", op, describe(k), describe(v)));
  return n;
}

// The fused kernels read the last dimension contiguously (PyTorch's CHECK_NOSPARSE_LASTCONTIGUOUS).
void check_fused_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v})
    if (!last_dim_contiguous(*t))
      throw std::invalid_argument(
          fmt::format("{}: {} must have a contiguous last dimension (stride 1)", op, describe(*t)));
}

double resolve_scale(const Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// What F.scaled_dot_product_attention accepts (validate_sdpa_input, and the math path's own checks), checked
// before anything is allocated: query (..., L, E), key (..., S, E), value (..., S, Ev) of one floating dtype
// on one device, at least 2-d, their batch dimensions broadcastable (matmul's rule); attn_mask bool (True:
// take part) or float32 or query's dtype, on their device, broadcastable to the scores (..., L, S);
// dropout_p in [0, 1]; no mask together with is_causal.
// With enable_gqa (pre_process_group_query_attention_input): query, key and value at least 3-d, and the head
// counts (dimension -3) all equal, or key's and value's each dividing query's. True when key and value must be
// repeated to query's head count.
bool gqa_repeats(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool enable_gqa) {
  if (!enable_gqa) return false;
  if (q.dim() < 3 || k.dim() < 3 || v.dim() < 3)
    throw std::invalid_argument(fmt::format(
        "{}: enable_gqa reads the head count (dimension -3): query {}, key {} and value {} must be at least 3-d", op,
        describe(q), describe(k), describe(v)));
  const int64_t hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
  if (hq == hk && hk == hv) return false;
  if (hk == 0 || hv == 0 || hq % hk != 0 || hq % hv != 0)
    throw std::invalid_argument(
        fmt::format("{}: with enable_gqa the number of heads in key ({}) and value ({}) must divide the number "
                    "of heads in query ({})",
                    op, hk, hv, hq));
  return true;
}

void check_sdpa_call(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                     const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                     bool enable_gqa = false) {
  check_qkv_tensors(op, q, k, v);
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    throw std::invalid_argument(
        fmt::format("{}: expected query, key and value to be at least 2-dimensional, got "
                    "query {}, key {}, value {}",
                    op, describe(q), describe(k), describe(v)));
  if (k.size(-1) != q.size(-1))
    throw std::invalid_argument(
        fmt::format("{}: query {} and key {} must share the last (embedding) dimension", op, describe(q), describe(k)));
  if (v.size(-2) != k.size(-2))
    throw std::invalid_argument(fmt::format("{}: key {} and value {} must share the sequence length (dimension -2)", op,
                                            describe(k), describe(v)));
  Shape q_batch(q.sizes().begin(), q.sizes().end() - 2), k_batch(k.sizes().begin(), k.sizes().end() - 2),
      v_batch(v.sizes().begin(), v.sizes().end() - 2);
  if (gqa_repeats(op, q, k, v, enable_gqa)) {  // key and value take query's head count once repeated
    k_batch.back() = q.size(-3);
    v_batch.back() = q.size(-3);
  }
  const Shape batch = broadcast_shapes(op, broadcast_shapes(op, q_batch, k_batch), v_batch);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))  // NaN fails both
    throw std::invalid_argument(
        fmt::format("{}: dropout probability has to be between 0 and 1, but got {}", op, dropout_p));
  if (!attn_mask) return;
  const Tensor& mask = *attn_mask;
  if (!mask.defined()) throw std::invalid_argument(fmt::format("{}: attn_mask is an undefined tensor", op));
  if (mask.device() != q.device())
    throw std::invalid_argument(
        fmt::format("{}: attn_mask {} is not on the device of query {}", op, describe(mask), describe(q)));
  if (mask.dtype() != ScalarType::bool_ && mask.dtype() != ScalarType::float32 && mask.dtype() != q.dtype())
    throw std::invalid_argument(
        fmt::format("{}: expected attn_mask dtype to be bool or float or to match query "
                    "dtype, but got attn_mask {} and query {}",
                    op, describe(mask), describe(q)));
  Shape scores = batch;
  scores.push_back(q.size(-2));
  scores.push_back(k.size(-2));
  bool fits = mask.dim() <= static_cast<int64_t>(scores.size());
  for (int64_t i = 1; fits && i <= mask.dim(); ++i) {
    const int64_t m = mask.size(-i);
    fits = m == 1 || m == scores[scores.size() - static_cast<size_t>(i)];
  }
  if (!fits)
    throw std::invalid_argument(
        fmt::format("{}: attn_mask of shape {} cannot be broadcast to the attention scores' "
                    "shape {} (batch..., L, S)",
                    op, shape_str(mask.sizes()), shape_str(scores)));
  (void)is_causal;  // with a mask: refused by the math backend only (scaled_dot_product_attention)
}

// Whether autograd will record an op on these inputs (grad mode on and one of them requires grad): PyTorch's
// should_compute_logsumexp, which decides whether the forward keeps its logsumexp at all.
bool needs_graph(const std::vector<Tensor>& inputs) {
  AutogradHook* hook = autograd_hook();
  return hook && !autograd_recording_paused() && hook->needs_graph(inputs);
}

// The logsumexp's dtype: float32, as PyTorch's; float64 for float64 inputs (which PyTorch's fused kernels
// refuse; bytegrad computes them for tests and gradchecks).
bool is_half(ScalarType t) { return t == ScalarType::float16 || t == ScalarType::bfloat16; }

ScalarType lse_dtype(ScalarType input) {
  return input == ScalarType::float64 ? ScalarType::float64 : ScalarType::float32;
}

// at::empty_like(t) (preserve_format): t's strides when t is dense, else a dense layout keeping t's dimension
// order (infer_dense_strides; TensorIterator's rule for one operand gives the same order).
Tensor empty_preserving_layout(const Tensor& t) {
  return empty_strided(t.sizes(), elementwise_output_strides(t.sizes(), {&t}), TensorOptions{t.dtype(), t.device()});
}

// A transient workspace of `bytes` (allocated and freed where the caller's scope ends), as the kernels'
// at::empty({bytes}, kByte) / allocator->allocate(bytes).
Tensor workspace_block(int64_t bytes, Device device) {
  if (bytes <= 0) return Tensor();
  return empty({bytes}, TensorOptions{ScalarType::uint8, device});
}

StridedView lse_rows(const Tensor& lse, int64_t rows) { return kv(lse.slice(2, 0, rows)); }

DeviceScratch scratch_of(const Tensor& workspace) {
  if (!workspace.defined()) return {};
  return {kv(workspace).data, workspace.numel()};
}

// The bias and dropout as the kernels take them; `bias` and `grad_bias` (4-d (B, H, Sq, Sk) views, or
// undefined) must outlive the returned extras' use, as must the views held here.
struct KernelExtras {
  StridedView bias_view, grad_bias_view;
  AttentionExtras extras;
  KernelExtras(const Tensor& bias, const Tensor& grad_bias, const AttentionDropout& dropout) {
    if (bias.defined()) {
      bias_view = kv(bias);
      extras.bias = &bias_view;
    }
    if (grad_bias.defined()) {
      grad_bias_view = kv(grad_bias);
      extras.grad_bias = &grad_bias_view;
    }
    extras.dropout_p = dropout.p;
    extras.philox_seed = dropout.seed;
    extras.philox_offset = dropout.offset;
  }
  KernelExtras(const KernelExtras&) = delete;
  KernelExtras& operator=(const KernelExtras&) = delete;
};

// A bias given to a fused op: floating (float32, float64 or the inputs' dtype), on the inputs' device,
// broadcastable to the scores (B, H, Sq, Sk) (`exact`: of that shape, as the memory-efficient op takes it).
void check_attention_bias(const char* op, const Tensor& bias, const Tensor& q, const Dims& n, bool exact) {
  if (!bias.defined()) return;
  if (bias.device() != q.device())
    throw std::invalid_argument(
        fmt::format("{}: attn_bias {} is not on the device of query {}", op, describe(bias), describe(q)));
  if (bias.dtype() != q.dtype() && bias.dtype() != ScalarType::float32 && bias.dtype() != ScalarType::float64)
    throw std::invalid_argument(fmt::format("{}: attn_bias {} must be floating (float32, float64 or query's dtype {})",
                                            op, describe(bias), scalar_type_name(q.dtype())));
  const Shape scores{n.B, n.H, n.Sq, n.Sk};
  bool fits = bias.dim() <= 4 && (!exact || bias.dim() == 4);
  for (int64_t i = 1; fits && i <= bias.dim(); ++i) {
    const int64_t m = bias.size(-i);
    fits = m == scores[static_cast<size_t>(4 - i)] || (!exact && m == 1);
  }
  if (!fits)
    throw std::invalid_argument(fmt::format("{}: attn_bias {} does not {} the scores' shape {}", op, describe(bias),
                                            exact ? "have" : "broadcast to", shape_str(scores)));
}

// A fused backend's checks of its inputs and bias (`exact_bias`: see check_attention_bias; `grouped`: see
// check_attention_inputs); their sizes.
Dims check_fused_call(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                      bool exact_bias, bool grouped = false) {
  const Dims n = check_attention_inputs(op, q, k, v, grouped);
  check_fused_inputs(op, q, k, v);
  check_attention_bias(op, bias, q, n, exact_bias);
  return n;
}

// The bias as the kernels read it: a (B, H, Sq, Sk) view (an expanded one reads its rows many times).
Tensor bias_for_kernel(const Tensor& bias, const Dims& n) {
  if (!bias.defined()) return Tensor();
  return bias.expand({n.B, n.H, n.Sq, n.Sk});
}

// A fused op's dropout draw: a fresh 53-bit seed of the process generator when p > 0 (manual_seed makes it
// repeatable), the counter offset 0; nothing drawn without dropout, so such calls leave the generator alone.
AttentionDropout draw_attention_dropout(double p) {
  AttentionDropout d;
  d.p = p;
  if (p > 0.0) d.seed = static_cast<uint64_t>(random_uniform() * 0x1.0p53);
  return d;
}

// ----------------------------------------------------------------------------------- cuDNN backend

// PyTorch 2.11's cuDNN SDPA on the H100 (attention.cu _scaled_dot_product_cudnn_attention_cuda, MHA.cpp
// run_cudnn_SDP_fprop), as recorded in every bf16/fp16 case of sdpa.events:
//   alloc 8, alloc 8        philox seed and offset: at::zeros({1}, kLong) each, even without dropout
//   alloc B*H*Sq*Dv*e       the output, alloc_with_matching_layout(q): q's dimension order, so GPT-2's
//                           transposed q gives a (B, T, H, D)-ordered output whose transpose(1, 2) is
//                           contiguous (the training program's .contiguous() copies nothing)
//   alloc B*H*Sq*4          the logsumexp (float32), only when a gradient will be computed
//   alloc 256, free 256     cuDNN's workspace (mha_graph->get_workspace_size(): 256 in every recorded case)
constexpr int64_t kCudnnForwardWorkspace = 256;

// With a mask (the bias, kept by the node and freed first after backward) and dropout the blocks are the same
// (sdpa_mask/mask.events: every cuDNN mask and dropout case). Dropout 1 is refused, as the cuDNN frontend
// refuses it ("Dropout probability cannot be 1 as corresponding scale wont be well formed").
void check_cudnn_dropout(const char* op, double dropout_p) {
  if (dropout_p >= 1.0)
    throw std::invalid_argument(
        fmt::format("{}: dropout probability cannot be 1 on the cuDNN backend (PyTorch's cuDNN "
                    "frontend refuses it: the scale 1 / (1 - p) is not finite), got {}",
                    op, dropout_p));
}

AttentionResult cudnn_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              bool compute_log_sumexp, bool is_causal, double scale, const AttentionDropout& dropout) {
  const char* op = "scaled_dot_product_cudnn_attention";
  AllocationScope scope(op);
  const Dims n = check_fused_call(op, q, k, v, bias, false, true);
  check_cudnn_dropout(op, dropout.p);
  const TensorOptions int64_on{ScalarType::int64, q.device()};
  AttentionResult r;
  r.philox_seed = empty({1}, int64_on);
  backend_of(q).fill(kv(r.philox_seed), 0.0);
  r.philox_offset = empty({1}, int64_on);
  backend_of(q).fill(kv(r.philox_offset), 0.0);
  // alloc_with_matching_layout(q, o, {B, H, Sq, Dv}): empty_like(q) when the shapes agree; otherwise the same
  // fill order (q's dimensions sorted by stride) over the output's shape.
  {
    const Shape out_shape{n.B, n.H, n.Sq, n.Dv};
    Shape order{0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q.stride(a) < q.stride(b); });
    Shape strides(4);
    int64_t running = 1;
    for (int64_t d : order) {
      strides[d] = running;
      running *= out_shape[d];
    }
    r.output = q.sizes() == out_shape ? empty_preserving_layout(q)
                                      : empty_strided(out_shape, strides, TensorOptions{q.dtype(), q.device()});
  }
  if (compute_log_sumexp) r.logsumexp = empty({n.B, n.H, n.Sq}, TensorOptions{lse_dtype(q.dtype()), q.device()});
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return r;  // MHA.cpp returns before the graph
  const Tensor workspace = workspace_block(kCudnnForwardWorkspace, q.device());
  const StridedView lse = r.logsumexp.defined() ? kv(r.logsumexp) : StridedView{};
  KernelExtras extras(bias_for_kernel(bias, n), Tensor(), dropout);
  extras.extras.forward_workspace = scratch_of(workspace);
  backend_of(q).attention_forward(kv(r.output), r.logsumexp.defined() ? &lse : nullptr, kv(q), kv(k), kv(v), scale,
                                  is_causal, extras.extras);
  return r;
}

// _cudnn_attention_backward (attention_backward.cu) and run_cudnn_SDP_bprop (MHA.cpp):
//   dq, dk, dv = empty_like(q, k, v)      each in its input's layout (preserve_format)
//   a copy of grad_out in the output's dimension order, only when grad_out's last stride is not 1
//   alloc W, free W                       cuDNN's workspace, then the grad_out copy freed
// W = 4*B*H*Sq*D + 4*B*H*Sq + 256 matches all six recorded bf16/fp16 cases (sdpa.events: 4x12x256x64 3195136,
// 2x2x64x32 34048, 8x12x1024x64 25559296, 1x4x100x64 104256, 2x16x512x128 8454400, 2x4x300x64 fp16 624256),
// which reads as a float32 dQ accumulator, a float32 per-row sum (dO . O) and 256 bytes; it also matches the
// cuDNN calls of sdpa_flash/flash.events (D 160 and 256, Sq 37 with Sk 90, non-causal, contiguous q/k/v:
// 165120, 152400, ...). Not recorded (so uncertain): Dv != D.
// Grouped-query attention (Hk < H key/value heads; op_table_events.jsonl's gqa16 rows, bf16 and fp16, causal
// or not) adds 4*B*H*Sq*D in every recorded case: [1,4,1,33,16] 8448 + 528 + 256 + 8448 = 17680, [2,8,2,64,64]
// 528640, [2,12,4,256,64] 3170560, [4,16,2,1024,64] 33816832. Read as dK and dV over all H query heads in the
// inputs' 16-bit dtype (2*B*H*Sk*D + 2*B*H*Sk*Dv bytes), reduced into Hk heads afterwards (the cuDNN
// frontend's dK_fullhead / dV_fullhead); every recorded case has Sq == Sk and D == Dv, so that reading and
// any other with those sizes agree. Equal head counts with enable_gqa ([1,8,8,128,128]) add nothing.
int64_t cudnn_backward_workspace_bytes(const Dims& n) {
  const int64_t full_head_grads = n.Hk != n.H ? 2 * n.B * n.H * n.Sk * (n.D + n.Dv) : 0;
  return 4 * n.B * n.H * n.Sq * n.D + 4 * n.B * n.H * n.Sq + 256 + full_head_grads;
}

AttentionGrads cudnn_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, const Tensor& out, const Tensor& logsumexp, bool is_causal,
                              double scale, const AttentionDropout& dropout) {
  const char* op = "scaled_dot_product_cudnn_attention_backward";
  AllocationScope scope(op);
  const Dims n = check_fused_call(op, q, k, v, bias, false, true);
  check_cudnn_dropout(op, dropout.p);
  AttentionGrads g;
  g.grad_query = empty_preserving_layout(q);
  g.grad_key = empty_preserving_layout(k);
  g.grad_value = empty_preserving_layout(v);
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0 || out.numel() == 0 || grad_out.numel() == 0) return g;
  if (!logsumexp.defined())
    throw std::invalid_argument(fmt::format("{}: the forward kept no logsumexp (compute_log_sumexp was false)", op));
  // permute_to_matching_layout(o, dO): dO.permute(o's dims outermost first).contiguous().permute(back).
  Tensor dout = grad_out;
  if (!last_dim_contiguous(grad_out)) {
    Shape outer_to_inner{0, 1, 2, 3};
    std::stable_sort(outer_to_inner.begin(), outer_to_inner.end(),
                     [&](int64_t a, int64_t b) { return out.stride(a) > out.stride(b); });
    Shape inverse(4);
    for (int64_t d = 0; d < 4; ++d) inverse[outer_to_inner[d]] = d;
    dout = grad_out.permute(outer_to_inner).contiguous().permute(inverse);
  }
  const Tensor workspace = workspace_block(cudnn_backward_workspace_bytes(n), q.device());
  const KernelExtras extras(bias_for_kernel(bias, n), Tensor(), dropout);
  backend_of(q).attention_backward(kv(g.grad_query), kv(g.grad_key), kv(g.grad_value), kv(dout), kv(q), kv(k), kv(v),
                                   kv(out), kv(logsumexp), scale, is_causal, scratch_of(workspace), extras.extras);
  return g;  // the workspace is freed, then the grad_out copy
}

// ---------------------------------------------------------------------------- memory-efficient backend

// _scaled_dot_product_efficient_attention_cuda -> _efficient_attention_forward (attention.cu), as recorded
// in every float32 case of sdpa.events and every case of sdpa_efficient/efficient.events:
//   alloc B*Sq*H*Dv*e     the output, at::empty({B, Sq, H, Dv}) returned transposed: (B, H, Sq, Dv) laid out
//                         (B, Sq, H, Dv) whatever q's layout
//   alloc B*H*ceil(Sq/32)*32*4   the logsumexp, its rows padded to a multiple of kAlignLSE = 32 (3x5x77x48:
//                         5760 = 15 * 96 * 4), only when a gradient will be computed
//   alloc B*Sq*H*Dv*4     16-bit inputs with max(D, Dv) above 128 only: the 32x128 "gmem" kernel (the
//                         register-resident kernels stop at head dim 128) accumulates the output in float32
//                         (kNeedsOutputAccumulatorBuffer), freed when the kernel is launched (2x2x50x320 bf16:
//                         256000 = 2 * 50 * 2 * 320 * 4)
// The philox seed and offset are CPU tensors (empty without dropout, the draw's with it): no device memory.
// A bias (the (B, H, Sq, Sk) mask scaled_dot_product_attention prepared) and dropout add no block
// (sdpa_mask/mask.events: every memory-efficient mask and dropout case).
AttentionResult efficient_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                                  bool compute_log_sumexp, bool is_causal, double scale,
                                  const AttentionDropout& dropout) {
  const char* op = "scaled_dot_product_efficient_attention";
  AllocationScope scope(op);
  const Dims n = check_fused_call(op, q, k, v, bias, true);
  AttentionResult r;
  r.output = empty({n.B, n.Sq, n.H, n.Dv}, TensorOptions{q.dtype(), q.device()}).transpose(1, 2);
  const int64_t padded = compute_log_sumexp ? (n.Sq + 31) / 32 * 32 : 0;
  r.logsumexp = empty({n.B, n.H, padded}, TensorOptions{lse_dtype(q.dtype()), q.device()});
  const Tensor output_accumulator = is_half(q.dtype()) && std::max(n.D, n.Dv) > 128
                                        ? empty({n.B, n.Sq, n.H, n.Dv}, TensorOptions{ScalarType::float32, q.device()})
                                        : Tensor();
  if (r.output.numel() == 0) return r;
  const StridedView lse = compute_log_sumexp ? lse_rows(r.logsumexp, n.Sq) : StridedView{};
  const KernelExtras extras(bias, Tensor(), dropout);
  backend_of(q).attention_forward(kv(r.output), compute_log_sumexp ? &lse : nullptr, kv(q), kv(k), kv(v), scale,
                                  is_causal, extras.extras);
  return r;  // the accumulator is freed here (bytegrad's kernels accumulate in registers and need none)
}

// The backward kernel PyTorch's dispatch_cutlassB_<dtype>_sm80 picks on an H100 (the first whose kMaxK covers
// max(D, Dv); the sequence-aligned variants share their twins' blocks; the 128x64 k96 kernel is only listed
// for compute capabilities 8.6 and 8.9):
//   16-bit   head dims up to 64: 64x64; up to 128: 128x128; above: 128x64 k65536, whose dK and dV do not fit
//            the registers (kOutputInRF is kMaxK <= kBlockSizeI), so they accumulate in float32 in the workspace
//   float32  up to 64: 64x64; above: 128x64 (its output type is the accumulator's: no dK/dV staging)
struct EfficientBackwardKernel {
  int64_t block_i, block_j;
  bool stages_grad_kv;
};

EfficientBackwardKernel efficient_backward_kernel(ScalarType dtype, int64_t max_k) {
  if (is_half(dtype)) {
    if (max_k <= 64) return {64, 64, false};
    if (max_k <= 128) return {128, 128, false};
    return {128, 64, true};
  }
  return max_k <= 64 ? EfficientBackwardKernel{64, 64, false} : EfficientBackwardKernel{128, 64, false};
}

// The backward kernel's workspace (kernel_backward.h, workspace_size()), per (batch, head), aligned to 4 floats:
//   dQ    GradQTempStorage per (query block, head-dim block of block_j): a lock, a counter, 2 ints of padding
//         and block_i * block_j floats: ceil(Sq / block_i) * ceil(D / block_j) * (block_i * block_j + 4)
//   dK, dV (staging kernels only) splits * block_j * align(D, block_i) and splits * block_j * align(Dv, block_i)
// with the key splits of _efficient_attention_backward's heuristic: ceil(Sk / block_j), 1 when B*H >= 256 and
// Sk <= 2 * block_j, at most 200 / (B*H) for staging kernels, and at least 1. Recorded: float32 4x12x256x64
// 3148800, 3x5x77x48 492000, 1x2x100x128 131136; bf16 2x2x37x90 D264 2228544 (2 splits), 1x1x300x700 D288
// 2654448 (11 splits), fp16 20x12x200 D272 125867520 (B*H = 240: 200 / 240 = 0 splits, so 1).
int64_t efficient_backward_workspace_bytes(const Dims& n, ScalarType dtype) {
  const EfficientBackwardKernel kernel = efficient_backward_kernel(dtype, std::max(n.D, n.Dv));
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t bi = kernel.block_i, bj = kernel.block_j;
  int64_t per_head = ceil_div(n.Sq, bi) * ceil_div(n.D, bj) * (bi * bj + 4);
  if (kernel.stages_grad_kv) {
    const int64_t heads = n.B * n.H;
    int64_t splits = ceil_div(n.Sk, bj);
    if (heads >= 256 && n.Sk <= 2 * bj) splits = 1;
    splits = std::max<int64_t>(1, std::min(splits, 200 / heads));
    per_head += splits * bj * (ceil_div(n.D, bi) * bi + ceil_div(n.Dv, bi) * bi);
  }
  return n.B * n.H * ((per_head + 3) / 4 * 4) * 4;
}

// _scaled_dot_product_efficient_attention_backward_cuda -> _efficient_attention_backward
// (attention_backward.cu), as recorded:
//   a contiguous copy of grad_out.transpose(1, 2), only when that view is not contiguous
//   grad_q, grad_k, grad_v   at::empty of the (B, S, H, D) views each: (B, S, H, D) laid out, returned transposed
//   delta, B*H*Sq float32:
//     16-bit: at::empty (the kernel computes it: kKernelComputesDelta)
//     float32: (grad_out * out) alloc B*Sq*H*Dv*4, .sum(-1) alloc B*Sq*H*4, .transpose(-2, -1).contiguous()
//     alloc B*H*Sq*4, then the sum and the product freed
//   the workspace (above), then delta freed (the kernel lambda's local), the workspace freed and the
//   grad_out copy freed (the function's locals).
//   with a bias that requires grad, its gradient after grad_v: at::empty of (B, H, Sq, Sk rounded up to 16) in
//   the bias's dtype, sliced back to Sk keys (recorded: 2x3x40x48 float32 46080 for 48 and for 37 keys;
//   bfloat16 23040 for 40 keys); the autograd graph then sums it to the mask's shape (and undoes the padding).
AttentionGrads efficient_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& bias, const Tensor& out, const Tensor& logsumexp, bool is_causal,
                                  double scale, const AttentionDropout& dropout, bool bias_requires_grad) {
  const char* op = "scaled_dot_product_efficient_attention_backward";
  AllocationScope scope(op);
  const Dims n = check_fused_call(op, q, k, v, bias, true);
  if (bias_requires_grad && !bias.defined())
    throw std::invalid_argument(fmt::format("{}: a bias gradient was asked for without a bias", op));
  if (!logsumexp.defined() || logsumexp.size(2) < n.Sq)
    throw std::invalid_argument(fmt::format("{}: the forward kept no logsumexp (compute_log_sumexp was false)", op));
  const Tensor grad_out_t = grad_out.transpose(1, 2).contiguous();  // (B, Sq, H, Dv)
  const Tensor out_t = out.transpose(1, 2);
  const TensorOptions like_q{q.dtype(), q.device()};
  AttentionGrads g;
  g.grad_query = empty({n.B, n.Sq, n.H, n.D}, like_q).transpose(1, 2);
  g.grad_key = empty({n.B, n.Sk, n.H, n.D}, like_q).transpose(1, 2);
  g.grad_value = empty({n.B, n.Sk, n.H, n.Dv}, like_q).transpose(1, 2);
  if (bias_requires_grad)
    g.grad_bias =
        empty({n.B, n.H, n.Sq, (n.Sk + 15) / 16 * 16}, TensorOptions{bias.dtype(), q.device()}).slice(3, 0, n.Sk);
  if (n.B * n.H * n.Sq * n.Sk == 0) {
    // PyTorch zeroes the gradients of empty problems (grad_k, grad_v, grad_q).
    for (const Tensor* t : {&g.grad_key, &g.grad_value, &g.grad_query}) backend_of(q).fill(kv(*t), 0.0);
    if (g.grad_bias.defined()) backend_of(q).fill(kv(g.grad_bias), 0.0);
    return g;
  }
  Tensor workspace;
  {
    Tensor delta;
    if (is_half(q.dtype())) {
      delta = empty({n.B, n.H, n.Sq}, TensorOptions{ScalarType::float32, q.device()});
    } else {
      // (grad_out.to(kFloat) * out.to(kFloat)).sum(-1).transpose(-2, -1).contiguous(): the casts are no-ops for
      // float32 (float64 is kept as it is: PyTorch's kernels never see it).
      const Tensor product = mul(grad_out_t, out_t);
      const Tensor row_sums = sum(product, {3});
      delta = row_sums.transpose(1, 2).contiguous();
    }
    workspace = workspace_block(efficient_backward_workspace_bytes(n, q.dtype()), q.device());
    const KernelExtras extras(bias, g.grad_bias, dropout);
    backend_of(q).attention_backward(kv(g.grad_query), kv(g.grad_key), kv(g.grad_value), kv(grad_out_t.transpose(1, 2)),
                                     kv(q), kv(k), kv(v), kv(out), lse_rows(logsumexp, n.Sq), scale, is_causal,
                                     scratch_of(workspace), extras.extras);
  }  // delta freed
  workspace = Tensor();
  return g;  // then the grad_out copy, when one was made
}

// ----------------------------------------------------------------------------------------- flash backend

// PyTorch 2.11's flash backend on the H100 (attention.cu _scaled_dot_product_flash_attention_cuda ->
// _flash_attention_forward -> flash_api.cpp mha_fwd), as recorded in tests/data/pytorch_probes/sdpa_flash
// (tools/probes/sdpa_flash_probe.py; every flash case's events, forward and backward):
//   alloc B*Sq*H*D*e        the output: empty_like(q.transpose(1, 2)), so q's layout when that view is dense
//                           (a padded or contiguous q gives a (B, H, Sq, D)-laid-out output), (B, Sq, H, D)
//                           otherwise (nanoGPT's unpadded split views)
//   alloc B*H*Sq*4          softmax_lse (float32), gradient or not
//   alloc s*B*H*Sq*4, s*B*H*Sq*Dr*4   softmax_lse_accum and out_accum when the keys are split (s > 1 splits:
//                           flash_num_splits), freed in that order after the kernel
//   alloc 16, alloc 8       rng_state ({2} uint64) and the unused ({} uint64) that stand for seed and offset
// Dr = D rounded up to 32 (D <= 128) or 64 (flash's head_size_rounded).

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// at::empty_like(t) exactly: t's own strides (size-1 dimensions' included) when t is non-overlapping and
// dense, else the dense layout in t's dimension order. (Recorded: a contiguous (1, 1, 512, D) query gives an
// output of strides (512 D, 512 D, D, 1), not (512 D, D, D, 1).)
Tensor empty_like_exact(const Tensor& t) {
  if (is_non_overlapping_and_dense(t))
    return empty_strided(t.sizes(), t.strides(), TensorOptions{t.dtype(), t.device()});
  return empty_preserving_layout(t);
}
int64_t flash_head_dim_rounded(int64_t D) { return round_up(D, D <= 128 ? 32 : 64); }

// The one-flash-call shape checks (mha_fwd / mha_bwd): equal head dims, a multiple of 8 (the caller pads),
// at most 256, 16-bit floats in PyTorch (bytegrad also computes float32 and float64, for tests).
Dims check_flash_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Dims n = check_attention_inputs(op, q, k, v);
  check_fused_inputs(op, q, k, v);
  if (n.D != n.Dv)
    throw std::invalid_argument(
        fmt::format("{}: query {} and value {} must share the head dimension (flash "
                    "attention takes D == Dv)",
                    op, describe(q), describe(v)));
  if (n.D % 8 != 0 || n.D > 256)
    throw std::invalid_argument(
        fmt::format("{}: the head dimension {} must be a multiple of 8 and at most 256 "
                    "(scaled_dot_product_attention pads it to a multiple of 8)",
                    op, n.D));
  return n;
}

// With dropout: no key splits (mha_fwd takes the split-KV path only without dropout), and one more 16-byte
// block allocated and freed after rng_state and unused (sdpa_mask/mask.events: d_bf16_d20, D 20 padded to 24).
AttentionResult flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double scale,
                              const AttentionDropout& dropout) {
  const char* op = "scaled_dot_product_flash_attention";
  AllocationScope scope(op);
  const Dims n = check_flash_inputs(op, q, k, v);
  const TensorOptions int64_on{ScalarType::int64, q.device()};
  AttentionResult r;
  r.output = empty_like_exact(q.transpose(1, 2)).transpose(1, 2);
  r.logsumexp = empty({n.B, n.H, n.Sq}, TensorOptions{lse_dtype(q.dtype()), q.device()});
  const int64_t splits = n.B > 0 && dropout.p <= 0.0 ? flash_num_splits(n.B, n.H, n.Sq, n.Sk, n.D) : 1;
  Tensor lse_accum, out_accum;
  if (splits > 1) {
    const TensorOptions f32{ScalarType::float32, q.device()};
    lse_accum = empty({splits, n.B, n.H, n.Sq}, f32);
    out_accum = empty({splits, n.B, n.H, n.Sq, flash_head_dim_rounded(n.D)}, f32);
  }
  r.philox_seed = empty({2}, int64_on);                  // rng_state
  r.philox_offset = empty({}, int64_on);                 // _unused
  if (dropout.p > 0.0) workspace_block(16, q.device());  // allocated and freed at once
  if (n.B > 0 && n.Sq > 0) {
    if (n.Sk == 0) {  // mha_fwd: an empty key set gives zeros and an infinite logsumexp
      backend_of(q).fill(kv(r.output), 0.0);
      backend_of(q).fill(kv(r.logsumexp), std::numeric_limits<double>::infinity());
    } else {
      const StridedView lse = kv(r.logsumexp);
      const KernelExtras extras(Tensor(), Tensor(), dropout);
      backend_of(q).attention_forward(kv(r.output), &lse, kv(q), kv(k), kv(v), scale, is_causal, extras.extras);
    }
  }
  lse_accum = Tensor();
  out_accum = Tensor();
  return r;
}

// _scaled_dot_product_flash_attention_backward_cuda -> _flash_attention_backward (attention_backward.cu) ->
// mha_bwd (flash_api.cpp), as recorded:
//   grad_out.transpose(1, 2).contiguous(), out.transpose(1, 2).contiguous()   a copy each where that view is
//                           not contiguous (e.g. the sliced-back gradient of a padded call, or any output laid
//                           out (B, H, Sq, D))
//   dq, dk, dv              empty_like of q, k, v transposed (each in that view's layout when dense)
//   alloc B*H*round128(Sq)*4            softmax_d (float32)
//   alloc B*round128(Sq)*H*Dr*4         dq_accum (float32)
//   free dq_accum, free softmax_d, free the out copy, free the grad_out copy
AttentionGrads flash_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& logsumexp, bool is_causal, double scale,
                              const AttentionDropout& dropout) {
  const char* op = "scaled_dot_product_flash_attention_backward";
  AllocationScope scope(op);
  const Dims n = check_flash_inputs(op, q, k, v);
  if (!logsumexp.defined()) throw std::invalid_argument(fmt::format("{}: the forward kept no logsumexp", op));
  if (grad_out.sizes() != out.sizes())
    throw std::invalid_argument(
        fmt::format("{}: the gradient {} must have the output's sizes {}", op, describe(grad_out), describe(out)));
  const Tensor dout = grad_out.transpose(1, 2).contiguous().transpose(1, 2);
  const Tensor out_c = out.transpose(1, 2).contiguous().transpose(1, 2);
  AttentionGrads g;
  g.grad_query = empty_like_exact(q.transpose(1, 2)).transpose(1, 2);
  g.grad_key = empty_like_exact(k.transpose(1, 2)).transpose(1, 2);
  g.grad_value = empty_like_exact(v.transpose(1, 2)).transpose(1, 2);
  if (n.B == 0) return g;  // mha_bwd returns before its scratch
  const int64_t sq_rounded = round_up(n.Sq, 128);
  const TensorOptions f32{ScalarType::float32, q.device()};
  Tensor softmax_d = empty({n.B, n.H, sq_rounded}, f32);
  Tensor dq_accum = empty({n.B, sq_rounded, n.H, flash_head_dim_rounded(n.D)}, f32);
  if (n.Sq > 0) {
    const KernelExtras extras(Tensor(), Tensor(), dropout);
    backend_of(q).attention_backward(kv(g.grad_query), kv(g.grad_key), kv(g.grad_value), kv(dout), kv(q), kv(k), kv(v),
                                     kv(out_c), kv(logsumexp), scale, is_causal, scratch_of(dq_accum), extras.extras);
  } else {
    backend_of(q).fill(kv(g.grad_key), 0.0);
    backend_of(q).fill(kv(g.grad_value), 0.0);
  }
  dq_accum = Tensor();
  softmax_d = Tensor();
  return g;  // then the out copy and the grad_out copy (out_c, then dout: the locals last first)
}

// ------------------------------------------------------------------------------------- the selection

}  // namespace

// flash_api.cpp's num_splits_heuristic as set_params_splitkv calls it (no dropout, num_splits = 0) on the
// H100: 2 x 132 slots (128 threads a block), key blocks of 256 / 128 / 64 rows for head dims up to 64 / 128 /
// above, 64-row query blocks. The smallest eligible split count within 85% of the best wave efficiency.
// Recorded: 1024 keys, 2 heads, D 60 -> 4; 512 keys, 1 head, D 100 -> 4; 600 keys, 6 (b, h), one query, D 20
// -> 3; 256 keys, 4 (b, h), D 140 -> 4; every recorded call with one key block -> 1.
int64_t flash_num_splits(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim) {
  constexpr int kSlots = 2 * 132;
  const int64_t D = round_up(head_dim, 8);
  const int64_t block_n = D <= 64 ? 256 : (D <= 128 ? 128 : 64);
  const int64_t n_blocks = (seqlen_k + block_n - 1) / block_n;
  const int64_t tiles = batch * heads * ((seqlen_q + 63) / 64);
  if (static_cast<float>(tiles) >= 0.8f * kSlots) return 1;
  const int64_t max_splits = std::min<int64_t>({128, kSlots, n_blocks});
  auto eligible = [&](int64_t s) { return s == 1 || (n_blocks + s - 1) / s != (n_blocks + s - 2) / (s - 1); };
  std::vector<float> efficiency(static_cast<size_t>(std::max<int64_t>(max_splits, 0)), 0.f);
  float best = 0.f;
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) continue;
    const float waves = static_cast<float>(tiles * s) / kSlots;
    const float e = waves / std::ceil(waves);
    efficiency[static_cast<size_t>(s - 1)] = e;
    best = std::max(best, e);
  }
  for (int64_t s = 1; s <= max_splits; ++s)
    if (eligible(s) && efficiency[static_cast<size_t>(s - 1)] >= 0.85 * best) return s;
  return 1;
}

// PyTorch 2.11's select_sdp_backend (sdp_utils.cpp) on an H100 (sm90) with cuDNN 9.19, where
// priority_order puts cuDNN first: cuDNN, flash, memory-efficient, math, each taken when its constraints
// hold. Only the constraints that bytegrad's inputs can fail are checked (no mask, no dropout, dense
// tensors, equal heads):
//   cuDNN      float16/bfloat16; last dims contiguous (size-1 ignored); Sq, Sk > 0; B, H <= 65535; D and Dv
//              multiples of 8, each at most 256; Sk != 1.
//   flash      float16/bfloat16; D == Dv <= 256; causal only with Sq == Sk; last dims contiguous; Sq, Sk > 0.
//   efficient  float16/float32/bfloat16; D and Dv multiples of 8 (16-bit) or 4 (float32); storage offsets
//              multiples of that alignment; last dims contiguous (size 1 included); Sq, Sk > 0. Recorded for
//              every float32 case (4x12x256x64, 2x2x64x32, 3x5x77x48) and for the 22 cases of
//              sdpa_efficient/efficient.events (16-bit D 264..512, causal Sk == 1 < Sq, float32 D 96..320).
//   math       everything else (float64, odd head dims, non-contiguous last dims, empty sequences).
// torch._fused_sdp_choice on the H100 (tests/data/pytorch_probes/sdpa_flash/flash_choices.txt and
// flash_choices_dv.txt) agrees for bf16 and fp16 with D in {8, ..., 512}, causal or not, Sq x Sk in 16x16,
// 16x1, 1x1, 1x16, 16x32, 32x16, and with D != Dv (both up to 256): cuDNN for every head-dim pair of multiples
// of 8 up to 256 (the earlier limit of 128 was an assumption the recording refutes); flash for 16-bit head dims
// that are not multiples of 8, and for Sk == 1 (cuDNN refuses it) when causal is off or Sq == 1; the
// memory-efficient kernels for causal calls with Sk == 1 < Sq and for D above 256; math otherwise.
// The same rule holds on every device, so cpu, sim and meta allocate what the H100 would.
namespace {
// The cuDNN rule of select_sdpa_backend (below) on checked sizes.
bool cudnn_takes(const Tensor& query, const Tensor& key, const Tensor& value, const Dims& n) {
  const bool last_dims_unit = query.stride(-1) == 1 && key.stride(-1) == 1 && value.stride(-1) == 1;
  const bool last_dims_ok = last_dims_unit || n.D == 1;  // ignore_singleton_dim (cuDNN, flash)
  const bool nonempty = n.Sq > 0 && n.Sk > 0;
  return is_half(query.dtype()) && last_dims_ok && nonempty && n.B <= 65535 && n.H <= 65535 && n.D % 8 == 0 &&
         n.Dv % 8 == 0 && n.D <= 256 && n.Dv <= 256 && n.Sk != 1;
}
}  // namespace

SdpaBackend select_sdpa_backend(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal) {
  const Dims n = check_attention_inputs("scaled_dot_product_attention", query, key, value);
  const ScalarType dtype = query.dtype();
  const bool last_dims_unit = query.stride(-1) == 1 && key.stride(-1) == 1 && value.stride(-1) == 1;
  const bool last_dims_ok = last_dims_unit || n.D == 1;  // ignore_singleton_dim (cuDNN, flash)
  const bool nonempty = n.Sq > 0 && n.Sk > 0;
  if (cudnn_takes(query, key, value, n)) return SdpaBackend::cudnn_attention;
  if (is_half(dtype) && last_dims_ok && nonempty && n.D == n.Dv && n.D <= 256 && (!is_causal || n.Sq == n.Sk))
    return SdpaBackend::flash_attention;
  const int64_t alignment = is_half(dtype) ? 8 : 4;
  const bool efficient_dtype = is_half(dtype) || dtype == ScalarType::float32;
  const bool offsets_aligned = query.storage_offset() % alignment == 0 && key.storage_offset() % alignment == 0 &&
                               value.storage_offset() % alignment == 0;
  if (efficient_dtype && last_dims_unit && nonempty && n.D > 0 && n.D % alignment == 0 && n.Dv > 0 &&
      n.Dv % alignment == 0 && offsets_aligned)
    return SdpaBackend::efficient_attention;
  return SdpaBackend::math;
}

// With a mask or dropout (tests/data/pytorch_probes/sdpa_mask/mask_choices.txt, torch._fused_sdp_choice over
// dtypes, head dims, mask kinds and shapes, dropout, causal flags, key lengths, requires_grad and ranks):
// inputs that are not all 4-d always run the math backend; dropout never changes the choice; a mask rules
// out flash; cuDNN takes a mask of 2 or 4 dims that needs no gradient; other masks go to the memory-efficient
// backend where its own rule holds.
SdpaBackend select_sdpa_backend(const Tensor& query, const Tensor& key, const Tensor& value,
                                const std::optional<Tensor>& attn_mask, double /*dropout_p*/, bool is_causal) {
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4) return SdpaBackend::math;
  const SdpaBackend plain = select_sdpa_backend(query, key, value, is_causal);
  if (!attn_mask || !attn_mask->defined() || plain == SdpaBackend::math) return plain;
  const Tensor& mask = *attn_mask;
  const bool cudnn_mask = (mask.dim() == 2 || mask.dim() == 4) && !tensor_requires_grad(mask);
  if (plain == SdpaBackend::cudnn_attention && cudnn_mask) return plain;
  // flash and cuDNN refused: the memory-efficient backend's rule
  const Dims n = check_attention_inputs("scaled_dot_product_attention", query, key, value);
  const ScalarType dtype = query.dtype();
  const int64_t alignment = is_half(dtype) ? 8 : 4;
  const bool efficient_dtype = is_half(dtype) || dtype == ScalarType::float32;
  const bool last_dims_unit = query.stride(-1) == 1 && key.stride(-1) == 1 && value.stride(-1) == 1;
  const bool offsets_aligned = query.storage_offset() % alignment == 0 && key.storage_offset() % alignment == 0 &&
                               value.storage_offset() % alignment == 0;
  if (efficient_dtype && last_dims_unit && n.Sq > 0 && n.Sk > 0 && n.D > 0 && n.D % alignment == 0 && n.Dv > 0 &&
      n.Dv % alignment == 0 && offsets_aligned)
    return SdpaBackend::efficient_attention;
  return SdpaBackend::math;
}

namespace {

// The inputs a fused op records: query, key, value, and the bias when there is one (the node's fourth input).
std::vector<Tensor> attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const std::optional<Tensor>& bias) {
  std::vector<Tensor> inputs{q, k, v};
  if (bias && bias->defined()) inputs.push_back(*bias);
  return inputs;
}

Tensor defined_or_none(const std::optional<Tensor>& t) { return t && t->defined() ? *t : Tensor(); }

// Recording and computing one fused forward: the dropout drawn first (its seed goes into the record, so the
// node's backward redraws the same elements).
template <OpId id, typename Compute>
AttentionResult fused_forward(const char* op, std::vector<Tensor> inputs, bool compute_log_sumexp, double dropout_p,
                              bool is_causal, double scale, Compute&& compute) {
  if (needs_graph(inputs) && !compute_log_sumexp)
    throw std::invalid_argument(fmt::format("{}: a gradient needs compute_log_sumexp = true", op));
  const AttentionDropout dropout = draw_attention_dropout(dropout_p);
  OpRecording recording =
      begin_recording<id>(std::move(inputs), {is_causal, scale, dropout.p, dropout.seed, dropout.offset});
  AttentionResult r = without_recording([&] { return compute(dropout); });
  recording.finish({r.output, r.logsumexp, r.philox_seed, r.philox_offset});
  return r;
}

// The cudnn and memory-efficient backends' forward (both take a bias): the scale resolved, the bias recorded as
// the fourth input when there is one, then `forward` computes under fused_forward's recording.
using BiasedForward = AttentionResult (*)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                                          bool compute_log_sumexp, bool is_causal, double scale,
                                          const AttentionDropout& dropout);
template <OpId id>
AttentionResult biased_fused_forward(const char* op, BiasedForward forward, const Tensor& query, const Tensor& key,
                                     const Tensor& value, const std::optional<Tensor>& attn_bias,
                                     bool compute_log_sumexp, double dropout_p, bool is_causal,
                                     std::optional<double> scale) {
  const double s = resolve_scale(query, scale);
  const Tensor bias = defined_or_none(attn_bias);
  return fused_forward<id>(
      op, attention_inputs(query, key, value, attn_bias), compute_log_sumexp, dropout_p, is_causal, s,
      [&](const AttentionDropout& d) { return forward(query, key, value, bias, compute_log_sumexp, is_causal, s, d); });
}

void check_dropout_p(const char* op, double dropout_p) {
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    throw std::invalid_argument(
        fmt::format("{}: dropout probability has to be between 0 and 1, but got {}", op, dropout_p));
}

}  // namespace

AttentionResult scaled_dot_product_cudnn_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   bool compute_log_sumexp, bool is_causal,
                                                   std::optional<double> scale) {
  return scaled_dot_product_cudnn_attention(query, key, value, std::nullopt, compute_log_sumexp, 0.0, is_causal, scale);
}

AttentionResult scaled_dot_product_cudnn_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   const std::optional<Tensor>& attn_bias, bool compute_log_sumexp,
                                                   double dropout_p, bool is_causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_cudnn_attention";
  check_dropout_p(op, dropout_p);
  check_cudnn_dropout(op, dropout_p);
  return biased_fused_forward<OpId::scaled_dot_product_cudnn_attention>(
      op, cudnn_forward, query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale);
}

AttentionResult scaled_dot_product_efficient_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       bool compute_log_sumexp, bool is_causal,
                                                       std::optional<double> scale) {
  return scaled_dot_product_efficient_attention(query, key, value, std::nullopt, compute_log_sumexp, 0.0, is_causal,
                                                scale);
}

AttentionResult scaled_dot_product_efficient_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const std::optional<Tensor>& attn_bias, bool compute_log_sumexp,
                                                       double dropout_p, bool is_causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_efficient_attention";
  check_dropout_p(op, dropout_p);
  return biased_fused_forward<OpId::scaled_dot_product_efficient_attention>(
      op, efficient_forward, query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale);
}

AttentionResult scaled_dot_product_flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   bool is_causal, std::optional<double> scale) {
  return scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal, scale);
}

AttentionResult scaled_dot_product_flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   double dropout_p, bool is_causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_flash_attention";
  check_dropout_p(op, dropout_p);
  const double s = resolve_scale(query, scale);
  return fused_forward<OpId::scaled_dot_product_flash_attention>(
      op, {query, key, value}, /*compute_log_sumexp=*/true, dropout_p, is_causal, s,
      [&](const AttentionDropout& d) { return flash_forward(query, key, value, is_causal, s, d); });
}

AttentionGrads scaled_dot_product_flash_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value, const Tensor& out,
                                                           const Tensor& logsumexp, bool is_causal, double scale) {
  return scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp, AttentionDropout{},
                                                     is_causal, scale);
}

AttentionGrads scaled_dot_product_flash_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value, const Tensor& out,
                                                           const Tensor& logsumexp, const AttentionDropout& dropout,
                                                           bool is_causal, double scale) {
  return without_recording(
      [&] { return flash_backward(grad_out, query, key, value, out, logsumexp, is_causal, scale, dropout); });
}

AttentionGrads scaled_dot_product_cudnn_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value, const Tensor& out,
                                                           const Tensor& logsumexp, bool is_causal, double scale) {
  return scaled_dot_product_cudnn_attention_backward(grad_out, query, key, value, std::nullopt, out, logsumexp,
                                                     AttentionDropout{}, is_causal, scale);
}

AttentionGrads scaled_dot_product_cudnn_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value,
                                                           const std::optional<Tensor>& attn_bias, const Tensor& out,
                                                           const Tensor& logsumexp, const AttentionDropout& dropout,
                                                           bool is_causal, double scale) {
  const Tensor bias = defined_or_none(attn_bias);
  return without_recording(
      [&] { return cudnn_backward(grad_out, query, key, value, bias, out, logsumexp, is_causal, scale, dropout); });
}

AttentionGrads scaled_dot_product_efficient_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                               const Tensor& key, const Tensor& value,
                                                               const Tensor& out, const Tensor& logsumexp,
                                                               bool is_causal, double scale) {
  return scaled_dot_product_efficient_attention_backward(grad_out, query, key, value, std::nullopt, out, logsumexp,
                                                         AttentionDropout{}, false, is_causal, scale);
}

AttentionGrads scaled_dot_product_efficient_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                               const Tensor& key, const Tensor& value,
                                                               const std::optional<Tensor>& attn_bias,
                                                               const Tensor& out, const Tensor& logsumexp,
                                                               const AttentionDropout& dropout, bool bias_requires_grad,
                                                               bool is_causal, double scale) {
  const Tensor bias = defined_or_none(attn_bias);
  return without_recording([&] {
    return efficient_backward(grad_out, query, key, value, bias, out, logsumexp, is_causal, scale, dropout,
                              bias_requires_grad);
  });
}

// PyTorch 2.11's _scaled_dot_product_attention_math, op for op, so that its allocations and frees are PyTorch's
// (recorded: tests/data/pytorch_probes/sdpa_mask/mask.events, the MATH cases; tools/probes/sdpa_mask_probe.py):
//   16-bit inputs are first copied to float32 (q, k, v in that order: allow_fp16_bf16_reduction_math_sdp is off)
//   query = q * sqrt(scale) (a negative scale: q * -sqrt(|scale|))
//   is_causal: ones(L, S, bool).tril() (the ones freed), converted as a bool mask (below; the tril freed)
//   attn = matmul(query, k^T * sqrt(scale))
//   attn.add_(mask) (in place: no allocation)
//   attn = _safe_softmax(attn, -1): softmax, then rows that are all -inf set to 0 (its temporaries: the
//          x == -inf map, its all() over the row, a 0-d zero; freed last first); the scores freed
//   attn = dropout(attn, p, train=true) when p > 0 (native_dropout: the bool mask, then the output)
//   16-bit: attn.to(dtype) first (the op's second output, which the caller drops: freed last; otherwise attn
//          itself, so without a graph attn is freed after query), then matmul(attn, v) and its .to(dtype)
//          (the float32 product freed)
//   then, without a graph keeping them: attn, query, the causal mask, v, k, q copies (the locals, last first).
// The node of the softmax is SoftmaxBackward0 here (PyTorch's SafeSoftmaxBackward0 saves the same result and
// runs the same _softmax_backward_data).
namespace {

// convert_boolean_attn_mask: where(mask, 0, -inf) in `dtype` (two 0-d tensors made first, freed after the
// where); floating masks as they are.
Tensor convert_boolean_mask(const Tensor& mask, ScalarType dtype) {
  if (mask.dtype() != ScalarType::bool_) return mask;
  const TensorOptions options{dtype, mask.device()};
  const Tensor zero = scalar_tensor(0.0, options);
  const Tensor neg_inf = scalar_tensor(-std::numeric_limits<double>::infinity(), options);
  return where(mask, zero, neg_inf);
}

// _safe_softmax(x, dim): softmax, with rows whose every score is -inf giving 0 instead of NaN. The output is
// the recorded softmax's (SoftmaxBackward0 saves it); the fix-up writes it in place below autograd.
Tensor safe_softmax(const Tensor& x, int64_t dim) {
  Tensor out = softmax(x, dim);  // not const: returned by move
  const Tensor masked = eq(x, -std::numeric_limits<double>::infinity());
  const Tensor masked_rows = amin(masked, {dim}, true);
  // PyTorch's where(masked_rows, zero, out) takes a 0-d zero: made for its block; the fill writes 0 directly
  const Tensor zero = scalar_tensor(0.0, TensorOptions{out.dtype(), out.device()});
  if (out.numel() > 0) backend_of(out).masked_fill(kv(out), kv(out), kv(masked_rows.expand(out.sizes())), 0.0);
  return out;  // zero, masked_rows, masked freed in that order
}

struct MathOutputs {
  Tensor output;
  Tensor attn;  // the second output (a copy for 16-bit inputs); the caller drops it last
};

MathOutputs attention_math(const Tensor& query_in, const Tensor& key_in, const Tensor& value_in,
                           const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                           std::optional<double> scale, bool enable_gqa) {
  const ScalarType origin = query_in.dtype();
  const bool upcast = is_half(origin);
  Tensor q_acc = upcast ? query_in.to(ScalarType::float32) : query_in;
  Tensor k_acc = upcast ? key_in.to(ScalarType::float32) : key_in;
  Tensor v_acc = upcast ? value_in.to(ScalarType::float32) : value_in;
  Tensor mask = attn_mask ? *attn_mask : Tensor();
  const double s = resolve_scale(query_in, scale);
  const double factor = std::sqrt(std::fabs(s));
  Tensor query = q_acc * (s < 0 ? -factor : factor);
  if (is_causal) {
    const int64_t L = query_in.size(-2), S = key_in.size(-2);
    const Tensor keep = tril(ones({L, S}, TensorOptions{ScalarType::bool_, query_in.device()}));
    mask = convert_boolean_mask(keep, query.dtype());
  }
  // Grouped-query attention: key then value repeated (repeat_interleave along dim -3) to query's head count,
  // both kept to the end (PyTorch's structured binding of a tuple, freed key first after attn).
  Tensor key_expanded = k_acc, value_expanded = v_acc;
  if (gqa_repeats("scaled_dot_product_attention", query_in, key_in, value_in, enable_gqa)) {
    key_expanded = repeat_interleave(k_acc, query_in.size(-3) / key_in.size(-3), -3);
    value_expanded = repeat_interleave(v_acc, query_in.size(-3) / value_in.size(-3), -3);
  }
  Tensor attn = matmul(query, key_expanded.transpose(-2, -1) * factor);
  // In place, as PyTorch does for plain tensors (attn.add_(mask); a tensor subclass or a Python dispatch mode
  // gets attn.add(mask), whose recording (the `tagged` cases) shows one more block).
  if (mask.defined()) attn.add_(mask);
  attn = safe_softmax(attn, -1);
  if (dropout_p > 0.0) attn = dropout(attn, dropout_p, true);
  MathOutputs r;
  r.attn = upcast ? attn.to(origin) : attn;  // the second output: attn itself unless it is a copy
  r.output = matmul(attn, value_expanded);
  if (upcast) r.output = r.output.to(origin);
  attn = Tensor();
  key_expanded = Tensor();
  value_expanded = Tensor();
  query = Tensor();
  mask = Tensor();
  v_acc = Tensor();
  k_acc = Tensor();
  q_acc = Tensor();
  return r;
}

}  // namespace

Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal,
                                         std::optional<double> scale) {
  return scaled_dot_product_attention_math(query, key, value, std::nullopt, 0.0, is_causal, scale);
}

Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                                         const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                                         std::optional<double> scale, bool enable_gqa) {
  check_sdpa_call("scaled_dot_product_attention_math", query, key, value, attn_mask, dropout_p, is_causal, enable_gqa);
  if (attn_mask && attn_mask->defined() && is_causal)
    throw std::invalid_argument(
        "scaled_dot_product_attention_math: explicit attn_mask should not be set when "
        "is_causal=True (give one or the other)");
  const std::optional<Tensor> mask =
      attn_mask ? std::optional<Tensor>(convert_boolean_mask(*attn_mask, query.dtype())) : std::nullopt;
  MathOutputs r = attention_math(query, key, value, mask, dropout_p, is_causal, scale, enable_gqa);
  Tensor output = std::move(r.output);
  return output;  // then r.attn
}

// preprocess_mask (attention.cpp) for the memory-efficient backend: a mask whose strides are not multiples of 8
// elements (except the last, which must be 1) is padded with zeros to 8 - S % 8 more keys (constant_pad_nd:
// a new contiguous tensor) and sliced back to S, the converted mask it replaces freed; then expanded to
// (B, H, L, S). Recorded: a 40x37 mask becomes a 40x40 block (6400 bytes float32), a 100x100 one 100x104.
namespace {
Tensor prepare_efficient_mask(Tensor mask, const Tensor& query, const Tensor& key) {
  constexpr int64_t kAlignment = 8;
  bool aligned = mask.dim() == 0 || mask.stride(-1) == 1;
  for (int64_t d = 0; aligned && d + 1 < mask.dim(); ++d) aligned = mask.stride(d) % kAlignment == 0;
  if (!aligned) {
    const int64_t keys = mask.size(-1);
    const Tensor padded = constant_pad_nd(mask, {0, kAlignment - keys % kAlignment});
    mask = padded.slice(-1, 0, keys);
  }
  return mask.expand({query.size(0), query.size(1), query.size(2), key.size(2)});
}
}  // namespace

// The output of a fused backend's result; the rest released in PyTorch's order. PyTorch's std::tuple of
// (output, logsumexp, ..., philox_seed, philox_offset) is destroyed first element first (libstdc++), so where
// no graph keeps them (checkpointing's recomputed forward, a graph that saved nothing) the logsumexp goes
// before the seed and the offset; a struct's members would go last first (recorded: mid_ckpt_bf16_sdpa_8x512
// in tests/data/pytorch_probes/gpt2/sweep).
namespace {
Tensor output_of(AttentionResult&& r) {
  Tensor output = std::move(r.output);
  r.logsumexp = Tensor();
  r.philox_seed = Tensor();
  r.philox_offset = Tensor();
  return output;
}

// scaled_dot_product_attention's flash case (attention.cpp): q, k and v padded to a head dim that is a multiple
// of 8 (pad_last_dim<8>: constant_pad_nd, a new contiguous tensor each, query first), the scale taken from the
// unpadded head dim, the flash op on the padded tensors, its output sliced back (post_process_flash_output).
// Then the op's tuple goes (logsumexp, rng_state, unused, as output_of) and the padded inputs last first
// (value, key, query), unless its graph keeps them.
Tensor flash_attention_padded(const Tensor& query, const Tensor& key, const Tensor& value, double dropout_p,
                              bool is_causal, std::optional<double> scale) {
  const int64_t D = query.size(-1);
  auto pad_to_8 = [](const Tensor& t) {
    const int64_t last = t.size(-1);
    return last % 8 == 0 ? t : constant_pad_nd(t, {0, 8 - last % 8});
  };
  const Tensor query_padded = pad_to_8(query);
  const Tensor key_padded = pad_to_8(key);
  const Tensor value_padded = pad_to_8(value);
  const double s = resolve_scale(query, scale);
  Tensor out =
      output_of(scaled_dot_product_flash_attention(query_padded, key_padded, value_padded, dropout_p, is_causal, s));
  return out.size(-1) != D ? out.slice(-1, 0, D) : out;
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal,
                                    std::optional<double> scale) {
  BYTEGRAD_AUTOCAST(lower_precision_fp, scaled_dot_product_attention, query, key, value, is_causal, scale);
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4)  // PyTorch's fused kernels take 4-d only
    return scaled_dot_product_attention(query, key, value, std::nullopt, 0.0, is_causal, scale);
  const SdpaBackend backend = select_sdpa_backend(query, key, value, is_causal);
  const bool compute_log_sumexp = needs_graph({query, key, value});
  switch (backend) {
    case SdpaBackend::cudnn_attention:
      return output_of(scaled_dot_product_cudnn_attention(query, key, value, compute_log_sumexp, is_causal, scale));
    case SdpaBackend::efficient_attention:
      return output_of(scaled_dot_product_efficient_attention(query, key, value, compute_log_sumexp, is_causal, scale));
    case SdpaBackend::flash_attention: return flash_attention_padded(query, key, value, 0.0, is_causal, scale);
    case SdpaBackend::math: break;
  }
  return scaled_dot_product_attention_math(query, key, value, std::nullopt, 0.0, is_causal, scale);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  BYTEGRAD_AUTOCAST(lower_precision_fp, scaled_dot_product_attention, query, key, value, attn_mask, dropout_p,
                    is_causal, scale, enable_gqa);
  const char* op = "scaled_dot_product_attention";
  const std::optional<Tensor> mask = attn_mask && attn_mask->defined() ? attn_mask : std::nullopt;
  check_sdpa_call(op, query, key, value, mask, dropout_p, is_causal, enable_gqa);
  const bool four_d = query.dim() == 4 && key.dim() == 4 && value.dim() == 4;
  if (gqa_repeats(op, query, key, value, enable_gqa)) {
    // Fewer key/value heads than query heads. PyTorch 2.11's memory-efficient kernel refuses them
    // (check_batch_size_and_num_heads_dense<false>), so float32 and float64 run the math backend, which
    // repeats key and value; 16-bit 4-d inputs go to cuDNN or flash with the grouped heads as they are.
    // Recorded (op_table_events.jsonl, group gqa16: bf16 and fp16, causal or not, no mask, no dropout, key and
    // value of one head count, head dims multiples of 8): cuDNN in every case, its blocks as without grouping
    // but for the backward's workspace (cudnn_backward_workspace_bytes). The rest of the 16-bit 4-d cases
    // (flash for head dims that are not multiples of 8, a mask, dropout, key and value heads that differ) are
    // not recorded and refused.
    if (four_d && is_half(query.dtype())) {
      const Dims n{query.size(0), query.size(1), query.size(2), key.size(2), query.size(3), value.size(3), key.size(1)};
      const bool plain = !mask && dropout_p == 0.0 && key.size(1) == value.size(1) && key.size(0) == query.size(0) &&
                         value.size(0) == query.size(0);
      if (plain && cudnn_takes(query, key, value, n)) {
        const bool compute_log_sumexp = needs_graph({query, key, value});
        return output_of(scaled_dot_product_cudnn_attention(query, key, value, compute_log_sumexp, is_causal, scale));
      }
      throw std::invalid_argument(fmt::format(
          "{}: enable_gqa with {} query heads and {} key / {} value heads in {}{}{}: bytegrad models PyTorch 2.11's "
          "cuDNN path with grouped heads (no mask, no dropout, key and value of one head count, head dims "
          "multiples of 8 up to 256, more than one key); this call would take another backend, whose memory is "
          "not recorded: repeat key and value yourself (repeat_interleave(key, {}, -3)) or compute in float32",
          op, query.size(-3), key.size(-3), value.size(-3), scalar_type_name(query.dtype()), mask ? " with a mask" : "",
          dropout_p > 0.0 ? " with dropout" : "", query.size(-3) / key.size(-3)));
    }
    if (mask && is_causal)
      throw std::invalid_argument(fmt::format(
          "{}: explicit attn_mask should not be set when is_causal=True on the math backend (give one or the other)",
          op));
    const std::optional<Tensor> converted =
        mask ? std::optional<Tensor>(convert_boolean_mask(*mask, query.dtype())) : std::nullopt;
    return scaled_dot_product_attention_math(query, key, value, converted, dropout_p, is_causal, scale, true);
  }
  if (!mask && dropout_p == 0.0 && four_d) return scaled_dot_product_attention(query, key, value, is_causal, scale);
  // PyTorch 2.11's backend selection reads dimension -2 of the mask for 4-d 16-bit inputs and fails on a 1-d
  // mask, whatever the head dim (mask_choices.txt: IndexError in all 320 such rows; float32 and 3-d pass).
  if (mask && four_d && is_half(query.dtype()) && mask->dim() == 1)
    throw std::out_of_range(
        fmt::format("{}: a 1-d attn_mask {} with 4-d {} inputs: PyTorch 2.11's backend "
                    "selection indexes its dimension -2 (IndexError: Dimension out of range); "
                    "give it as (1, S)",
                    op, describe(*mask), scalar_type_name(query.dtype())));
  const SdpaBackend backend = select_sdpa_backend(query, key, value, mask, dropout_p, is_causal);
  // PyTorch's should_compute_logsumexp looks at q, k and v; a mask that alone requires grad is counted here
  // too, so that its gradient can be computed (PyTorch would fail in backward).
  std::vector<Tensor> graph_inputs{query, key, value};
  if (mask) graph_inputs.push_back(*mask);
  const bool compute_log_sumexp = needs_graph(graph_inputs);
  switch (backend) {
    case SdpaBackend::cudnn_attention: {
      // The mask converted to query's dtype (bool) or as given; the node keeps it until backward, and without
      // a graph it is freed when the call returns, after the op's seed and offset.
      check_cudnn_dropout(op, dropout_p);
      const std::optional<Tensor> converted =
          mask ? std::optional<Tensor>(convert_boolean_mask(*mask, query.dtype())) : std::nullopt;
      return output_of(scaled_dot_product_cudnn_attention(query, key, value, converted, compute_log_sumexp, dropout_p,
                                                          is_causal, scale));
    }
    case SdpaBackend::efficient_attention: {
      const std::optional<Tensor> prepared =
          mask ? std::optional<Tensor>(prepare_efficient_mask(convert_boolean_mask(*mask, query.dtype()), query, key))
               : std::nullopt;
      return output_of(scaled_dot_product_efficient_attention(query, key, value, prepared, compute_log_sumexp,
                                                              dropout_p, is_causal, scale));
    }
    case SdpaBackend::flash_attention:  // a mask rules flash out: dropout only
      return flash_attention_padded(query, key, value, dropout_p, is_causal, scale);
    case SdpaBackend::math: break;
  }
  if (mask && is_causal)  // the math backend refuses both (the fused kernels apply both)
    throw std::invalid_argument(
        fmt::format("{}: explicit attn_mask should not be set when is_causal=True on the math "
                    "backend (query {}; give one or the other)",
                    op, describe(query)));
  // The math backend: a bool mask converted to query's dtype first (freed when the call returns, after the
  // math op's second output).
  const std::optional<Tensor> converted =
      mask ? std::optional<Tensor>(convert_boolean_mask(*mask, query.dtype())) : std::nullopt;
  return scaled_dot_product_attention_math(query, key, value, converted, dropout_p, is_causal, scale);
}

}  // namespace bytegrad
