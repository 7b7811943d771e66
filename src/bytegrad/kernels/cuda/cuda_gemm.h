// The cuda backend's batched matrix product through cuBLAS (see cuda_gemm.cpp).
#pragma once

#include "bytegrad/kernels/gemm_args.h"

namespace bytegrad::cuda {

// Runs the described product (backend.h's gemm). The caller holds a CudaDeviceGuard.
void gemm(const GemmArgs& args);

}  // namespace bytegrad::cuda
