// Batched matrix products through cuBLAS, run exactly as described (GemmArgs): the op layer
// (tensor/blas_plan.cpp) has chosen the layout by PyTorch 2.11's rules, made its copies and obtained the
// workspace, so nothing here allocates or copies.
//
// cuBLAS handle: one per thread, device and BlasHandleOwner, created on first use, bound to the default
// stream, with its workspace set to the described one before every call (the workspace can change after
// clear_blas_workspaces(), and cublasSetStream resets it). Handles are never destroyed: destroying them
// at thread exit can run after the CUDA runtime has shut down (PyTorch keeps them for the same reason).
//
// Math: float32 with cublasSgemm under CUBLAS_DEFAULT_MATH (no TF32, as PyTorch's default), float64 with
// cublasDgemm, float16/bfloat16 with cublasGemmEx and fp32 accumulation (CUBLAS_COMPUTE_32F).
#include "bytegrad/kernels/cuda/cuda_gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <climits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "bytegrad/kernels/cuda/cuda_check.h"

namespace bytegrad::cuda {

namespace {

cublasHandle_t blas_handle(const GemmArgs& g) {
  // One handle per device and owner, as PyTorch has one per thread: backward's products use the autograd
  // device thread's handle with that thread's workspace, so neither handle's workspace keeps changing.
  thread_local std::map<std::pair<int, BlasHandleOwner>, cublasHandle_t> handles;
  cublasHandle_t& handle = handles[{g.device.index, g.handle_owner}];
  if (!handle) BYTEGRAD_CUBLAS_CHECK(cublasCreate(&handle));
  BYTEGRAD_CUBLAS_CHECK(cublasSetStream(handle, 0));  // also resets the workspace: set ours after
  BYTEGRAD_CUBLAS_CHECK(cublasSetWorkspace(handle, g.workspace, g.workspace_bytes));
  BYTEGRAD_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  return handle;
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

}  // namespace

void gemm(const GemmArgs& g) {
  const cudaDataType_t type = cuda_data_type(g.dtype);
  const int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  const int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb"), ldc = as_int(g.ldc, "ldc");
  const int batches = as_int(g.batches, "batch count");
  const cublasOperation_t opa = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t handle = blas_handle(g);

  if (g.dtype == ScalarType::float64) {
    const double a64 = g.alpha, b64 = g.beta;
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
  const float a32 = static_cast<float>(g.alpha), b32 = static_cast<float>(g.beta);  // fp32 math for 16-bit too
  if (g.dtype == ScalarType::float32) {
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

}  // namespace bytegrad::cuda
