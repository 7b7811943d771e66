// Batched matrix products through cuBLAS, run exactly as described (GemmArgs): the op layer
// (tensor/blas_plan.cpp) has chosen the layout by PyTorch 2.11's rules, made its copies and obtained the
// workspace, so nothing here allocates or copies.
//
// cuBLAS handle: one per thread, device and BlasHandleOwner, created on first use, bound to the current
// stream (cuda_launch_stream.h) before every call, with its workspace set to the described one before every call (the
// workspace can change after clear_blas_workspaces(), and cublasSetStream resets it). Handles are never destroyed:
// destroying them at thread exit can run after the CUDA runtime has shut down (PyTorch keeps them for the same reason).
//
// Math: float32 with cublasSgemm under CUBLAS_DEFAULT_MATH (no TF32, as PyTorch's default), float64 with
// cublasDgemm, float16/bfloat16 with cublasGemmEx and fp32 accumulation (CUBLAS_COMPUTE_32F).
//
// The bias epilogue (GemmArgs::bias: addmm with a bias PyTorch fuses, its gemm_and_bias) runs through
// cuBLASLt with CUBLASLT_EPILOGUE_BIAS, compute type CUBLAS_COMPUTE_32F (64F for float64), the op layer's
// cuBLASLt workspace, and the operands' pointer alignments in the preference, as PyTorch does; the
// descriptors and the heuristic's algorithm are kept per shape and alignment. Should cuBLASLt offer no
// algorithm, the bias is copied into every column of C and the product added with beta 1 (the unfused
// path's arithmetic), with no memory of its own.
//
// A large 16-bit product with one operand's leading dimension off 16 bytes (GPT-2's 50257-wide logits) runs
// as interleaved column groups cut at 16-byte boundaries (kernels/aligned_pieces.h): cuBLAS has only its
// slowest kernels for such a layout. On an H100 the three logits products of GPT-2 small's bf16 step at
// 8 x 1024 tokens went from 15.4 to 3.4 ms; float32's gained nothing (its 4 x 256 step lost 1.3 ms), so
// they stay one call. BYTEGRAD_GEMM_PIECES=0 turns this off (for comparisons).
#include "bytegrad/kernels/cuda/cuda_gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <tuple>
#include <stdexcept>
#include <string>
#include <utility>

#include "bytegrad/kernels/aligned_pieces.h"
#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/kernels/cuda/cuda_kernels.h"
#include "bytegrad/kernels/cuda/cuda_launch_stream.h"

namespace bytegrad::cuda {

namespace {

cublasHandle_t blas_handle(const GemmArgs& g) {
  // One handle per device and owner, as PyTorch has one per thread: backward's products use the autograd
  // device thread's handle with that thread's workspace, so neither handle's workspace keeps changing.
  thread_local std::map<std::pair<int, BlasHandleOwner>, cublasHandle_t> handles;
  cublasHandle_t& handle = handles[{g.device.index, g.handle_owner}];
  if (!handle) BYTEGRAD_CUBLAS_CHECK(cublasCreate(&handle));
  BYTEGRAD_CUBLAS_CHECK(cublasSetStream(handle, launch_stream()));  // also resets the workspace: set ours after
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
    default:
      throw std::invalid_argument("cuda backend: gemm supports float32, float64, float16 and bfloat16, not " +
                                  std::string(scalar_type_name(dtype)));
  }
}

// ----------------------------------------------------------------------------- cuBLASLt bias epilogue

cublasLtHandle_t lt_handle(int device) {
  thread_local std::map<int, cublasLtHandle_t> handles;  // never destroyed, as the cuBLAS handles
  cublasLtHandle_t& handle = handles[device];
  if (!handle) BYTEGRAD_CUBLAS_CHECK(cublasLtCreate(&handle));
  return handle;
}

// The largest power of two (at most 256) dividing the address, as PyTorch's _getAlignment.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 1;
  while (alignment < 256 && address % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

struct LtKey {
  int device;
  ScalarType dtype;
  bool transa, transb;
  int64_t m, n, k, lda, ldb, ldc;
  size_t workspace_bytes;
  uint32_t align_a, align_b, align_c, align_bias;
  auto tie() const {
    return std::tie(device, dtype, transa, transb, m, n, k, lda, ldb, ldc, workspace_bytes, align_a, align_b, align_c,
                    align_bias);
  }
  bool operator<(const LtKey& other) const { return tie() < other.tie(); }
};

struct LtPlan {
  bool usable = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// Builds the descriptors and asks the heuristic for one algorithm; `usable` false when there is none.
LtPlan make_lt_plan(cublasLtHandle_t handle, const LtKey& key) {
  LtPlan plan;
  const cudaDataType_t type = cuda_data_type(key.dtype);
  const cublasComputeType_t compute = key.dtype == ScalarType::float64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale = key.dtype == ScalarType::float64 ? CUDA_R_64F : CUDA_R_32F;
  if (cublasLtMatmulDescCreate(&plan.desc, compute, scale) != CUBLAS_STATUS_SUCCESS) return plan;
  const cublasOperation_t opa = key.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = key.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  bool ok = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
                CUBLAS_STATUS_SUCCESS;
  ok = ok &&
       cublasLtMatrixLayoutCreate(&plan.a, type, key.transa ? key.k : key.m, key.transa ? key.m : key.k, key.lda) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&plan.b, type, key.transb ? key.n : key.k, key.transb ? key.k : key.n, key.ldb) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&plan.c, type, key.m, key.n, key.ldc) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return plan;
  cublasLtMatmulPreference_t preference = nullptr;
  if (cublasLtMatmulPreferenceCreate(&preference) != CUBLAS_STATUS_SUCCESS) return plan;
  const uint64_t workspace = key.workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a,
                                       sizeof(key.align_a));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b,
                                       sizeof(key.align_b));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c,
                                       sizeof(key.align_c));
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c,
                                       sizeof(key.align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                               preference, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || returned == 0) return plan;
  plan.algo = result.algo;
  plan.usable = true;
  return plan;
}

// C = alpha * op(A) op(B) + bias through cuBLASLt; false (nothing run) when cuBLASLt has no algorithm.
bool lt_gemm_with_bias(const GemmArgs& g) {
  if (g.batches != 1) return false;
  int device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&device));
  const LtKey key{device,
                  g.dtype,
                  g.transa,
                  g.transb,
                  g.m,
                  g.n,
                  g.k,
                  g.lda,
                  g.ldb,
                  g.ldc,
                  g.lt_workspace ? g.lt_workspace_bytes : 0,
                  alignment_of(g.a),
                  alignment_of(g.b),
                  alignment_of(g.c),
                  alignment_of(g.bias)};
  cublasLtHandle_t handle = lt_handle(device);
  thread_local std::map<LtKey, LtPlan> plans;  // descriptors kept for the life of the thread
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_lt_plan(handle, key)).first;
  LtPlan& plan = it->second;
  if (!plan.usable) return false;
  const void* bias = g.bias;
  if (cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) !=
      CUBLAS_STATUS_SUCCESS)
    return false;
  const double a64 = g.alpha, b64 = 0.0;
  const float a32 = static_cast<float>(g.alpha), b32 = 0.0f;
  const bool wide = g.dtype == ScalarType::float64;
  const cublasStatus_t status =
      cublasLtMatmul(handle, plan.desc, wide ? static_cast<const void*>(&a64) : &a32, g.a, plan.a, g.b, plan.b,
                     wide ? static_cast<const void*>(&b64) : &b32, g.c, plan.c, g.c, plan.c, &plan.algo, g.lt_workspace,
                     key.workspace_bytes, launch_stream());
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  plan.usable = false;  // not again for this shape
  return false;
}

// Products below this many multiply-adds stay one call: their pieces' launches would cost more than they gain.
constexpr double kPiecesMinimumWork = 1 << 30;

bool worth_pieces(const GemmArgs& g) {
  static const bool enabled = [] {
    const char* setting = std::getenv("BYTEGRAD_GEMM_PIECES");
    return !(setting && std::string(setting) == "0");
  }();
  const bool sixteen_bit = g.dtype == ScalarType::bfloat16 || g.dtype == ScalarType::float16;
  return enabled && sixteen_bit && g.batches == 1 &&
         static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) >= kPiecesMinimumWork;
}

void one_gemm(const GemmArgs& g);

}  // namespace

void gemm(const GemmArgs& args) {
  if (args.bias) {
    if (lt_gemm_with_bias(args)) return;
    // The unfused arithmetic: every column of C (m x n, column-major) starts as the bias, then beta 1.
    StridedView c_view{args.c, args.dtype, {args.n, args.m}, {args.ldc, 1}, args.device};
    StridedView bias_view{const_cast<void*>(args.bias), args.dtype, {args.n, args.m}, {0, 1}, args.device};
    copy(c_view, bias_view);
    GemmArgs unfused = args;
    unfused.bias = nullptr;
    unfused.beta = 1.0;
    gemm(unfused);
    return;
  }
  if (worth_pieces(args) && gemm_in_aligned_pieces(args, one_gemm)) return;
  one_gemm(args);
}

namespace {

void one_gemm(const GemmArgs& g) {
  const cudaDataType_t type = cuda_data_type(g.dtype);
  const int m = as_int(g.m, "m"), n = as_int(g.n, "n"), k = as_int(g.k, "k");
  const int lda = as_int(g.lda, "lda"), ldb = as_int(g.ldb, "ldb"), ldc = as_int(g.ldc, "ldc");
  const int batches = as_int(g.batches, "batch count");
  const cublasOperation_t opa = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t handle = blas_handle(g);

  // cublasDgemm / cublasSgemm, or their strided-batched forms: alpha and beta are double or float.
  auto typed_gemm = [&](auto alpha, auto beta, auto one, const char* one_name, auto batched, const char* batched_name) {
    using T = decltype(alpha);
    const auto* A = static_cast<const T*>(g.a);
    const auto* B = static_cast<const T*>(g.b);
    auto* C = static_cast<T*>(g.c);
    if (batches == 1)
      check_cublas(one(handle, opa, opb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc), one_name, __FILE__, __LINE__);
    else
      check_cublas(batched(handle, opa, opb, m, n, k, &alpha, A, lda, g.stride_a, B, ldb, g.stride_b, &beta, C, ldc,
                           g.stride_c, batches),
                   batched_name, __FILE__, __LINE__);
  };
  if (g.dtype == ScalarType::float64)
    return typed_gemm(g.alpha, g.beta, cublasDgemm, "cublasDgemm", cublasDgemmStridedBatched,
                      "cublasDgemmStridedBatched");
  const float a32 = static_cast<float>(g.alpha), b32 = static_cast<float>(g.beta);  // fp32 math for 16-bit too
  if (g.dtype == ScalarType::float32)
    return typed_gemm(a32, b32, cublasSgemm, "cublasSgemm", cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
  if (batches == 1)
    BYTEGRAD_CUBLAS_CHECK(cublasGemmEx(handle, opa, opb, m, n, k, &a32, g.a, type, lda, g.b, type, ldb, &b32, g.c, type,
                                       ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
  else
    BYTEGRAD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, opa, opb, m, n, k, &a32, g.a, type, lda, g.stride_a, g.b,
                                                     type, ldb, g.stride_b, &b32, g.c, type, ldc, g.stride_c, batches,
                                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

}  // namespace

}  // namespace bytegrad::cuda
