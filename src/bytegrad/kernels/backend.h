// The seam between tensor ops and compute: ops check shapes, dtypes and devices, allocate their outputs,
// and call one backend per device type. Backends compute into memory they are given; a backend that
// needs scratch memory draws it from the device's caching allocator (tagged "temporary" or "workspace")
// and documents it beside the kernel, so it is visible in the allocator's history.
#pragma once

#include <stdexcept>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/core/op_table.h"
#include "bytegrad/core/scalar_type.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/kernels/gemm_args.h"

namespace bytegrad {

// UnaryOp and BinaryOp (the pointwise kernels' ops) are the op table's unary and binary rows
// (core/op_table.h); what each computes is in kernels/pointwise_math.h. add/sub scale their second
// operand by alpha (a + alpha * b); the *_backward ops fuse an activation's gradient as PyTorch does (a:
// the incoming gradient, b: the saved tensor, the activation's result or input as its row says).

// A pointwise step by a number after another (KernelBackend::softmax_backward_then; a deferred gradient's
// last node, tensor/gradient_reader.h): op(x, scalar), as binary_scalar computes it.
struct ScalarStep {
  BinaryOp op = BinaryOp::mul;
  double scalar = 1.0;
};

// norm: the 2-norm, sqrt(sum of |x|^2); norm_one: sum of |x|; norm_inf: max of |x| (NaN wins), floating
// dtypes only. var/std (correction-adjusted variance and its square root) are computed by reduce_variance,
// which takes the correction; reduce() rejects them.
enum class ReduceOp { sum, mean, prod, max, min, argmax, argmin, norm, norm_one, norm_inf, var, std };

// Three-operand pointwise updates, as PyTorch's optimizers use them in place (value is the scalar):
// lerp: self + value * (a - self) (b unused); addcmul: self + value * a * b; addcdiv: self + value * a / b.
enum class TernaryOp { lerp, addcmul, addcdiv };

// Device memory a caller lends a kernel for one call (nullptr on meta, or when there is none).
struct DeviceScratch {
  void* data = nullptr;
  int64_t bytes = 0;
};

// What scaled_dot_product_attention adds to the plain fused computation (an additive mask and dropout), as
// PyTorch's memory-efficient and cuDNN kernels take them. Defaults: none of it.
//   bias       (B, H, Sq, Sk), any strides (an expanded mask has zeros), float32, float64 or the inputs' 16-bit
//              dtype: added to the scaled scores (-inf: the key is left out; a row with every key left out
//              gives 0 and a logsumexp of -inf, as PyTorch's kernels)
//   grad_bias  backward only, when the bias needs a gradient: dS_ij = p_ij (z_ij dp_ij - delta_i) written to
//              every element (0 where causal hides the key), in its own dtype
//   dropout    the probabilities' dropout (attention_dropout.h: z_ij = kept ? 1 / (1 - p) : 0); the logsumexp
//              is the undropped softmax's, and backward redraws the same elements
//   forward_workspace  forward only: the workspace the op layer allocated as PyTorch's backend does (cuDNN's),
//              which the kernel may use for the call's duration (backward's is its `scratch` argument)
struct AttentionExtras {
  const StridedView* bias = nullptr;
  const StridedView* grad_bias = nullptr;
  double dropout_p = 0.0;
  uint64_t philox_seed = 0, philox_offset = 0;
  DeviceScratch forward_workspace;
  bool any() const { return bias != nullptr || dropout_p > 0.0; }
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;

  // Foreach batches (PyTorch's _foreach_* ops, one launch over many tensors): between begin_foreach() and
  // the matching end_foreach() on a thread, a backend may hold back unary, binary_scalar and ternary calls
  // on contiguous operands and run them, in call order, as multi-tensor launches at end_foreach() or
  // before its next call of another kind; consecutive launches over lists of the same tensors may run as
  // one pass (each op's values unchanged). The caller keeps every operand alive and unread by the host
  // until end_foreach() (a loop of independent per-tensor updates, as the optimizers' foreach steps are).
  // cpu, sim and meta run each call at once. Nests; ForeachBatch is the scope.
  virtual void begin_foreach() {}
  virtual void end_foreach() {}

  // out[i] = value
  virtual void fill(const StridedView& out, double value) = 0;
  // out[i] = start + i * step over out's elements in row-major order
  virtual void arange(const StridedView& out, double start, double step) = 0;
  // dst[i] = src[i]; same sizes, any strides, any dtypes (converting). dst and src must not overlap
  // unless identical.
  virtual void copy(const StridedView& dst, const StridedView& src) = 0;
  // dst (contiguous, on this device) <- host bytes laid out contiguously in dst's dtype. The buffer must
  // hold exactly dst's elements: a shorter or longer one is refused (std::invalid_argument naming both
  // counts) before anything is read or written.
  void copy_from_host(const StridedView& dst, std::span<const std::byte> host);
  // host bytes (contiguous, src's dtype) <- src (any strides); the buffer must hold exactly src's elements.
  void copy_to_host(std::span<std::byte> host, const StridedView& src);

  // out[i] = op(in[i]); in has out's sizes (strides may be 0 for broadcast) and dtype.
  virtual void unary(UnaryOp op, const StridedView& out, const StridedView& in) = 0;
  // out[i] = op(a[i], b[i]); a and b are already broadcast to out's sizes (stride 0 where broadcast). out
  // may alias a or b exactly (in-place ops).
  // Types, as PyTorch's TensorIterator on CUDA: each operand is read in its own dtype and converted to
  // `common` (PyTorch's common dtype; when not given, promote_types(a.dtype, b.dtype)), the op is computed
  // in common's math type (float for the 16-bit floats), and the result is written in out's dtype: bool
  // for comparisons and logical ops, otherwise any dtype (common itself, or an in-place target's dtype).
  // Nothing is allocated for the conversions. When a, b and out share one dtype (or out is bool) and common
  // is that dtype, the same-dtype kernels run unchanged; the mixed case is a separate path.
  virtual void binary(BinaryOp op, const StridedView& out, const StridedView& a, const StridedView& b,
                      double alpha = 1.0, std::optional<ScalarType> common = std::nullopt) = 0;
  // out[i] = op(a[i], scalar), or op(scalar, a[i]) when scalar_first (rsub, rdiv, rpow).
  virtual void binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                             bool scalar_first = false) = 0;
  // out[i] = cond[i] ? a[i] : b[i]; all broadcast to out's sizes, cond is bool.
  virtual void where(const StridedView& out, const StridedView& cond, const StridedView& a, const StridedView& b) = 0;
  // out[i] = mask[i] ? value : src[i]; mask (bool) and src (out's dtype) broadcast to out's sizes. src is out
  // itself in place (masked_fill_); out of place it is PyTorch's clone and fill in one pass.
  virtual void masked_fill(const StridedView& out, const StridedView& src, const StridedView& mask, double value) = 0;
  // out[i] = op(mask[i] ? value : src[i], scalar): masked_fill and then binary_scalar (a mul or div by a
  // number), each value the two calls' (op in the dtype's math type, rounded once), in one pass where the
  // backend has the kernel (a deferred gradient's last step, tensor/gradient_reader.h). out and src share a
  // dtype.
  virtual void masked_fill_then_scalar(BinaryOp op, const StridedView& out, const StridedView& src,
                                       const StridedView& mask, double value, double scalar) {
    masked_fill(out, src, mask, value);
    binary_scalar(op, out, out, scalar);
  }
  // A deferred gradient's chain written in one pass from softmax's gradient (tensor/gradient_reader.h:
  // SoftmaxBackward0 deferred; slow attention's way back): each element the value softmax_backward computes
  // from grad_out and output (one floating dtype, or a float32 output and a 16-bit grad_out read as its float32
  // value; not log-softmax) converted to out's dtype, then
  // `mask[i] ? value : it` where mask is given (out's sizes, broadcast), then op(it, scalar) where `then` is
  // given: the bits of softmax_backward into out, masked_fill in place and binary_scalar in place, which is
  // what this default runs. out is float32 or the operands' dtype and overlaps none of them, or is grad_out
  // or output itself (the same view: every kernel reads a row whole before writing it); the caller notes the
  // launches (note_deferred_*).
  virtual void softmax_backward_then(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                                     int64_t dim, const StridedView* mask, double value, const ScalarStep* then) {
    softmax_backward(out, grad_out, output, dim, false);
    if (mask != nullptr) masked_fill(out, out, *mask, value);
    if (then != nullptr) binary_scalar(then->op, out, out, then->scalar);
  }
  // A copy or an out-of-place masked_fill that eager runs here and a deferred gradient leaves for later
  // (tensor/gradient_reader.h): nothing runs; the driver-allocations wrapper notes the launch now, as it
  // would the call's. The later fused call notes only its own step.
  virtual void note_deferred_copy(const StridedView& dst, const StridedView& src) { (void)dst, (void)src; }
  virtual void note_deferred_masked_fill(const StridedView& out, const StridedView& src) { (void)out, (void)src; }
  // Likewise softmax's gradient (SoftmaxBackward0), softmax of pending scores, and a mul or div by a number
  // written by a fused call.
  virtual void note_deferred_softmax_backward(const StridedView& grad_in) { (void)grad_in; }
  virtual void note_deferred_softmax(const StridedView& out) { (void)out; }
  virtual void note_deferred_binary_scalar(const StridedView& out) { (void)out; }
  // Waits until the device finished every stream's work (cuda); others run their kernels at once.
  virtual void wait_for_device() {}

  // GradScaler's checks on a device that keeps the values (PyTorch's _amp_foreach_non_finite_check_and_unscale_
  // and _amp_update_scale_ kernels): the op layer (tensor/ops_foreach.cpp) calls these for cuda only; cpu and
  // sim check on the host there, meta computes nothing, so the defaults refuse.
  // grad[i] *= inv_scale[0] for every element (computed in the gradient's math type), and found_inf[0] = 1
  // when any element was inf or NaN before the multiply (never reset to 0). found_inf and inv_scale: one
  // float32 element each on this device; grad floating, any strides.
  virtual void amp_non_finite_check_and_unscale(const StridedView& grad, const StridedView& found_inf,
                                                const StridedView& inv_scale);
  // With found_inf[0] != 0: scale[0] = float(scale[0] * backoff_factor) and growth_tracker[0] = 0; otherwise
  // the tracker counts one more step and on reaching growth_interval scale[0] = float(scale[0] *
  // growth_factor) (kept when that is not finite) and the tracker restarts at 0. scale, found_inf float32 and
  // growth_tracker int32, one element each, on this device; the products in double.
  virtual void amp_update_scale(const StridedView& scale, const StridedView& growth_tracker,
                                const StridedView& found_inf, double growth_factor, double backoff_factor,
                                int64_t growth_interval);

  // out has in's rank with size 1 in every reduced dimension. argmax/argmin write int64 indices along the
  // flattened reduced dimensions. mean divides by the number of reduced elements.
  virtual void reduce(ReduceOp op, const StridedView& out, const StridedView& in) = 0;
  // out = sum((x - mean)^2) / max(0, n - correction) over the reduced dimensions (n of them), its square
  // root when take_sqrt (std); out has in's rank with 1 at each reduced dimension; floating dtypes only.
  // n <= correction gives inf or NaN (0 / 0), as PyTorch.
  virtual void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) = 0;
  // values and indices (int64) have in's rank with size 1 at dim.
  virtual void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices,
                                   const StridedView& in, int64_t dim) = 0;

  // Softmax (or log-softmax) along dim; out has in's sizes and dtype, or is float32 from a float16 or bfloat16
  // in (each element converted exactly: the float32 input's results, bit for bit).
  virtual void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) = 0;
  // softmax (log_softmax with `log`) along dim of what a pending chain would have written
  // (tensor/pending_scores.h): each element source op scale's scalar (binary_scalar's bits, in source's
  // dtype), then `mask[i] ? value : it` where mask is given (broadcast to source's sizes), read as softmax
  // reads its input: the bits of binary_scalar, masked_fill and softmax run one after another. out is
  // source's dtype, or float32 from a 16-bit source; it overlaps nothing it reads but may be source itself.
  // `copy`, where given (float16 or bfloat16, out's sizes, contiguous, float32 out): each output element
  // converted to copy's dtype as well, the bits of a copy run after; like out it overlaps nothing it reads
  // but may be source itself. false: this backend does not take these operands, and nothing ran.
  virtual bool softmax_of_scaled(const StridedView& out, const StridedView& source, ScalarStep scale,
                                 const StridedView* mask, double value, int64_t dim, bool log,
                                 const StridedView* copy) {
    (void)out, (void)source, (void)scale, (void)mask, (void)value, (void)dim, (void)log, (void)copy;
    return false;
  }
  // grad_in = gradient of (log_)softmax given grad_out and the forward's output. The three share one dtype,
  // except that with a float32 output a float16 or bfloat16 grad_in is accepted (log_softmax's half_to_float
  // gradient; a gradient its one reader casts: each element as the float32 gradient's would be cast), and so
  // is a float16 or bfloat16 grad_out, read as its float32 copy would be (a cast left to this kernel).
  virtual void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output,
                                int64_t dim, bool log) = 0;

  // Batched matrix product as described (gemm_args.h): the op layer has chosen the layout and made every
  // copy (tensor/blas_plan.h), so a backend only computes.
  virtual void gemm(const GemmArgs& args) = 0;

  // out = in.index_select(dim, index): out's size at dim equals index's length (int64 indices).
  virtual void index_select(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) = 0;
  // out.index_add_(dim, index, source): out[.., index[i], ..] += source[.., i, ..].
  virtual void index_add(const StridedView& out, int64_t dim, const StridedView& index, const StridedView& source) = 0;
  // out[i][j] = in[i][index[i][j]] along dim (index int64, out has index's sizes).
  virtual void gather(const StridedView& out, const StridedView& in, int64_t dim, const StridedView& index) = 0;
  // out[i][index[i][j]] += source[i][j] along dim.
  virtual void scatter_add(const StridedView& out, int64_t dim, const StridedView& index,
                           const StridedView& source) = 0;
  // out[i][index[i][j]] = value along dim (scatter_ with a number; one_hot).
  virtual void scatter_fill(const StridedView& out, int64_t dim, const StridedView& index, double value) = 0;

  // out = the inclusive running sums of in along dim; out and in share sizes and dtype (the op converts first).
  virtual void cumsum(const StridedView& out, const StridedView& in, int64_t dim) = 0;
  // Sorts each slice of in along dim, stably (equal elements keep their order; NaN sorts above every number,
  // as PyTorch's), ascending or descending, and writes the first values.sizes[dim] of each: the values (in's
  // dtype) and their positions in the slice (indices, int64). sort writes all of them, topk its first k.
  virtual void sort(const StridedView& values, const StridedView& indices, const StridedView& in, int64_t dim,
                    bool descending) = 0;

  // masked_select: out (1-d) = the elements of in where mask (bool, in's sizes: the op broadcasts both) is
  // true, in row-major order; out holds exactly that many (the op counted them).
  virtual void masked_select(const StridedView& out, const StridedView& in, const StridedView& mask) = 0;
  // masked_scatter_: out[i] = source[k] for the k-th true mask[i] in row-major order; mask has out's sizes,
  // source (1-d, contiguous) holds at least as many elements as mask has true values.
  virtual void masked_scatter(const StridedView& out, const StridedView& mask, const StridedView& source) = 0;

  // out[i] = op(self[i], a[i], b[i], value) (TernaryOp); all four share out's sizes (stride 0 where
  // broadcast); out may alias self exactly (the in-place optimizer updates). Without `common` all four
  // share one floating dtype; with it (a floating type: result_type of self, a and b), each operand is read
  // in its own dtype, the op runs in `common` (its opmath) and the result is stored in out's dtype, as
  // PyTorch's TensorIterator does on CUDA (no converted copies).
  virtual void ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
                       const StridedView& b, double value, std::optional<ScalarType> common = std::nullopt) = 0;

  // Layer normalization of x (M, N), contiguous: per row, mean and rstd = 1 / sqrt(biased variance + eps)
  // (both (M), in the accumulation dtype: float32 for the 16/32-bit floats, float64 for float64), and
  // y (M, N) = (x - mean) * rstd * weight + bias (weight, bias (N) or nullptr). A mean whose data is null
  // asks for RMS normalization (PyTorch's _fused_rms_norm, which reuses layer_norm's kernels): rows of
  // rstd.numel(), no mean subtracted, rstd = 1 / sqrt(mean(x^2) + eps), no bias.
  virtual void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                          const StridedView* weight, const StridedView* bias, double eps) = 0;
  // Its gradient given dy (M, N) and the forward's x, mean, rstd, weight (each contiguous; nullptr where
  // absent or not wanted): dx (M, N); dweight_partials and dbias_partials are (R, N), row r holding the sum
  // over the rows m with m % R == r of dy * (x - mean) * rstd and of dy (R == 1: the whole gradient). A null
  // mean's data: the RMS gradient (mean taken as 0, dx without the mean(g) term, no bias partials).
  // `scratch`: memory the caller lends for the call (the cuBLAS workspace a product parked on this stream, or
  // none), where a backend may keep per-block partial sums of the weight and bias gradients while it writes
  // dx, instead of reading dy and x a second time; cpu and meta ignore it.
  virtual void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials,
                                   const StridedView* dbias_partials, const StridedView& dy, const StridedView& x,
                                   const StridedView& mean, const StridedView& rstd, const StridedView* weight,
                                   DeviceScratch scratch) = 0;
  // out = in with the elements outside a triangle of the last two dims zeroed: kept where j - i >= diagonal
  // (upper) or j - i <= diagonal (lower); out and in share sizes (at least 2-d).
  virtual void triangle(const StridedView& out, const StridedView& in, int64_t diagonal, bool upper) = 0;

  // Negative log-likelihood (PyTorch's nll_loss_forward). log_probs is (N, C) or (C); target (int64) is (N)
  // or () to match; weight, when not null, is (C) in log_probs' dtype, contiguous: target t counts weight[t]
  // (1 without weights). output is (N) for Reduction::none with a 2-d input (-weight[t] * log_probs[i][t]),
  // else 0-d; total_weight is 0-d, log_probs' dtype: the sum of the weights of the targets not equal to
  // ignore_index (0 for none). mean divides by total_weight (0 / 0 = NaN when every target is ignored). A target
  // outside [0, C) that is not ignore_index is an error (cpu: std::out_of_range; cuda: the output becomes NaN, where
  // PyTorch raises a device-side assert).
  virtual void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
                        const StridedView& target, Reduction reduction, int64_t ignore_index,
                        const StridedView* weight) = 0;
  // Writes grad_input[i][target[i]] = -weight[t] * grad (grad = grad_output[i] for none, grad_output /
  // total_weight for mean, grad_output for sum; weight[t] = 1 without weights) for every non-ignored target;
  // grad_input ((N, C) or (C)) must already be zero everywhere else.
  virtual void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output,
                                 const StridedView& target, const StridedView& total_weight, Reduction reduction,
                                 int64_t ignore_index, const StridedView* weight) = 0;

  // out[i][target[i]] = in[i][target[i]], converted, for each row i whose target is in [0, C) and not
  // ignore_index; out's other elements may be left unwritten. For a cast whose only reader is nll_loss (which
  // reads those elements and no others: tensor/ops_loss.cpp). out and in are (N, C) of floating dtypes,
  // target (N) int64 and contiguous. By default the whole cast (a backend without a kernel for it).
  virtual void cast_target_elements(const StridedView& out, const StridedView& in, const StridedView& target,
                                    int64_t ignore_index) {
    (void)target;
    (void)ignore_index;
    copy(out, in);
  }

  // nll_loss_backward for a gradient whose one reader is a cast (tensor/gradient_reader.h), where
  // packs_nll_rows(): instead of the element of each row that nll_loss_backward writes into a zeroed
  // grad_input, writes into grad_input's first bytes each row's column (int64; -1 for a row left zero:
  // an ignored target), then each row's value (grad_input's dtype, the element's). grad_input is (N, C),
  // contiguous, with C * element size >= 8 + element size; the other operands as nll_loss_backward's.
  virtual bool packs_nll_rows() const { return false; }
  virtual void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output,
                                      const StridedView& target, const StridedView& total_weight, Reduction reduction,
                                      int64_t ignore_index, const StridedView* weight) {
    (void)grad_input, (void)grad_output, (void)target, (void)total_weight, (void)reduction, (void)ignore_index,
        (void)weight;
    throw std::logic_error("nll_loss_backward_rows: this backend does not pack rows");
  }
  // The cast of such a gradient: out ((N, C), contiguous, a floating dtype) zero but each row's column,
  // which takes the row's value converted to out's dtype; `packed` is the gradient nll_loss_backward_rows
  // wrote ((N, C) of the value's dtype).
  virtual void cast_nll_rows(const StridedView& out, const StridedView& packed) {
    (void)out, (void)packed;
    throw std::logic_error("cast_nll_rows: this backend does not pack rows");
  }

  // Scaled dot-product attention as the fused backends compute it (tensor/ops_attention.cpp): for every
  // (b, h) and query row i, the scores s_ij = scale * q_i . k_j over the keys the row may see (causal: j <= i,
  // aligned top-left as PyTorch's is_causal), a softmax over them, out_i = sum_j softmax_ij v_j and
  // lse_i = log(sum_j exp(s_ij)). q (B, H, Sq, D), k (B, H, Sk, D), v (B, H, Sk, Dv), out (B, H, Sq, Dv):
  // one floating dtype, any strides with the last dimension contiguous (stride 1); lse (B, H, Sq), any
  // strides, float32 (float64 for float64 inputs). Softmax and sums in float32 or wider (the 16-bit floats
  // accumulate in float32). lse may be nullptr (not wanted: no gradient will be computed). No scratch memory:
  // the op layer allocates PyTorch's blocks.
  virtual void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q,
                                 const StridedView& k, const StridedView& v, double scale, bool is_causal,
                                 const AttentionExtras& extras) = 0;
  // Its gradient, the probabilities recomputed from the saved lse: given dout (out's sizes, last dimension
  // contiguous) and the forward's q, k, v, out and lse, writes dq, dk, dv (the inputs' sizes and dtype, any
  // strides with the last dimension contiguous). delta_i = dout_i . out_i; ds_ij = p_ij (dout_i . v_j -
  // delta_i); dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i.
  // `scratch`: the workspace the op layer allocated as PyTorch's backend does (cuDNN's holds a float dQ
  // accumulator and the per-row delta), which the kernel may use for the call's duration; empty when none.
  virtual void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                                  const StridedView& dout, const StridedView& q, const StridedView& k,
                                  const StridedView& v, const StridedView& out, const StridedView& lse, double scale,
                                  bool is_causal, DeviceScratch scratch, const AttentionExtras& extras) = 0;

 protected:
  // The transfers themselves, called by copy_from_host/copy_to_host once the buffer's size is checked:
  // `host` holds exactly the view's elements, contiguously.
  virtual void copy_from_host_unchecked(const StridedView& dst, const void* host) = 0;
  virtual void copy_to_host_unchecked(void* host, const StridedView& src) = 0;
};

// The kernels that compute on `device`: cpu and sim share the CPU backend; meta's computes nothing; cuda's
// uses the GPU. Ops call tensor/device_backend.h's backend_for, which also notes the CUDA driver's
// allocations PyTorch's kernel launches make; kernels only compute.
KernelBackend& kernel_backend(Device device);

}  // namespace bytegrad
