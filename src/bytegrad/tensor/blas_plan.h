// PyTorch 2.11's cuBLAS operand rules, written once and followed on every device: which operands of a
// matrix product are copied (so the same allocations, in the same order, as PyTorch on a GPU), and the
// column-major description (GemmArgs) the backend then computes.
//
// cuBLAS is column-major: a row-major result C (M x N) is, read column-major, C^T (N x M), so it is
// computed as C^T = B^T A^T; the operands swap places and each is passed "as is" when row-major, or with
// its transpose flag when column-major. Every matrix needs one unit stride and a leading stride of at least
// the other extent; one with neither layout is first copied, exactly where PyTorch clones:
//   - matrix (addmm/mm, cublasCommonArgs with prepare_matrix_for_cublas): a dense operand is used in place
//     whatever its order; otherwise stride 1 in one dimension and a leading stride >= the other size, else
//     a contiguous clone. The result is prepared the same way and copied back after.
//   - batched (baddbmm/bmm, prepare_batch_matrix_for_cublas): the same stride tests on the inner two
//     dimensions, with sizes 1 excused for the result; any single batch stride (0 for a broadcast operand).
//     A result with neither layout is computed in a column-major temporary.
// Order: the result's copy, then the operands' (the one cuBLAS reads as A first), then, when the caller
// attaches it, the cuBLAS workspace (allocated by a thread's first product on the device). The copies go
// with the plan: matrix frees its result copy right after copying back, then B's and A's; batched frees
// B's, A's, then the result copy.
#pragma once

#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

class GemmPlan {
 public:
  // out (M, N) = alpha * mat1 (M, K) @ mat2 (K, N) + beta * out: the matrix rule. K >= 1 and out not empty.
  static GemmPlan matrix(const Tensor& out, const Tensor& mat1, const Tensor& mat2, double alpha, double beta);
  // out (B, M, N) = alpha * batch1 (B, M, K) @ batch2 (B, K, N) + beta * out: the batched rule. K >= 1 and
  // out not empty.
  static GemmPlan batched(const Tensor& out, const Tensor& batch1, const Tensor& batch2, double alpha, double beta);

  // Names this thread's BLAS workspace for the device in the description, allocating it on first use.
  void attach_workspace();
  // addmm's fused bias (PyTorch's cuBLASLt gemm_and_bias): when the result is computed in place as the
  // transposed (row-major) output, so that cuBLAS's m runs along the bias, the backend adds `bias` in the
  // product's epilogue (beta becomes 0) with the cuBLASLt workspace `lt`; returns false, changing nothing,
  // otherwise (the caller then copies the bias into the output first, as the unfused path does).
  bool fuse_bias(const Tensor& bias, void* lt_workspace, size_t lt_workspace_bytes);
  // The backend computes; a result copy is then copied into the output.
  void run();

  const GemmArgs& args() const { return args_; }

 private:
  void finish_args(double alpha, double beta);

  GemmArgs args_;
  bool result_is_copy_ = false;
  bool free_result_after_copy_ = false;
  bool result_transposed_ = false;  // matrix rule: cuBLAS computes the row-major result as C^T
  Tensor bias_;                     // fuse_bias's operand, kept until the plan is done
  // Destroyed in reverse: the operands (B's copy, then A's), then the result copy.
  Tensor out_;
  Tensor result_;  // what cuBLAS writes: out_, or a copy of it
  Tensor first_;   // A as cuBLAS reads it (the tensor, or its copy)
  Tensor second_;  // B
};

// out = alpha * a @ b + beta * out for (B, M, K) @ (B, K, N) into any (B, M, N) view of one device and
// dtype: B == 1 follows addmm_out (the matrix rule), B > 1 baddbmm_out (the batched rule). Empty products
// return, and K == 0 scales out by beta (zeroes it for beta 0), before any copy or workspace.
void gemm_into(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta);

}  // namespace bytegrad
