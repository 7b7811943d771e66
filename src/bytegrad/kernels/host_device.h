// BYTEGRAD_HOST_DEVICE marks a function that the CPU kernels and the CUDA kernels both call: inlined host
// and device code under nvcc, a plain inline function elsewhere.
#pragma once

#if defined(__CUDACC__)
#define BYTEGRAD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define BYTEGRAD_HOST_DEVICE inline
#endif
