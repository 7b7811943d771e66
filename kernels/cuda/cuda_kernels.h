// The interface between the cuda backend (C++20, compiled by the host compiler) and its kernels (.cu,
// compiled by nvcc as C++17, which cannot include memory/device.h). Everything here is plain C++17: a view
// type mirroring StridedView and enums mirroring backend.h's, converted in cuda_backend.cpp.
//
// Every launcher runs on the default stream (0), on the device that is current: the backend sets it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/scalar_type.h"

namespace bytegrad::cuda {

// Kernels index at most this many dimensions after merging adjacent ones (see coalesce_dims); views with
// more irreducible dimensions are rejected with std::invalid_argument.
inline constexpr int kMaxDims = 8;

// A tensor as the kernels see it: StridedView without the Device (which needs C++20).
struct CudaView {
  void* data = nullptr;  // element 0
  ScalarType dtype = ScalarType::float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
      if (sizes[d] != 1 && strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
};

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

// Mirrors of backend.h's enums (same enumerators, same order).
enum class UnaryOp { neg, abs, exp, log, sqrt, relu, sigmoid, tanh, gelu, logical_not };
enum class BinaryOp {
  add, sub, mul, div, pow, maximum, minimum,
  eq, ne, lt, le, gt, ge,
  logical_and, logical_or,
  relu_backward, sigmoid_backward, tanh_backward, gelu_backward,
};
enum class ReduceOp { sum, mean, prod, max, min, argmax, argmin, norm, var, std };
enum class Reduction { none = 0, mean = 1, sum = 2 };
enum class TernaryOp { lerp, addcmul, addcdiv };

// ---- cuda_elementwise.cu
void fill(const CudaView& out, double value);
void arange(const CudaView& out, double start, double step);
void copy(const CudaView& dst, const CudaView& src);
void unary(UnaryOp op, const CudaView& out, const CudaView& in);
void binary(BinaryOp op, const CudaView& out, const CudaView& a, const CudaView& b, double alpha);
void binary_scalar(BinaryOp op, const CudaView& out, const CudaView& a, double scalar, bool scalar_first);
void where(const CudaView& out, const CudaView& cond, const CudaView& a, const CudaView& b);
void masked_fill(const CudaView& out, const CudaView& mask, double value);

// ---- cuda_reduce.cu
void reduce(ReduceOp op, const CudaView& out, const CudaView& in);
// out = sum((x - mean)^2) / max(0, n - correction) over the reduced dims (sqrt when take_sqrt); floats only.
void reduce_variance(const CudaView& out, const CudaView& in, double correction, bool take_sqrt);
void reduce_with_indices(ReduceOp op, const CudaView& values, const CudaView& indices, const CudaView& in,
                         int64_t dim);

// ---- cuda_softmax.cu
void softmax(const CudaView& out, const CudaView& in, int64_t dim, bool log);
void softmax_backward(const CudaView& grad_in, const CudaView& grad_out, const CudaView& output, int64_t dim,
                      bool log);

// ---- cuda_index.cu
void index_select(const CudaView& out, const CudaView& in, int64_t dim, const CudaView& index);
void index_add(const CudaView& out, int64_t dim, const CudaView& index, const CudaView& source);
void gather(const CudaView& out, const CudaView& in, int64_t dim, const CudaView& index);
void scatter_add(const CudaView& out, int64_t dim, const CudaView& index, const CudaView& source);

// ---- cuda_ternary.cu
void ternary(TernaryOp op, const CudaView& out, const CudaView& self, const CudaView& a, const CudaView& b,
             double value);

// ---- cuda_layer_norm.cu (contiguous operands; optional ones nullptr where absent)
void layer_norm(const CudaView& y, const CudaView& mean, const CudaView& rstd, const CudaView& x,
                const CudaView* weight, const CudaView* bias, double eps);
void layer_norm_backward(const CudaView* dx, const CudaView* dweight_partials, const CudaView* dbias_partials,
                         const CudaView& dy, const CudaView& x, const CudaView& mean, const CudaView& rstd,
                         const CudaView* weight);

// ---- cuda_triangle.cu
void triangle(const CudaView& out, const CudaView& in, int64_t diagonal, bool upper);

// ---- cuda_loss.cu
void nll_loss(const CudaView& output, const CudaView& total_weight, const CudaView& log_probs, const CudaView& target,
              Reduction reduction, int64_t ignore_index);
void nll_loss_backward(const CudaView& grad_input, const CudaView& grad_output, const CudaView& target,
                       const CudaView& total_weight, Reduction reduction, int64_t ignore_index);

}  // namespace bytegrad::cuda
