#include "bytegrad/tensor/blas_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/blas_workspace.h"

namespace bytegrad {

namespace {

// cuBLAS has no integer GEMM (PyTorch: "addmm_cuda" not implemented for 'Long'): rejected before any
// copy or workspace. The CPU backend multiplies integers too.
void check_dtype(const Tensor& out) {
  if (out.device().type == DeviceType::cuda && !is_floating_point(out.dtype()))
    throw std::invalid_argument(
        fmt::format("matrix products on cuda support float32, float64, float16 and bfloat16, "
                    "not {}",
                    scalar_type_name(out.dtype())));
}

// A tensor of t's sizes laid out with `strides`, holding t's values when copy_values (a result that
// beta == 0 ignores need not be copied).
Tensor copy_with_strides(const Tensor& t, const Shape& strides, bool copy_values) {
  Tensor copy = empty_strided(t.sizes(), strides, TensorOptions{t.dtype(), t.device()});
  if (copy_values) backend_for(t.device()).copy(copy.view_for_kernels(), t.view_for_kernels());
  return copy;
}

// A matrix as cuBLAS reads it: the tensor or its copy, and whether it is row-major (passed transposed).
struct PreparedMatrix {
  Tensor tensor;
  bool transpose = false;
};

// prepare_matrix_for_cublas (the result's copy keeps its values only when beta needs them).
PreparedMatrix prepare_matrix(const Tensor& m, bool copy_values = true) {
  const Shape& sz = m.sizes();
  const Shape& st = m.strides();
  if (is_non_overlapping_and_dense(sz, st)) return {m, m.is_contiguous()};
  if (st[0] == 1 && st[1] >= std::max<int64_t>(1, sz[0])) return {m, false};
  if (st[1] == 1 && st[0] >= std::max<int64_t>(1, sz[1])) return {m, true};
  return {copy_values ? m.clone() : copy_with_strides(m, contiguous_strides(sz), false), true};
}

// prepare_batch_matrix_for_cublas for a (B, R, C) operand, with m and n as PyTorch passes them.
struct PreparedBatch {
  Tensor tensor;
  bool transpose = false;
  int64_t ld = 0;
};

PreparedBatch prepare_batch_matrix(const Tensor& t, bool transpose_result, int64_t m, int64_t n) {
  const int fast_dim = transpose_result ? 2 : 1;
  const int leading_dim = transpose_result ? 1 : 2;
  const Shape& st = t.strides();
  if (st[fast_dim] == 1 && st[leading_dim] >= std::max<int64_t>(1, m)) return {t, false, st[leading_dim]};
  if (st[leading_dim] == 1 && st[fast_dim] >= std::max<int64_t>(1, n)) return {t, true, st[fast_dim]};
  Tensor prepared = (t.is_contiguous() && st[1] != 0 && st[2] != 0) ? t : t.clone();
  const int64_t ld = prepared.strides()[1];
  return {std::move(prepared), !transpose_result, ld};
}

// PyTorch's _cublasAdjustLdLevel3: cuBLAS checks leading dimensions even where a size of 1 makes them
// meaningless, so those get the smallest valid value.
void adjust_leading_dimensions(GemmArgs& g) {
  if (g.n <= 1) g.ldc = std::max<int64_t>(g.m, 1);
  if (g.transa) {
    if (g.m <= 1) g.lda = std::max<int64_t>(g.k, 1);
  } else if (g.k <= 1) {
    g.lda = std::max<int64_t>(g.m, 1);
  }
  if (g.transb) {
    if (g.k <= 1) g.ldb = std::max<int64_t>(g.n, 1);
  } else if (g.n <= 1) {
    g.ldb = std::max<int64_t>(g.k, 1);
  }
}

}  // namespace

GemmPlan GemmPlan::matrix(const Tensor& out, const Tensor& mat1, const Tensor& mat2, double alpha, double beta) {
  check_dtype(out);
  GemmPlan plan;
  plan.out_ = out;
  PreparedMatrix result = prepare_matrix(out, /*copy_values=*/beta != 0.0);
  const bool transpose_result = result.transpose;
  PreparedMatrix mata = prepare_matrix(transpose_result ? mat2 : mat1);
  PreparedMatrix matb = prepare_matrix(transpose_result ? mat1 : mat2);
  GemmArgs& g = plan.args_;
  g.transa = mata.transpose != transpose_result;
  g.transb = matb.transpose != transpose_result;
  g.m = mata.tensor.sizes()[transpose_result ? 1 : 0];
  g.k = mata.tensor.sizes()[transpose_result ? 0 : 1];
  g.n = matb.tensor.sizes()[transpose_result ? 0 : 1];
  g.a = mata.tensor.data_ptr();
  g.lda = mata.tensor.strides()[g.transa == transpose_result ? 1 : 0];
  g.b = matb.tensor.data_ptr();
  g.ldb = matb.tensor.strides()[g.transb == transpose_result ? 1 : 0];
  g.c = result.tensor.data_ptr();
  g.ldc = result.tensor.strides()[transpose_result ? 0 : 1];
  plan.finish_args(alpha, beta);
  plan.result_is_copy_ = result.tensor.impl_ptr() != out.impl_ptr();
  plan.result_transposed_ = transpose_result;
  plan.free_result_after_copy_ = true;  // cublasCommonArgs frees its result copy first
  plan.result_ = std::move(result.tensor);
  plan.first_ = std::move(mata.tensor);
  plan.second_ = std::move(matb.tensor);
  return plan;
}

GemmPlan GemmPlan::batched(const Tensor& out, const Tensor& batch1, const Tensor& batch2, double alpha, double beta) {
  check_dtype(out);
  GemmPlan plan;
  plan.out_ = out;
  const Shape& rs = out.strides();
  const Shape& rz = out.sizes();
  bool transpose_result = false;
  if (rs[1] == 1 && (rz[2] == 1 || rs[2] >= std::max<int64_t>(1, rz[1]))) {
    plan.result_ = out;
  } else if (rs[2] == 1 && (rz[1] == 1 || rs[1] >= std::max<int64_t>(1, rz[2]))) {
    transpose_result = true;
    plan.result_ = out;
  } else {  // result.transpose(1, 2).clone(contiguous).transpose(1, 2): column-major matrices
    plan.result_ = copy_with_strides(out, {rz[1] * rz[2], 1, std::max<int64_t>(rz[1], 1)}, beta != 0.0);
    plan.result_is_copy_ = true;
  }
  const int leading_dim = transpose_result ? 1 : 2;
  GemmArgs& g = plan.args_;
  g.m = rz[transpose_result ? 2 : 1];
  g.n = rz[leading_dim];
  g.k = (transpose_result ? batch2 : batch1).sizes()[leading_dim];
  PreparedBatch first = prepare_batch_matrix(transpose_result ? batch2 : batch1, transpose_result, g.m, g.k);
  PreparedBatch second = prepare_batch_matrix(transpose_result ? batch1 : batch2, transpose_result, g.k, g.n);
  g.transa = first.transpose;
  g.a = first.tensor.data_ptr();
  g.lda = first.ld;
  g.stride_a = first.tensor.strides()[0];
  g.transb = second.transpose;
  g.b = second.tensor.data_ptr();
  g.ldb = second.ld;
  g.stride_b = second.tensor.strides()[0];
  g.c = plan.result_.data_ptr();
  g.ldc = plan.result_.strides()[leading_dim];
  g.stride_c = plan.result_.strides()[0];
  g.batches = rz[0];
  plan.finish_args(alpha, beta);
  plan.first_ = std::move(first.tensor);
  plan.second_ = std::move(second.tensor);
  return plan;
}

void GemmPlan::finish_args(double alpha, double beta) {
  args_.dtype = out_.dtype();
  args_.device = out_.device();
  args_.alpha = alpha;
  args_.beta = beta;
  adjust_leading_dimensions(args_);
}

void GemmPlan::attach_workspace() {
  const BlasWorkspace workspace = blas_workspace(args_.device);
  args_.workspace = workspace.data;
  args_.workspace_bytes = workspace.bytes;
  args_.handle_owner = current_blas_handle_owner();
}

bool GemmPlan::fuse_bias(const Tensor& bias, void* lt_workspace, size_t lt_workspace_bytes) {
  if (result_is_copy_ || !result_transposed_ || args_.batches != 1 || args_.beta != 1.0) return false;
  if (bias.dim() != 1 || bias.numel() != args_.m || !bias.is_contiguous() || bias.dtype() != args_.dtype ||
      bias.device() != args_.device)
    return false;
  bias_ = bias;
  args_.bias = bias.data_ptr();
  args_.beta = 0.0;
  args_.lt_workspace = lt_workspace;
  args_.lt_workspace_bytes = lt_workspace_bytes;
  return true;
}

void GemmPlan::run() {
  backend_for(args_.device).gemm(args_);
  if (!result_is_copy_) return;
  backend_for(args_.device).copy(out_.view_for_kernels(), result_.view_for_kernels());
  if (free_result_after_copy_) result_ = Tensor();
}

void gemm_into(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  if (out.dim() != 3 || a.dim() != 3 || b.dim() != 3)
    throw std::invalid_argument("gemm_into takes (B, M, K) @ (B, K, N) -> (B, M, N)");
  const int64_t batches = out.sizes()[0], M = out.sizes()[1], N = out.sizes()[2], K = a.sizes()[2];
  if (a.sizes()[0] != batches || b.sizes()[0] != batches || a.sizes()[1] != M || b.sizes()[1] != K || b.sizes()[2] != N)
    throw std::invalid_argument("gemm_into: operand shapes do not match");
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype() || a.device() != out.device() || b.device() != out.device())
    throw std::invalid_argument("gemm_into: operands and output must share one dtype and device");
  check_dtype(out);
  without_recording([&] {
    // As PyTorch before it touches cuBLAS: no copies, no workspace.
    if (out.numel() == 0) return;
    KernelBackend& backend = backend_for(out.device());
    if (K == 0) {
      if (beta == 0.0) backend.fill(out.view_for_kernels(), 0.0);
      else backend.binary_scalar(BinaryOp::mul, out.view_for_kernels(), out.view_for_kernels(), beta, false);
      return;
    }
    GemmPlan plan = batches == 1 ? GemmPlan::matrix(out.select(0, 0), a.select(0, 0), b.select(0, 0), alpha, beta)
                                 : GemmPlan::batched(out, a, b, alpha, beta);
    plan.attach_workspace();
    plan.run();
  });
}

}  // namespace bytegrad
