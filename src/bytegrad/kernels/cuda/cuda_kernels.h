// The cuda backend's kernel launchers (the .cu files), which take backend.h's views and op enums as they
// are: nvcc compiles C++20 (CMAKE_CUDA_STANDARD), so the kernels include the real headers.
//
// Every launcher runs on the default stream (0), on the device that is current: the backend sets it.
#pragma once

#include <cstdint>
#include <vector>

#include "bytegrad/kernels/backend.h"

namespace bytegrad::cuda {

// Kernels index at most this many dimensions after merging adjacent ones (see coalesce_dims); views with
// more irreducible dimensions are rejected with std::invalid_argument.
inline constexpr int kMaxDims = 8;

// Merges dimensions so fewer remain, for every operand at once: drops size-1 dimensions and joins a
// dimension with the next inner one wherever each operand steps over it exactly by the inner extent.
// Row-major order of the elements is preserved, so a linear index means the same element before and
// after. `strides[k]` is operand k's strides; all are rewritten in place along with `sizes`.
inline void coalesce_dims(std::vector<int64_t>& sizes, std::vector<std::vector<int64_t>>& strides) {
  std::vector<int64_t> out_sizes;
  std::vector<std::vector<int64_t>> out_strides(strides.size());
  for (size_t d = sizes.size(); d-- > 0;) {  // innermost first
    if (sizes[d] == 1) continue;
    bool mergeable = !out_sizes.empty();
    for (size_t k = 0; mergeable && k < strides.size(); ++k)
      mergeable = strides[k][d] == out_strides[k].back() * out_sizes.back();
    if (mergeable) {
      out_sizes.back() *= sizes[d];
    } else {
      out_sizes.push_back(sizes[d]);
      for (size_t k = 0; k < strides.size(); ++k) out_strides[k].push_back(strides[k][d]);
    }
  }
  // Built innermost first; restore row-major order.
  sizes.assign(out_sizes.rbegin(), out_sizes.rend());
  for (size_t k = 0; k < strides.size(); ++k) strides[k].assign(out_strides[k].rbegin(), out_strides[k].rend());
}

// The launchers both backends have (cuda_elementwise.cu, cuda_reduce.cu, cuda_softmax.cu, cuda_index.cu,
// cuda_ternary.cu, cuda_layer_norm.cu with contiguous operands, cuda_triangle.cu, cuda_loss.cu, and the tiled
// online-softmax attention of cuda_attention.cu), declared in bytegrad::cuda.
#include "bytegrad/kernels/kernel_functions.h"

// ---- cuda_softmax.cu: a deferred gradient's chain from softmax's gradient in one pass
// (KernelBackend::softmax_backward_then), where the kernel takes the operands: a float32 output, grad_out
// float32 or 16-bit (a deferred cast's source), out float32 or 16-bit, rows contiguous along dim and at most 1024 long,
// a mul or div by a number (or none) last.
bool softmax_backward_chain_fits(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                                 int64_t dim, const ScalarStep* then);
void softmax_backward_then(const StridedView& out, const StridedView& grad_out, const StridedView& output, int64_t dim,
                           const StridedView* mask, double value, const ScalarStep* then);
// ---- cuda_softmax.cu: softmax of a pending chain's scores in one kernel (KernelBackend::softmax_of_scaled):
// float32 or 16-bit source, out its dtype or float32, a mul or div, a bool mask, rows of 513 to 1024 in whole
// aligned 16-byte runs; a 16-bit copy of a float32 out beside it (contiguous, aligned as out's vectors).
bool softmax_of_scaled_fits(const StridedView& out, const StridedView& source, ScalarStep scale,
                            const StridedView* mask, int64_t dim, const StridedView* copy);
void softmax_of_scaled(const StridedView& out, const StridedView& source, ScalarStep scale, const StridedView* mask,
                       double value, int64_t dim, bool log, const StridedView* copy);
// ---- cuda_elementwise.cu: masked_fill and binary_scalar in one pass (KernelBackend::masked_fill_then_scalar)
void masked_fill_then_scalar(BinaryOp op, const StridedView& out, const StridedView& src, const StridedView& mask,
                             double value, double scalar);

// ---- cuda_elementwise.cu: multi-tensor launches (KernelBackend::begin_foreach / end_foreach)
// Between foreach_begin() and foreach_end() on a thread, unary, binary_scalar and ternary calls whose
// operands are contiguous, of one floating dtype and of the output's dtype are queued instead of launched;
// foreach_flush() (at foreach_end(), and before any other call of the backend) launches the queue in
// order, consecutive calls of the same op and dtype together: one launch for up to kForeachTensors tensors,
// each with its own scalar, as PyTorch's multi_tensor_apply; and consecutive such launches over lists whose
// k-th tensors are the same ones (an optimizer's update) as one pass that loads and stores each tensor
// once, applying every op in order with the same rounding. Nothing is allocated.
inline constexpr int kForeachTensors = 48;
void foreach_begin();
void foreach_end();
bool foreach_pending();
void foreach_flush();
// Queue the call (true) when a batch is open and the call qualifies; false: run it now.
bool foreach_enqueue_unary(UnaryOp op, const StridedView& out, const StridedView& in);
bool foreach_enqueue_binary_scalar(BinaryOp op, const StridedView& out, const StridedView& a, double scalar,
                                   bool scalar_first);
bool foreach_enqueue_ternary(TernaryOp op, const StridedView& out, const StridedView& self, const StridedView& a,
                             const StridedView& b, double value);

// ---- cuda_amp.cu (backend.h's GradScaler kernels)
void amp_non_finite_check_and_unscale(const StridedView& grad, const StridedView& found_inf,
                                      const StridedView& inv_scale);
void amp_update_scale(const StridedView& scale, const StridedView& growth_tracker, const StridedView& found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval);

// ---- cuda_loss.cu (backend.h's cast_target_elements: the elements nll_loss reads of a cast)
void cast_target_elements(const StridedView& out, const StridedView& in, const StridedView& target,
                          int64_t ignore_index);

// ---- cuda_layer_norm.cu: backend.h's layer_norm_backward; with scratch of enough bytes and rows of at most
// 1024, one pass writes dx and per-block partial sums of the weight and bias gradients into the scratch,
// and a second kernel sums those in block order.
void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials, const StridedView* dbias_partials,
                         const StridedView& dy, const StridedView& x, const StridedView& mean, const StridedView& rstd,
                         const StridedView* weight, DeviceScratch scratch);

// ---- cuda_attention.cu
void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                        const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                        const StridedView& lse, double scale, bool is_causal, DeviceScratch scratch,
                        const AttentionExtras& extras);

// ---- cuda_attention_mma.cu (tensor cores; attention_forward/backward call these where eligible)
bool attention_uses_tensor_cores(ScalarType dtype, int64_t D, int64_t Dv);
void attention_forward_tensor_cores(const StridedView& out, const StridedView* lse, const StridedView& q,
                                    const StridedView& k, const StridedView& v, double scale, bool is_causal);
void attention_backward_tensor_cores(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                                     const StridedView& dout, const StridedView& q, const StridedView& k,
                                     const StridedView& v, const StridedView& out, const StridedView& lse, double scale,
                                     bool is_causal, DeviceScratch scratch);

}  // namespace bytegrad::cuda
