// Batched matrix products through cuBLAS, with PyTorch 2.11's layout rules so that the same operands
// cause the same temporary copies (and so the same allocations) as in PyTorch.
//
// Row-major vs column-major: cuBLAS is column-major. A row-major result C (M x N) is, read column-major,
// C^T (N x M), so it is computed as C^T = B^T A^T: the operands swap places and each is passed "as is"
// when row-major, or with its transpose flag when column-major. Every matrix operand needs one unit stride
// and a leading stride of at least the other extent; one that has neither layout is first copied to a
// contiguous temporary ("temporary" tag, freed before returning), exactly where PyTorch clones:
//   - B == 1 follows addmm/mm (cublasCommonArgs / prepare_matrix_for_cublas): a dense operand is used in
//     place whatever its order; otherwise stride 1 in one dimension and a leading stride >= the other
//     size, else a contiguous clone. The result is prepared the same way and copied back after.
//   - B > 1 follows baddbmm/bmm (prepare_batch_matrix_for_cublas): the same stride tests on the inner two
//     dimensions, with sizes 1 excused for the result; a batch may have any single batch stride (0 for a
//     broadcast operand). A result with neither layout is computed in a column-major temporary.
// Allocation order matches PyTorch's: result copy, then the operands, then (first product on a thread)
// the cuBLAS workspace; the copies are freed in reverse (operands, then the result after copying back).
//
// cuBLAS handle: one per thread, device and BlasHandleOwner, created on first use, bound to the default
// stream, with its workspace set to blas_workspace(device) before every call (the workspace can change after
// clear_blas_workspaces(), and cublasSetStream resets it). Handles are never destroyed: destroying them
// at thread exit can run after the CUDA runtime has shut down (PyTorch keeps them for the same reason).
//
// Math: float32 with cublasSgemm under CUBLAS_DEFAULT_MATH (no TF32, as PyTorch's default), float64 with
// cublasDgemm, float16/bfloat16 with cublasGemmEx and fp32 accumulation (CUBLAS_COMPUTE_32F).
#include "kernels/cuda/cuda_gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "memory/allocation_context.h"
#include "tensor/blas_workspace.h"
#include "tensor/storage.h"

namespace bytegrad::cuda {

namespace {

// ------------------------------------------------------------------------------------- cuBLAS handle

cublasHandle_t blas_handle(int device_index) {
  // One handle per device and owner, as PyTorch has one per thread: backward's products use the autograd
  // device thread's handle with that thread's workspace, so neither handle's workspace keeps changing.
  thread_local std::map<std::pair<int, BlasHandleOwner>, cublasHandle_t> handles;
  cublasHandle_t& handle = handles[{device_index, current_blas_handle_owner()}];
  if (!handle) BYTEGRAD_CUBLAS_CHECK(cublasCreate(&handle));
  BYTEGRAD_CUBLAS_CHECK(cublasSetStream(handle, 0));  // also resets the workspace: set ours after
  const BlasWorkspace workspace = blas_workspace(Device{DeviceType::cuda, device_index});
  BYTEGRAD_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace.data, workspace.bytes));
  BYTEGRAD_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  return handle;
}

// --------------------------------------------------------------------------------------- operands

// A matrix (or batch of matrices) as a view of its tensor's memory, possibly a temporary copy.
struct Operand {
  StridedView view;
  Storage temporary;  // set when `view` is a copy this function made

  int64_t size(int d) const { return view.sizes[d]; }
  int64_t stride(int d) const { return view.strides[d]; }
};

Operand borrowed(const StridedView& v) { return Operand{v, nullptr}; }

// A new allocation laid out with `strides` (a permutation of contiguous strides), holding a copy of
// `source`'s values when copy_values (PyTorch's clone). Tagged "temporary".
Operand temporary_copy(const StridedView& source, const std::vector<int64_t>& strides, bool copy_values) {
  Operand copy;
  {
    AllocationScope scope("temporary");
    copy.temporary = std::make_shared<StorageImpl>(static_cast<size_t>(source.numel()) * element_size(source.dtype),
                                                   source.device);
  }
  copy.view = StridedView{copy.temporary->data(), source.dtype, source.sizes, strides, source.device};
  if (copy_values) cuda::copy(copy.view, source);
  return copy;
}

Operand contiguous_clone(const StridedView& v, bool copy_values = true) {
  return temporary_copy(v, contiguous_strides(v.sizes), copy_values);
}

// The 2-D matrix of batch 0 of a (B, R, C) view.
StridedView matrix_of(const StridedView& v) {
  return StridedView{v.data, v.dtype, {v.sizes[1], v.sizes[2]}, {v.strides[1], v.strides[2]}, v.device};
}

// PyTorch's prepare_matrix_for_cublas (addmm path). transpose: whether the matrix is row-major-like.
Operand prepare_matrix(const StridedView& m, bool& transpose, bool copy_values = true) {
  if (m.is_non_overlapping_and_dense()) {
    transpose = m.is_contiguous();
    return borrowed(m);
  }
  const auto& sz = m.sizes;
  const auto& st = m.strides;
  if (st[0] == 1 && st[1] >= std::max<int64_t>(1, sz[0])) {
    transpose = false;
    return borrowed(m);
  }
  if (st[1] == 1 && st[0] >= std::max<int64_t>(1, sz[1])) {
    transpose = true;
    return borrowed(m);
  }
  transpose = true;
  return contiguous_clone(m, copy_values);
}

// PyTorch's prepare_batch_matrix_for_cublas (baddbmm path), for a (B, R, C) operand.
Operand prepare_batch_matrix(const StridedView& t, bool& transpose, int64_t& ld, bool transpose_result, int64_t m,
                             int64_t n) {
  const int fast_dim = transpose_result ? 2 : 1;
  const int leading_dim = transpose_result ? 1 : 2;
  const auto& st = t.strides;
  if (st[fast_dim] == 1 && st[leading_dim] >= std::max<int64_t>(1, m)) {
    transpose = false;
    ld = st[leading_dim];
    return borrowed(t);
  }
  if (st[leading_dim] == 1 && st[fast_dim] >= std::max<int64_t>(1, n)) {
    transpose = true;
    ld = st[fast_dim];
    return borrowed(t);
  }
  transpose = !transpose_result;
  Operand prepared = (t.is_contiguous() && st[1] != 0 && st[2] != 0) ? borrowed(t) : contiguous_clone(t);
  ld = prepared.stride(1);
  return prepared;
}

// ------------------------------------------------------------------------------------------ cuBLAS

struct GemmCall {
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batches = 1;
};

// PyTorch's _cublasAdjustLdLevel3: cuBLAS checks leading dimensions even where a size of 1 makes them
// meaningless, so give those the smallest valid value.
void adjust_leading_dimensions(GemmCall& g) {
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

int as_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw std::invalid_argument(std::string("cuda backend: gemm: ") + what + " = " + std::to_string(value) +
                                " is outside cuBLAS's int range");
  return static_cast<int>(value);
}

cudaDataType_t cuda_data_type(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float16: return CUDA_R_16F;
    case ScalarType::bfloat16: return CUDA_R_16BF;
    case ScalarType::float32: return CUDA_R_32F;
    case ScalarType::float64: return CUDA_R_64F;
    default: throw std::invalid_argument("cuda backend: gemm supports float32, float64, float16 and bfloat16, not " +
                                         std::string(scalar_type_name(dtype)));
  }
}

void run_gemm(GemmCall g, ScalarType dtype, double alpha, double beta, int device_index) {
  adjust_leading_dimensions(g);
  const cudaDataType_t type = cuda_data_type(dtype);
  const int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  const int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb"), ldc = as_int(g.ldc, "ldc");
  const int batches = as_int(g.batches, "batch count");
  const cublasOperation_t opa = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t handle = blas_handle(device_index);  // after the copies: PyTorch allocates the workspace here too

  if (dtype == ScalarType::float64) {
    const double a64 = alpha, b64 = beta;
    const auto* A = static_cast<const double*>(g.a);
    const auto* B = static_cast<const double*>(g.b);
    auto* C = static_cast<double*>(g.c);
    if (batches == 1)
      BYTEGRAD_CUBLAS_CHECK(cublasDgemm(handle, opa, opb, m, n, k, &a64, A, lda, B, ldb, &b64, C, ldc));
    else
      BYTEGRAD_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, opa, opb, m, n, k, &a64, A, lda, g.stride_a, B, ldb,
                                                      g.stride_b, &b64, C, ldc, g.stride_c, batches));
    return;
  }
  const float a32 = static_cast<float>(alpha), b32 = static_cast<float>(beta);  // fp32 math for 16-bit types too
  if (dtype == ScalarType::float32) {
    const auto* A = static_cast<const float*>(g.a);
    const auto* B = static_cast<const float*>(g.b);
    auto* C = static_cast<float*>(g.c);
    if (batches == 1)
      BYTEGRAD_CUBLAS_CHECK(cublasSgemm(handle, opa, opb, m, n, k, &a32, A, lda, B, ldb, &b32, C, ldc));
    else
      BYTEGRAD_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, opa, opb, m, n, k, &a32, A, lda, g.stride_a, B, ldb,
                                                      g.stride_b, &b32, C, ldc, g.stride_c, batches));
    return;
  }
  if (batches == 1)
    BYTEGRAD_CUBLAS_CHECK(cublasGemmEx(handle, opa, opb, m, n, k, &a32, g.a, type, lda, g.b, type, ldb, &b32, g.c, type,
                                       ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
  else
    BYTEGRAD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, opa, opb, m, n, k, &a32, g.a, type, lda, g.stride_a, g.b,
                                                     type, ldb, g.stride_b, &b32, g.c, type, ldc, g.stride_c, batches,
                                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

// ---------------------------------------------------------------------------------------- the paths

// B == 1: PyTorch's addmm_out_cuda_impl with cublasCommonArgs.
void matrix_product(const StridedView& out, const StridedView& a, const StridedView& b, double alpha, double beta) {
  const StridedView c2 = matrix_of(out), a2 = matrix_of(a), b2 = matrix_of(b);
  bool transpose_result = false, transpose_a = false, transpose_b = false;
  Operand result = prepare_matrix(c2, transpose_result, /*copy_values=*/beta != 0.0);
  Operand mata = prepare_matrix(transpose_result ? b2 : a2, transpose_a);
  Operand matb = prepare_matrix(transpose_result ? a2 : b2, transpose_b);
  if (transpose_result) {
    transpose_a = !transpose_a;
    transpose_b = !transpose_b;
  }
  GemmCall g;
  g.transa = transpose_a;
  g.transb = transpose_b;
  g.m = mata.size(transpose_result ? 1 : 0);
  g.k = mata.size(transpose_result ? 0 : 1);
  g.n = matb.size(transpose_result ? 0 : 1);
  g.a = mata.view.data;
  g.lda = mata.stride(transpose_a == transpose_result ? 1 : 0);
  g.b = matb.view.data;
  g.ldb = matb.stride(transpose_b == transpose_result ? 1 : 0);
  g.c = result.view.data;
  g.ldc = result.stride(transpose_result ? 0 : 1);
  run_gemm(g, out.dtype, alpha, beta, out.device.index);
  if (result.temporary) {
    cuda::copy(c2, result.view);
    result = Operand{};  // PyTorch's cublasCommonArgs frees its result copy first, then matb, then mata
  }
  matb = Operand{};
  mata = Operand{};
}

// B > 1: PyTorch's baddbmm_out_cuda_impl.
void batched_product(const StridedView& out, const StridedView& a, const StridedView& b, double alpha, double beta) {
  const auto& rs = out.strides;
  const auto& rz = out.sizes;
  bool transpose_result = false;
  Operand result;
  if (rs[1] == 1 && (rz[2] == 1 || rs[2] >= std::max<int64_t>(1, rz[1]))) {
    result = borrowed(out);
  } else if (rs[2] == 1 && (rz[1] == 1 || rs[1] >= std::max<int64_t>(1, rz[2]))) {
    transpose_result = true;
    result = borrowed(out);
  } else {  // result.transpose(1, 2).clone(contiguous).transpose(1, 2): column-major matrices
    result = temporary_copy(out, {rz[1] * rz[2], 1, std::max<int64_t>(rz[1], 1)}, /*copy_values=*/beta != 0.0);
  }
  const int leading_dim = transpose_result ? 1 : 2;
  GemmCall g;
  g.m = rz[transpose_result ? 2 : 1];
  g.n = rz[leading_dim];
  g.k = (transpose_result ? b : a).sizes[leading_dim];
  Operand batch1 = prepare_batch_matrix(transpose_result ? b : a, g.transa, g.lda, transpose_result, g.m, g.k);
  Operand batch2 = prepare_batch_matrix(transpose_result ? a : b, g.transb, g.ldb, transpose_result, g.k, g.n);
  g.a = batch1.view.data;
  g.stride_a = batch1.stride(0);
  g.b = batch2.view.data;
  g.stride_b = batch2.stride(0);
  g.c = result.view.data;
  g.ldc = result.stride(leading_dim);
  g.stride_c = result.stride(0);
  g.batches = rz[0];
  run_gemm(g, out.dtype, alpha, beta, out.device.index);
  if (result.temporary) cuda::copy(out, result.view);
  batch2 = Operand{};  // locals die in reverse: batch2, batch1, then the result copy
  batch1 = Operand{};
  result = Operand{};
}

}  // namespace

void gemm(const StridedView& out, const StridedView& a, const StridedView& b, double alpha, double beta) {
  if (out.sizes.size() != 3 || a.sizes.size() != 3 || b.sizes.size() != 3)
    throw std::invalid_argument("cuda backend: gemm takes (B, M, K) @ (B, K, N) -> (B, M, N) views");
  const int64_t batches = out.sizes[0], M = out.sizes[1], N = out.sizes[2], K = a.sizes[2];
  if (a.sizes[0] != batches || b.sizes[0] != batches || a.sizes[1] != M || b.sizes[1] != K || b.sizes[2] != N)
    throw std::invalid_argument("cuda backend: gemm: operand shapes do not match");
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw std::invalid_argument("cuda backend: gemm: operands and output must share one dtype");
  (void)cuda_data_type(out.dtype);  // rejects integer dtypes before anything is allocated

  // Cases cuBLAS may not like, handled as PyTorch does before it touches cuBLAS (so no workspace).
  if (out.numel() == 0) return;
  if (K == 0) {
    if (beta == 0.0) cuda::fill(out, 0.0);
    else cuda::binary_scalar(BinaryOp::mul, out, out, beta, false);
    return;
  }
  if (batches == 1) matrix_product(out, a, b, alpha, beta);
  else batched_product(out, a, b, alpha, beta);
}

}  // namespace bytegrad::cuda
