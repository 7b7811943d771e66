// A matrix product as cuBLAS takes it, complete: the op layer (tensor/blas_plan.h) decides the layout,
// makes PyTorch's copies and obtains the workspace; backends only compute.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytegrad/core/device.h"
#include "bytegrad/core/scalar_type.h"

namespace bytegrad {

// Whose cuBLAS handle, and so whose workspace, a product runs on: PyTorch keeps one handle per thread, and
// CUDA backward runs on the autograd engine's device thread (see tensor/blas_workspace.h).
enum class BlasHandleOwner : uint8_t { calling_thread, autograd_device_thread };

// For each of `batches` products: C = alpha * op(A) op(B) + beta * C, with op(A) m x k, op(B) k x n and C
// m x n, column-major: element (i, j) of a stored matrix is at data[i + j * ld], and op(X) is X^T when
// transX (X is then stored k x m, resp. n x k). Batch t's matrices start t * stride_* elements after batch
// 0's (0: one matrix for every batch). m, n, k >= 1 (empty products never reach a backend); leading
// dimensions are valid for cuBLAS even where a size of 1 leaves them unused. beta == 0 ignores C's values.
struct GemmArgs {
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batches = 1;
  ScalarType dtype = ScalarType::float32;
  double alpha = 1.0, beta = 0.0;
  Device device;
  // cuda only: the workspace to give the handle (nullptr for none) and whose handle to use.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  BlasHandleOwner handle_owner = BlasHandleOwner::calling_thread;
  // The bias epilogue (addmm's cuBLASLt path, PyTorch's gemm_and_bias): when set, C = alpha * op(A) op(B) +
  // bias, bias holding m values of the dtype, bias[i] added to row i of every column; beta is then 0 and
  // batches 1. lt_workspace is the cuBLASLt workspace the op layer obtained for it (cuda).
  const void* bias = nullptr;
  void* lt_workspace = nullptr;
  size_t lt_workspace_bytes = 0;
};

}  // namespace bytegrad
