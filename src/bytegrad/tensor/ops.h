// Tensor operations, libtorch-style: free functions, operators, and (declared in tensor.h) members.
//
// Memory rule: every op allocates exactly the blocks PyTorch's op allocates for its result (one output of
// numel * element_size bytes unless noted beside the op), inside an AllocationScope named after the op.
// Views allocate nothing; in-place ops (trailing underscore) allocate nothing and bump the version
// counter. Python-number scalars never become device tensors.
//
// Types: the binary pointwise ops on two tensors (the op table's binary rows: arithmetic, the
// comparisons, logical_and/or, the activation gradients) and where promote as PyTorch does: the result
// type is result_type(a, b) (promote_types, float16 with bfloat16 giving float32; a 0-d operand decides it
// only when of a higher category, bool < integral < floating, than every operand with dimensions: a 0-d
// float32 with a bfloat16 tensor gives bfloat16). The kernel reads each operand in its own dtype and
// computes in the result type's math type, so promotion allocates nothing beyond the output (where, as
// PyTorch's, first converts an operand of another dtype with .to()). Comparisons compare in the result
// type and return bool. In-place forms (add_, sub_, mul_, div_) write self's dtype and refuse, before
// writing, a result type that cannot be cast to it (floating into integral, non-bool into bool). Every
// other op still requires its tensor operands to share a dtype (std::invalid_argument names the op and
// both operands); all operands must share a device. A scalar is a Python number (a whole number taken as a
// Python int) and promotes as PyTorch's wrapped numbers do: int_tensor + 2 stays int64, uint8 + 300 wraps
// and float32 * 1e39 gives inf (PyTorch checks no scalar operand); int_tensor + 0.5 (or + NaN, or ** 0.5)
// computes in float32 and bool_tensor + 2 in int64, the output of that dtype being the only allocation.
// In place, such a promoted result is refused (int64.add_(2.5): "result type Float can't be cast"), and so
// are an integer to a negative scalar power, subtraction with a bool operand and a fractional alpha on an
// integral computation, as PyTorch refuses them. Comparisons with a scalar are exact (done in double). A value that
// becomes an element (full, fill_, masked_fill, constant_pad_nd, tensor() into integer dtypes) must fit its dtype
// (core/checked_convert.h). Float-only ops (the op table's `floating` rows: div, the transcendental
// functions and activations but relu, mean, softmax, ...) reject integer tensors (for div: a result type
// that is not floating) instead of returning float as PyTorch does.
#pragma once

#include <array>
#include <utility>
#include <optional>
#include <string_view>
#include <vector>

#include "bytegrad/core/op_table.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

// ------------------------------------------------------------------------------------ elementwise
// The op table's pointwise rows (core/op_table.h lists them, with each one's dtype rule, node and autocast
// policy): every unary row is `Tensor op(const Tensor& x)` (and Tensor::op()); every binary row
// `Tensor op(const Tensor& a, const Tensor& b)`, with `double alpha = 1.0` (a + alpha * b) where its args
// are Alpha. Among them: the activations (relu, gelu in its exact erf form, ...) and their fused gradients
// `op_backward(grad, saved)` (saved: the activation's result or input, as its row says); comparisons and
// logical ops give bool results.
#define BYTEGRAD_DECLARE_UNARY(op, ...) Tensor op(const Tensor& x);
#define BYTEGRAD_BINARY_EXTRA_None
#define BYTEGRAD_BINARY_EXTRA_Alpha , double alpha = 1.0
#define BYTEGRAD_DECLARE_BINARY(op, dtypes, args, ...) \
  Tensor op(const Tensor& a, const Tensor& b BYTEGRAD_BINARY_EXTRA_##args);
BYTEGRAD_UNARY_OPS(BYTEGRAD_DECLARE_UNARY)
BYTEGRAD_BINARY_OPS(BYTEGRAD_DECLARE_BINARY)
#undef BYTEGRAD_DECLARE_UNARY
#undef BYTEGRAD_DECLARE_BINARY
#undef BYTEGRAD_BINARY_EXTRA_None
#undef BYTEGRAD_BINARY_EXTRA_Alpha

// With a Python-number operand (the table's scalar rows).
Tensor add(const Tensor& a, double b, double alpha = 1.0);
Tensor sub(const Tensor& a, double b, double alpha = 1.0);
Tensor sub(double a, const Tensor& b);  // rsub
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor pow(const Tensor& base, double exponent);
Tensor pow(double base, const Tensor& exponent);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// torch.clamp / clamp_min / clamp_max with Python-number bounds: min(max(x, min), max), either bound absent
// (not both); NaN stays NaN, and min > max gives max everywhere. One output of x's dtype (recorded as the
// op table's clamp, clamp_min, clamp_max rows: the gradient flows where min <= x <= max). Floating tensors
// take any bound; an integer tensor only whole-number bounds (PyTorch would convert it to float32 first);
// bool is refused. The in-place forms write x and allocate nothing; they refuse a tensor that needs a
// graph (their gradient would need x before the clamp).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);
const Tensor& clamp_(const Tensor& self, std::optional<double> min, std::optional<double> max = std::nullopt);
const Tensor& clamp_min_(const Tensor& self, double min);
const Tensor& clamp_max_(const Tensor& self, double max);
// self = self && other, in place (self bool; other broadcast to self's shape).
const Tensor& logical_and_(const Tensor& self, const Tensor& other);

// torch.result_type(a, b): the dtype a binary op on a and b computes in and returns (comparisons: bool).
ScalarType result_type(const Tensor& a, const Tensor& b);

// cond ? a : b, all three broadcast together; cond is bool; the result has result_type(a, b).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// A copy of x (broadcast with mask, contiguous) with value where mask is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ------------------------------------------------------------------------------------- operators
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
// In place (x += y is x.add_(y)).
const Tensor& operator+=(const Tensor& a, const Tensor& b);
const Tensor& operator+=(const Tensor& a, double b);
const Tensor& operator-=(const Tensor& a, const Tensor& b);
const Tensor& operator-=(const Tensor& a, double b);
const Tensor& operator*=(const Tensor& a, const Tensor& b);
const Tensor& operator*=(const Tensor& a, double b);
const Tensor& operator/=(const Tensor& a, const Tensor& b);
const Tensor& operator/=(const Tensor& a, double b);

// ------------------------------------------------------------------------------------ reductions
// All elements: a 0-d result (one 512-byte block). Integer and bool sums are int64, as in PyTorch.
// sum and prod take PyTorch's dtype argument: the result's dtype, the input first copied to it (after the
// output, freed on return) except for a float16/bfloat16 input summed into float32 on a GPU-like device,
// which the kernel reads as it is. Under autocast an unset dtype becomes float32 for an eligible input
// (tensor/autocast.h). Note: sum(x, {}) is ambiguous (dims or dtype?); write sum(x, Shape{}) for dim=[].
Tensor sum(const Tensor& x, std::optional<ScalarType> dtype = std::nullopt);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// One dimension as a plain integer, as libtorch's sum(x, 1) / mean(x, 1, keepdim).
template <DimIndex D>
Tensor sum(const Tensor& x, D dim, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) {
  return sum(x, Shape{static_cast<int64_t>(dim)}, keepdim, dtype);
}
template <DimIndex D>
Tensor mean(const Tensor& x, D dim, bool keepdim = false) {
  return mean(x, Shape{static_cast<int64_t>(dim)}, keepdim);
}
Tensor prod(const Tensor& x, std::optional<ScalarType> dtype = std::nullopt);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// torch.amax/amin: the largest/smallest value over `dims` (empty: every dimension), no indices.
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmin(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Two allocations, values then indices (as torch.max(x, dim)).
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);

// torch.linalg.vector_norm(x, 2, dims, keepdim, dtype=dtype) (Tensor.norm()): the 2-norm over every
// element, or over `dims` (empty: every dimension). Floating dtypes only; the result has `dtype` (a floating
// dtype x converts to without narrowing), by default x's. As PyTorch: when every reduced dimension has size
// 1 (or x is 0-d) it is abs(x.to(dtype)) written into the output; otherwise a reduction with float
// accumulation (double for float64), whose CUDA scratch is sum's, reading x as it is for a float16/bfloat16 x
// into float32 and a copy in `dtype` for other conversions. Under autocast an unset dtype becomes float32
// for an eligible x. Gradient: grad * (x / norm), 0 where norm == 0 (saves self and result).
Tensor norm(const Tensor& x, std::optional<ScalarType> dtype = std::nullopt);
Tensor norm(const Tensor& x, const Shape& dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt);
// torch.linalg.vector_norm(x, ord, dims, keepdim, dtype) for ord 2 (norm above), 1 (sum of |x|) and inf (max
// of |x|; an empty input is refused, as PyTorch); other ords are refused. Same allocations as norm (the
// output, then the reduction's scratch). Only ord 2 is differentiable: ord 1 and inf are refused on a tensor
// that needs a graph.
Tensor vector_norm(const Tensor& x, double ord, const Shape& dims = {}, bool keepdim = false,
                   std::optional<ScalarType> dtype = std::nullopt);
// Tensor.var() / Tensor.std(): sum((x - mean)^2) / (n - correction) (its square root for std) over every
// element or over `dims` (empty: every dimension, as dim=None); correction 1 (unbiased) by default, 0 for
// the population variance (var(x, {}, false, 0.0) over everything); n <= correction gives inf/NaN as
// PyTorch. Note the argument order: keepdim before correction (libtorch's var(x, dim, correction, keepdim)
// puts it last); there is deliberately no var(x, correction) overload, which var(x, {1}) would pick. Floating dtypes
// only. One output, then PyTorch's Welford kernel's scratch (16-byte accumulator, 32 for float64; 2 values per thread).
// Gradient (2 / (n - correction)) * grad * (x - x.mean(dims, true)) (var saves self; std saves self and result and
// first forms grad / (2 * result), 0 where result == 0).
Tensor var(const Tensor& x);
Tensor var(const Tensor& x, const Shape& dims, bool keepdim = false, double correction = 1.0);
Tensor std(const Tensor& x);
Tensor std(const Tensor& x, const Shape& dims, bool keepdim = false, double correction = 1.0);

// -------------------------------------------------------------------------------- matrix products
// On devices with a BLAS workspace (cuda, and sim/meta which model it) each product obtains this thread's
// cuBLAS workspace after allocating its output (allocated once, on first use); addmm/linear with a fusable
// bias also obtain the cuBLASLt block. Operands cuBLAS cannot read in place are first copied as PyTorch
// copies them (documented in ops_matmul.cpp).
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul, PyTorch's decomposition
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mv(const Tensor& m, const Tensor& v);
Tensor dot(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt);
Tensor outer(const Tensor& a, const Tensor& b);

// ----------------------------------------------------------------------------------------- nn ops
// With a dtype, as PyTorch's softmax(x, dim, dtype): x.to(dtype) (autograd-visible; a copy when the dtype
// differs), then the op in that dtype, except where PyTorch's CUDA softmax and log_softmax read float16
// and write float32 themselves (half_to_float, a float16 x with dtype float32 on a GPU-like device: no
// converted copy; the gradient comes back in float16). Under autocast an unset dtype becomes float32 for an
// eligible x.
Tensor softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype = std::nullopt);
// The gradient of (log_)softmax given its output (PyTorch's _softmax_backward_data); input_dtype (the
// forward input's, when it differs from the output's: half_to_float) is the gradient's dtype.
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim, bool log = false,
                        std::optional<ScalarType> input_dtype = std::nullopt);

struct DropoutResult {
  Tensor output;
  Tensor mask;  // bool, true where kept; undefined when nothing was dropped (eval, p == 0)
};
// Training with 0 < p < 1: allocates a bool mask, then the output (PyTorch's fused native_dropout); the
// mask is drawn from the process generator. Eval or p == 0 returns x itself (no allocation); p == 1
// returns x * 0 through a 0-d zero (two allocations, as PyTorch's _dropout).
DropoutResult dropout_with_mask(const Tensor& x, double p, bool train = true);
Tensor dropout(const Tensor& x, double p, bool train = true);
// torch.nn.functional.leaky_relu: x where x > 0, else x * negative_slope. One output (floating dtypes);
// LeakyReluBackward0 saves x and computes leaky_relu_backward(grad, x, negative_slope): one allocation.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// Dropout's gradient, grad * mask * scale, as one allocation (PyTorch's native_dropout_backward: a
// contiguous result; no temporaries).
Tensor native_dropout_backward(const Tensor& grad, const Tensor& mask, double scale);

// weight[indices]: rows of a 2-d weight picked by int64/int32 indices of any shape.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Embedding's weight gradient (num_weights, D) from grad (indices.shape + [D]), with PyTorch's CUDA
// allocations (embedding_dense_backward_cuda): up to 3072 indices one zeroed gradient; above, the
// sort-based path: sorted and original-position index buffers, CUB sort, unique and scan temporaries,
// segment bookkeeping and a (num_indices / 10 + min(num_indices, num_weights), D) per-segment buffer, all
// freed on return (ops_nn.cpp lists them in order).
Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights);

// ---------------------------------------------------------------------------------- normalization
// (ops_norm.cpp) PyTorch's native_layer_norm (its CUDA kernel's allocations): the input is normalized over
// its trailing dims given by normalized_shape (M rows of N = prod(normalized_shape) elements). A
// non-contiguous input (or weight, bias) is first copied (freed on return); then output (input's shape and
// dtype, contiguous), mean, rstd (M elements each, float32 for the 16- and 32-bit floats, float64 for
// float64; viewed as input.shape[:axis] + [1] * len(normalized_shape)). Recorded as "native_layer_norm"
// (inputs {input, weight, bias, mean, rstd}, the last two without edges; scalars {eps}; ints
// normalized_shape): the node saves input, weight, bias, mean and rstd, so without a graph mean and rstd
// are freed when the caller drops them.
struct LayerNormResult {
  Tensor output;
  Tensor mean;
  Tensor rstd;
};
LayerNormResult native_layer_norm(const Tensor& input, const Shape& normalized_shape,
                                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps);
struct LayerNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // undefined where output_mask is false
};
// PyTorch's native_layer_norm_backward (CUDA): grad_input, grad_weight, grad_bias allocated in that order
// (those asked for), then a non-contiguous grad_output copied; when M > 65536 and N / 32 < 66 (the H100's
// 132 SMs / 2) the weight and bias gradients are first summed into (R, N) partial blocks (input's dtype,
// R = min(ceil(M / 32), 32768 / ceil(N / 32))) that are then reduced with sum(0), as PyTorch does.
LayerNormGrads native_layer_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                          const Tensor& mean, const Tensor& rstd, const std::optional<Tensor>& weight,
                                          const std::optional<Tensor>& bias, std::array<bool, 3> output_mask);
// F.layer_norm: native_layer_norm's output (mean and rstd live only as long as the graph needs them).
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                  const std::optional<Tensor>& weight = std::nullopt, const std::optional<Tensor>& bias = std::nullopt,
                  double eps = 1e-5);
// PyTorch's _fused_rms_norm (its CUDA kernel, layer_norm_kernel.cu): y = x * rstd * weight over the trailing
// normalized_shape dims, rstd = 1 / sqrt(mean(x^2) + eps), eps defaulting to the accumulation dtype's
// machine epsilon (float32's for the 16/32-bit floats, float64's for float64). A non-contiguous input (or
// weight) is first copied (freed on return); then the output (input's shape and dtype, contiguous) and rstd
// (M values in the accumulation dtype, viewed as input.shape[:axis] + [1] * len(normalized_shape)). Recorded
// as "fused_rms_norm" (inputs {input, weight}; scalars {eps}; ints normalized_shape): FusedRmsNormBackward0
// saves input, weight and rstd, so without a graph rstd is freed when the caller drops it.
struct RmsNormResult {
  Tensor output;
  Tensor rstd;
};
RmsNormResult fused_rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                             std::optional<double> eps);
struct RmsNormGrads {
  Tensor grad_input, grad_weight;  // undefined where output_mask is false
};
// PyTorch's _fused_rms_norm_backward (CUDA): grad_input then grad_weight (those asked for; grad_weight zeroed
// when there are no rows), then a non-contiguous grad_output copied; for tall inputs with short rows the
// weight gradient is first summed into (R, N) partial rows reduced with sum(0), as native_layer_norm_backward.
RmsNormGrads fused_rms_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                     const Tensor& rstd, const std::optional<Tensor>& weight,
                                     std::array<bool, 2> output_mask);
// F.rms_norm / torch.rms_norm: on CUDA PyTorch 2.11 runs _fused_rms_norm whenever the input is not complex,
// not channels-last, and the weight (if any) has the input's dtype; bytegrad models that path on every
// device (a weight of another dtype, PyTorch's composite fallback, is refused). Returns the output only.
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight = std::nullopt,
                std::optional<double> eps = std::nullopt);

// ------------------------------------------------------------------------- scaled dot-product attention
// (ops_attention.cpp) F.scaled_dot_product_attention(query, key, value, is_causal=..., scale=...) without a
// mask or dropout (inputs that are not 4-d: the math backend, as below): query (B, H, Sq, D), key (B, H, Sk, D), value
// (B, H, Sk, Dv), one floating dtype; the result is (B, H, Sq, Dv). is_causal masks key j for query i where j > i
// (top-left aligned); scale defaults to 1 / sqrt(D). The computation and its memory are those of the backend
// PyTorch 2.11 picks on an H100 (select_sdpa_backend), on every device:
//  - cuDNN (float16/bfloat16, head dims multiples of 8 up to 256, Sk > 1): forward allocates the philox seed and offset
//  (8 bytes
//    each), the output in query's dimension order (GPT-2's transposed views give a (B, Sq, H, Dv) layout, so
//    y.transpose(1, 2) is contiguous), the float32 logsumexp (B, H, Sq) when a gradient will be computed, and
//    a 256-byte workspace freed at once. Recorded as ScaledDotProductCudnnAttentionBackward0, which keeps q, k,
//    v, the output, the logsumexp, seed and offset, and releases them in PyTorch's order (inputs, then outputs,
//    each sorted by name: key, query, value, logsumexp, output, philox_offset, philox_seed). Backward
//    allocates dq, dk, dv (each in its input's layout) and a workspace of 4*B*H*Sq*D + 4*B*H*Sq + 256 bytes,
//    freed before it returns (recorded up to D = 256, Sq != Sk, causal or not; not for D != Dv).
//  - memory-efficient (float32): forward allocates the output (laid out (B, Sq, H, Dv)) and the float32
//    logsumexp padded to (B, H, ceil(Sq / 32) * 32); ScaledDotProductEfficientAttentionBackward0. Backward
//    allocates dq, dk, dv ((B, S, H, D) laid out), the delta rows (grad_out * out, its sum, the transposed
//    copy; the first two freed), the kernel's workspace, then frees delta and the workspace.
//  - flash (float16/bfloat16 where cuDNN refuses: head dims not a multiple of 8, or a key length of 1; D == Dv
//    <= 256, causal only with Sq == Sk): q, k and v padded to a head dim that is a multiple of 8
//    (constant_pad_nd, ConstantPadNdBackward0, whose backward copies the unpadded part), then
//    scaled_dot_product_flash_attention on the padded tensors and the output sliced back to D
//    (SliceBackward0). The flash op always keeps its logsumexp, gradient or not; its node
//    (ScaledDotProductFlashAttentionBackward0) keeps the padded q, k, v.
//  - math (float64, head dims the fused kernels refuse, non-contiguous last dims): the explicit matmul /
//    softmax composition (scaled_dot_product_attention_math), recorded op by op.
// On cpu and sim the fused paths compute with a reference (softmax in double); on cuda with bytegrad's own
// tiled kernels (cuda_attention.cu); meta computes nothing.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
// The same in libtorch's argument order, torch::scaled_dot_product_attention(query, key, value, attn_mask,
// dropout_p, is_causal, scale), as F.scaled_dot_product_attention takes it:
//  - query (..., L, E), key (..., S, E), value (..., S, Ev), at least 2-d, batch dimensions broadcastable.
//    Inputs that are not 4-d run PyTorch's math backend (its fused kernels take 4-d only), whatever the dtype.
//  - attn_mask: bool (True: the key takes part, PyTorch's meaning; converted to 0 / -inf in query's dtype) or
//    float32 or query's dtype (added to the scores), broadcastable to (..., L, S). With is_causal: refused
//    by the math backend (as PyTorch's), both applied by the fused ones (as PyTorch's).
//  - dropout_p in [0, 1] (NaN refused): training-mode dropout of the probabilities, drawn from the process
//    generator (manual_seed), the same mask for forward and backward (the math backend keeps it; the fused
//    backends redraw it from a counter-based generator keyed by the call's seed, kernels/attention_dropout.h,
//    the same on cpu, sim and cuda). dropout_p = 1: zeros (math, and the memory-efficient and flash kernels,
//    where PyTorch's give NaN); refused on cuDNN, as PyTorch's cuDNN frontend refuses it.
// PyTorch 2.11's choice on the H100 is select_sdpa_backend below (recorded with masks and dropout in
// tests/data/pytorch_probes/sdpa_mask). Where it is the math backend (float64, 3-d inputs, head dims the fused
// kernels refuse) the call is computed and allocated as PyTorch's _scaled_dot_product_attention_math is.
// Where PyTorch runs a mask or dropout through its fused kernels (4-d float32, float16, bfloat16), the call is
// allocated as PyTorch's: cuDNN keeps the mask (a bool one converted to query's dtype first) in its node and
// frees it first after backward, otherwise its memory is the maskless call's; the memory-efficient backend
// converts a bool mask, pads a mask whose strides are not multiples of 8 to 8 - S % 8 more keys (a new block;
// the converted one freed) and slices it back, keeps it in its node, and for a mask that requires grad
// allocates in backward a (B, H, L, S rounded up to 16) gradient in the mask's dtype that autograd sums back
// to the mask's shape; dropout adds nothing on memory-efficient and cuDNN, and on flash one 16-byte block
// allocated and freed (and no key splits). Recorded in tests/data/pytorch_probes/sdpa_mask/mask.events.
//  - enable_gqa (grouped-query attention): key and value may have fewer heads (dimension -3) than query, each
//    count dividing query's (else refused, as PyTorch's check). With fewer heads PyTorch 2.11's memory-efficient
//    kernel refuses the call, so float32 and float64 (and inputs that are not 4-d) run the math backend, which
//    repeats key then value to query's head count (repeat_interleave along -3: one copy each, kept until the
//    call returns; their gradients sum the copies back). 16-bit 4-d inputs, which PyTorch runs on cuDNN or
//    flash with grouped heads, are refused (not modelled yet). Equal head counts ignore it.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, bool enable_gqa = false);

enum class SdpaBackend { cudnn_attention, flash_attention, efficient_attention, math };
// The backend PyTorch 2.11 runs for these inputs on an H100 (sdp_utils.cpp's select_sdp_backend; the rule and
// its evidence are written beside the definition).
SdpaBackend select_sdpa_backend(const Tensor& query, const Tensor& key, const Tensor& value, bool is_causal = false);
// The same with a mask and dropout (4-d inputs; others always run the math backend).
SdpaBackend select_sdpa_backend(const Tensor& query, const Tensor& key, const Tensor& value,
                                const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal = false);

// The fused backends as ops of their own (aten::_scaled_dot_product_cudnn_attention and
// _scaled_dot_product_efficient_attention), with their allocations as above. They check shapes and a
// contiguous last dimension, not PyTorch's selection rule: cuDNN's also takes float32 and float64, the
// efficient one float32 and float64 (float64 beyond PyTorch, for tests; its logsumexp is then float64).
// logsumexp is undefined (efficient: (B, H, 0)) unless compute_log_sumexp; philox_seed and philox_offset are
// cuDNN's 8-byte int64 zeros (undefined for the efficient backend: PyTorch keeps them on the host).
struct AttentionResult {
  Tensor output, logsumexp, philox_seed, philox_offset;
};
AttentionResult scaled_dot_product_cudnn_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   bool compute_log_sumexp, bool is_causal = false,
                                                   std::optional<double> scale = std::nullopt);
AttentionResult scaled_dot_product_efficient_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       bool compute_log_sumexp, bool is_causal = false,
                                                       std::optional<double> scale = std::nullopt);
// The same with PyTorch's full argument lists: attn_bias (cuDNN: the mask, any rank broadcastable to
// (B, H, Sq, Sk), as scaled_dot_product_attention passes it; memory-efficient: (B, H, Sq, Sk), PyTorch's
// padded and expanded mask; float32, float64 or the inputs' dtype; the efficient op's gradient reaches it)
// and dropout_p (a fresh draw of the process generator per call when above 0; cuDNN refuses 1 as PyTorch's
// cuDNN frontend does).
AttentionResult scaled_dot_product_cudnn_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   const std::optional<Tensor>& attn_bias, bool compute_log_sumexp,
                                                   double dropout_p, bool is_causal, std::optional<double> scale);
AttentionResult scaled_dot_product_efficient_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const std::optional<Tensor>& attn_bias, bool compute_log_sumexp,
                                                       double dropout_p, bool is_causal, std::optional<double> scale);
// aten::_scaled_dot_product_flash_attention on an H100 (FlashAttention-2 as PyTorch 2.11 builds it): query,
// key and value of one head dim D == Dv, a multiple of 8 (scaled_dot_product_attention pads them), at most
// 256. Forward allocates the output (empty_like of query.transpose(1, 2): query's layout when that view is
// dense, else (B, Sq, H, D)), the float32 logsumexp (B, H, Sq) always, and, where the kernel splits the keys
// (flash_num_splits), float32 partial sums (splits, B, H, Sq) and (splits, B, H, Sq, Dr) freed before it
// returns; philox_seed is the 16-byte rng_state and philox_offset an 8-byte placeholder (int64 here: uint64
// in PyTorch). Beyond PyTorch it also takes float32 and float64 (tests).
AttentionResult scaled_dot_product_flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   bool is_causal = false, std::optional<double> scale = std::nullopt);
// With dropout (above 0: no key splits, as mha_fwd's split-KV path takes no dropout; one more 16-byte block
// allocated and freed after rng_state, as recorded).
AttentionResult scaled_dot_product_flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                   double dropout_p, bool is_causal, std::optional<double> scale);
// How many key blocks mha_fwd splits a flash forward into on the H100 (132 SMs, no dropout): 1 (no partial
// sums) unless the (batch, head, 64-row query block) tiles fill less than 80% of 2 x 132 slots.
int64_t flash_num_splits(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim);
// Their gradients (the probabilities recomputed from the saved logsumexp); scale as resolved by the forward.
struct AttentionGrads {
  Tensor grad_query, grad_key, grad_value, grad_bias;  // grad_bias: the efficient backend's, when asked for
};
// A forward's dropout as its backward needs it: the probability and the draw (the generator's seed, offset).
struct AttentionDropout {
  double p = 0.0;
  uint64_t seed = 0, offset = 0;
};
// The backwards with a bias and dropout. The efficient one allocates, when bias_requires_grad, the bias
// gradient after dv: (B, H, Sq, Sk rounded up to 16) in the bias's dtype, sliced back to Sk keys, as
// _efficient_attention_backward forces its alignment.
AttentionGrads scaled_dot_product_cudnn_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value,
                                                           const std::optional<Tensor>& attn_bias, const Tensor& out,
                                                           const Tensor& logsumexp, const AttentionDropout& dropout,
                                                           bool is_causal, double scale);
AttentionGrads scaled_dot_product_efficient_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                               const Tensor& key, const Tensor& value,
                                                               const std::optional<Tensor>& attn_bias,
                                                               const Tensor& out, const Tensor& logsumexp,
                                                               const AttentionDropout& dropout, bool bias_requires_grad,
                                                               bool is_causal, double scale);
AttentionGrads scaled_dot_product_flash_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value, const Tensor& out,
                                                           const Tensor& logsumexp, const AttentionDropout& dropout,
                                                           bool is_causal, double scale);
AttentionGrads scaled_dot_product_cudnn_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value, const Tensor& out,
                                                           const Tensor& logsumexp, bool is_causal, double scale);
AttentionGrads scaled_dot_product_efficient_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                               const Tensor& key, const Tensor& value,
                                                               const Tensor& out, const Tensor& logsumexp,
                                                               bool is_causal, double scale);
// _scaled_dot_product_flash_attention_backward: contiguous copies of grad_out.transpose(1, 2) and
// out.transpose(1, 2) where those views are not contiguous, dq, dk, dv (empty_like of the transposed inputs),
// the float32 softmax_d (B, H, round128(Sq)) and dq accumulator (B, round128(Sq), H, Dr), then frees the
// accumulator, softmax_d and the two copies. Dr: D rounded to 32 (D <= 128) or 64.
AttentionGrads scaled_dot_product_flash_attention_backward(const Tensor& grad_out, const Tensor& query,
                                                           const Tensor& key, const Tensor& value, const Tensor& out,
                                                           const Tensor& logsumexp, bool is_causal, double scale);
// PyTorch 2.11's math backend (_scaled_dot_product_attention_math) op for op, with its memory: 16-bit inputs
// computed in float32 copies, query and key^T each scaled by sqrt(scale), the causal or given mask added out of
// place, _safe_softmax (rows of -inf only give 0), dropout, the product with value (ops_attention.cpp lists
// every allocation). attn_mask here must already be floating (scaled_dot_product_attention converts a bool
// mask first, as PyTorch does).
Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                                         bool is_causal = false, std::optional<double> scale = std::nullopt);
Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key, const Tensor& value,
                                         const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                                         std::optional<double> scale, bool enable_gqa = false);

// ------------------------------------------------------------------------------- triangular parts
// (ops_triangle.cpp) torch.triu / torch.tril over the last two dims (x at
// least 2-d): elements with j - i >= diagonal (triu) or j - i <= diagonal (tril) kept, others zero. One
// contiguous output; recorded as "triu"/"tril" (ints {diagonal}), whose gradient is grad.triu/tril.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);

// ----------------------------------------------------------------------------- indexing & joining
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// torch.nn.functional.pad(x, pad, value=value) in constant mode (aten::constant_pad_nd): pad lists (before,
// after) pairs from the last dimension backwards; negative entries crop. When every entry is <= 0 the result
// is a clone of the cropped view (in its dimension order); otherwise a new contiguous tensor filled with
// `value` and the input copied in. ConstantPadNdBackward0 crops the gradient the same way (one allocation).
Tensor constant_pad_nd(const Tensor& x, const Shape& pad, double value = 0.0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// torch.repeat_interleave(x, repeats, dim) with an integer count: each element repeated `repeats` times
// along dim (dim unset: over the flattened x). Composite, as PyTorch's: x.unsqueeze(dim + 1), expanded to
// `repeats` there, cloned contiguous (the one allocation) and flattened back; the gradient sums the copies.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt);

// ------------------------------------------------------------------- along one dimension (ops_sort.cpp)
// torch.cumsum(x, dim): the running sums along dim. Integer and bool inputs give int64 (PyTorch's rule), their
// int64 copy made after the output and freed before returning; floating ones keep their dtype. PyTorch's CUDA
// scan allocates nothing more, except for a tensor whose elements all lie along dim (a 1-d one), scanned by
// CUB with temporary storage (see cumsum's comment in ops_sort.cpp). Backward: flip, cumsum, flip.
Tensor cumsum(const Tensor& x, int64_t dim);
// torch.flip(x, {dim}): one contiguous copy with dim reversed (no autograd node: cumsum's backward uses it).
Tensor flip(const Tensor& x, int64_t dim);
// torch.sort(x, dim, descending): values (x's dtype), then indices (int64), allocated in that order; a stable
// sort (equal elements keep their order, NaN sorts above every number). While the sorted dimension has at
// most 4096 elements (its in-place small sort) PyTorch's CUDA sort adds only an int64 arange of that
// dimension's length, freed before it returns (the indices are filled from it); longer dimensions go
// through a segmented radix sort with temporaries that bytegrad does not model. Backward: zeros of x's shape,
// the gradient scattered into it at the indices (value_selecting_reduction_backward).
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// torch.topk(x, k, dim, largest, sorted): the k largest (or smallest) along dim, values then indices (int64).
// Always returned in sorted order (PyTorch's order for sorted=false is unspecified). PyTorch's single-block
// CUDA topk allocates nothing more; its multi-block path (a long dimension with few slices, TensorTopK.cu's
// should_use_multiblock) makes scratch bytegrad does not model. Backward as sort's.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// sort's and topk's backward (FunctionsManual's value_selecting_reduction_backward with keepdim): zeros of
// `sizes` in grad's dtype, then grad scattered in place at `indices` along dim (one allocation).
Tensor value_selecting_backward(const Tensor& grad, int64_t dim, const Tensor& indices, const Shape& sizes);
// torch.nn.functional.one_hot(x, num_classes): int64 x's shape + [num_classes], 1 at each value. Composite, as
// PyTorch's on CUDA: num_classes -1 reads x.max() (a 0-d int64 allocated and freed) to infer the count; then
// zeros, and scatter_ of 1. Values below 0 or not below num_classes are refused naming the value (read on the
// host; on meta, where there are no values, -1 is refused and the values are not checked).
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
// torch.masked_select(input, mask): the elements of input where the bool mask is true (the two broadcast
// together), in row-major order, as a 1-d tensor. Allocates as PyTorch's CUDA op, which indexes with
// mask.nonzero(): the mask's contiguous copy when it is broadcast or strided, a 4-byte count, CUB's count
// and select scratch (sizes modelled in ops_sort.cpp), the int64 positions (dims x count), then the output,
// then the positions freed. The count is read on the host. On meta the output's size is unknown (it depends
// on the mask's values): refused, as PyTorch's meta kernel refuses it. Backward: masked_select_backward.
Tensor masked_select(const Tensor& input, const Tensor& mask);
// FunctionsManual's masked_select_backward: zeros of the broadcast shape (input's dtype), then
// masked_scatter_(mask, grad) into it: an int64 prefix sum of that shape, the mask's contiguous copy when
// needed, CUB's scan scratch, all freed before it returns.
Tensor masked_select_backward(const Tensor& grad, const Tensor& input, const Tensor& mask);

// ------------------------------------------------------------------------------------------ losses
// (ops_loss.cpp) Reduction is backend.h's (none, mean, sum: PyTorch's numbering).

// PyTorch's nll_loss_forward: log_probs (N, C) or (C), target int64 (N) or (), optional class weights (C)
// of log_probs' dtype and device (target t counts weight[t]; total_weight is the sum of the non-ignored
// targets' weights and mean divides by it). Allocates the output ((N) for none with a 2-d input, else 0-d)
// THEN total_weight (0-d, log_probs' dtype), as the structured kernel's two outputs; a non-contiguous
// log_probs, target or weight is copied after them, in that order (expect_contiguous, weight.contiguous()).
// Recorded as "nll_loss" with inputs {log_probs, target, weight (undefined when absent)} and ints
// {reduction, ignore_index}; the node saves self, target, weight and total_weight, keeping total_weight
// alive until backward, so without a graph it is freed when the call returns. A weight that requires grad
// is refused, as PyTorch refuses it (nll_loss is not differentiable with respect to its weight).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100, const std::optional<Tensor>& weight = std::nullopt);
// torch.nn.functional.nll_loss's keywords: nll_loss(x, t, {.weight = w, .reduction = Reduction::sum}).
struct NllLossOptions {
  std::optional<Tensor> weight;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
};
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options);
// PyTorch's nll_loss_backward: one zeroed (contiguous) gradient of self's shape, then non-contiguous
// operands copied (target, self, grad_output: expect_contiguous in that order, then weight), then the kernel.
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         const Tensor& total_weight, Reduction reduction, int64_t ignore_index,
                         const std::optional<Tensor>& weight = std::nullopt);
// Composite, as PyTorch's cross_entropy with class indices: nll_loss(log_softmax(logits, class dim), target,
// weight), the class dim being 1 (0 for a 1-d logits). label_smoothing in [0, 1] (above 0) mixes in the
// uniform distribution as PyTorch's cross_entropy_loss_label_smoothing does, op for op: after nll_loss,
// -log_probs.sum(class dim) (with weights: -(log_probs * weight viewed along the class dim).sum(class dim)),
// then the ignore mask (target == ignore_index) zeroing it, reduced (mean: divided by the count of targets
// not ignored), then (1 - s) * nll + reduced * (s / C); each of those ops allocates as it does alone. With
// weights, label smoothing and reduction mean the divisor is PyTorch's weight.gather(0,
// target.masked_select(~ignore_mask).flatten()).sum() (the weights of the targets not ignored), made before
// smooth_loss.sum() as GCC orders that statement.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
// torch.nn.functional.cross_entropy's keywords: cross_entropy(x, t, {.weight = w, .label_smoothing = 0.1}).
struct CrossEntropyOptions {
  std::optional<Tensor> weight;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
};
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options);
// PyTorch's mse_loss. Input and target of different shapes are broadcast as torch.nn.functional.mse_loss
// broadcasts them (each expanded to the common shape: views, with ExpandBackward0 nodes), after its
// UserWarning "Using a target size (torch.Size([...])) that is different to the input size (...). ..." on
// stderr, once per pair of shapes; then everything below holds for the broadcast shape.
// Same shapes: none: one output of that shape. mean/sum: the output
// first, allocated input-sized as for none (the structured meta function) and resized to 0-d, keeping its
// input-sized block; then an input-sized (input - target)^2 temporary (TensorIterator's layout), reduced
// into the output and freed on return (Loss.cpp's mse_loss_out). Recorded as "mse_loss" (inputs {input,
// target}, ints {reduction}); the node saves both.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// norm * (input - target) * grad_output, norm = 2 / numel for mean, 2 otherwise: one zeroed input-sized
// allocation (PyTorch's zeros_like + mse_loss_backward_out).
Tensor mse_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target, Reduction reduction);
// PyTorch's binary_cross_entropy_with_logits without weight or pos_weight: input and target of one shape
// and floating dtype. Forward, as Loss.cpp: log_sigmoid(input), then (1 - target) (both input-sized), the
// latter updated in place into the loss, then the reduction (mean/sum: a 0-d output and the reduction's
// scratch; the two input-sized temporaries freed after; none: the loss itself, log_sigmoid freed). Recorded
// as "binary_cross_entropy_with_logits" (saves input and target); backward: (sigmoid(input) - target) *
// grad (sigmoid freed after), divided by numel in place for mean; the target's gradient, when needed, is
// -input * grad.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

// ---------------------------------------------------------------------------------------- foreach
// (ops_foreach.cpp) PyTorch's _foreach_* ops on a non-empty list of tensors.
// foreach_norm (torch._foreach_norm): one 0-d norm per tensor, in its dtype; ord 1, 2 or inf, floating
// tensors, no gradient. On a GPU-like device, with every tensor of one dtype and device, non-overlapping
// and dense, PyTorch's multi-tensor kernel allocates a zeroed scratch of ntensors * max_chunks elements
// (float32 for 16-bit and 32-bit floats, max_chunks = ceil(largest numel / 65536)), then the results, and
// frees the scratch (four float32 tensors, the largest of 300000 elements: 4 * 5 * 4 = 80 bytes, then four
// 0-d results). Otherwise (cpu, mixed lists, strided views) each tensor's vector_norm in turn.
std::vector<Tensor> foreach_norm(const std::vector<Tensor>& tensors, double ord = 2.0);
// torch._foreach_mul_(tensors, scalar): each tensor *= scalar, a 0-d tensor on their device; allocates nothing.
void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scalar);
// torch._foreach_clamp_min_ / _foreach_clamp_max_: clamp_min_ / clamp_max_ on each; allocate nothing.
void foreach_clamp_min_(const std::vector<Tensor>& tensors, double min);
void foreach_clamp_max_(const std::vector<Tensor>& tensors, double max);
// torch._amp_foreach_non_finite_check_and_unscale_ (GradScaler.unscale_): sets found_inf (a 1-element
// float32 tensor) to 1 when any element of `grads` is inf or NaN, and multiplies every gradient by
// inv_scale (a 1-element float32 tensor) in place; found_inf is never reset to 0 here. The gradients are
// floating, on found_inf's and inv_scale's device. Allocates nothing. On cuda one kernel per gradient checks
// and multiplies and writes found_inf on the device (nothing is read back to the host); cpu and sim check the
// values on the host, then multiply; on meta, where there are no values, nothing is found.
void amp_foreach_non_finite_check_and_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                               const Tensor& inv_scale);
// torch._amp_update_scale_ (GradScaler.update): with found_inf non-zero, scale *= backoff_factor and the
// growth tracker (a 1-element int32 tensor) becomes 0; otherwise the tracker counts one more successful
// step, and on reaching growth_interval the scale is multiplied by growth_factor (kept when the product
// would be inf) and the tracker restarts at 0. The products are computed in double and stored as float32,
// as PyTorch's kernel computes them (on cuda in a kernel on the device, reading nothing back). Allocates
// nothing; a no-op on meta.
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                       double backoff_factor, int64_t growth_interval);

// ----------------------------------------------------------------------------- in-place updates
// (ops_inplace.cpp) For optimizers: each writes self and allocates nothing (operands broadcast to self's
// shape, one dtype and device). Recorded under their names, so using them on tensors that need a graph is
// a clear error (no derivatives are defined): call them inside a NoGradGuard.
const Tensor& lerp_(const Tensor& self, const Tensor& end, double weight);  // self += w * (end - self)
const Tensor& addcmul_(const Tensor& self, const Tensor& a, const Tensor& b, double value = 1.0);  // += v*a*b
const Tensor& addcdiv_(const Tensor& self, const Tensor& a, const Tensor& b, double value = 1.0);  // += v*a/b
const Tensor& sqrt_(const Tensor& self);
const Tensor& maximum_(const Tensor& self, const Tensor& other);  // torch.maximum(self, other, out=self)

}  // namespace bytegrad
