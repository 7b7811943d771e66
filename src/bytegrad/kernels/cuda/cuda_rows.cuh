// What the row kernels (softmax, layer_norm) share: a row is handled by one warp when short and by one
// block otherwise; its values are combined with warp shuffles, then through shared memory across warps.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

inline constexpr int kWarp = 32;

struct MaxOp {
  template <typename Acc>
  __device__ Acc operator()(Acc a, Acc b) const {
    return (pointwise::is_nan(b) || b > a) ? b : a;
  }  // NaN propagates
};
struct SumOp {
  template <typename Acc>
  __device__ Acc operator()(Acc a, Acc b) const {
    return a + b;
  }
};

// Combines v over the kThreadsPerRow threads that share a row; every one of them gets the result.
template <int kThreadsPerRow, typename Acc, typename Op>
__device__ __forceinline__ Acc row_allreduce(Acc v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (kThreadsPerRow > kWarp) {
    __shared__ Acc per_warp[kThreadsPerRow / kWarp];
    __syncthreads();  // the previous call's readers are done with per_warp
    if (threadIdx.x % kWarp == 0) per_warp[threadIdx.x / kWarp] = v;
    __syncthreads();
    v = per_warp[0];
#pragma unroll
    for (int w = 1; w < kThreadsPerRow / kWarp; ++w) v = op(v, per_warp[w]);
  }
  return v;
}

// This thread's first row, the step to its next one (grid-stride over the rows: the same rows for every
// thread of a row, so a row's threads may synchronize) and its lane in the row, for blocks of kThreads
// threads, kThreadsPerRow a row.
template <int kThreadsPerRow, int kThreads = kBlockThreads>
__device__ __forceinline__ void row_assignment(int64_t& first_row, int64_t& row_step, int& lane) {
  constexpr int kRowsPerBlock = kThreads / kThreadsPerRow;
  first_row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  row_step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  lane = threadIdx.x % kThreadsPerRow;
}

// Picks warp-per-row (rows up to 1024) or block-per-row and a grid covering the rows:
// launch(std::integral_constant<int, kThreadsPerRow>, blocks), for blocks of kBlockThreads.
template <typename Launch>
void launch_rows(int64_t num_rows, int64_t dim_size, Launch&& launch) {
  if (num_rows == 0 || dim_size == 0) return;
  if (dim_size <= 1024) {
    constexpr int kRowsPerBlock = kBlockThreads / kWarp;
    launch(std::integral_constant<int, kWarp>{}, grid_for(num_rows, kRowsPerBlock));
  } else {
    launch(std::integral_constant<int, kBlockThreads>{},
           static_cast<unsigned>(std::min<int64_t>(num_rows, int64_t{1} << 20)));
  }
}

// For the kernels holding a row of n <= 1024 elements in a warp's registers (element lane + 32 i): calls
// launch(std::integral_constant<int, kPerLane>) with the fewest elements a lane, kMinPerLane at least.
template <int kMinPerLane, typename Launch>
void dispatch_per_lane(int64_t n, Launch&& launch) {
  static_assert(kMinPerLane == 1 || kMinPerLane == 2 || kMinPerLane == 4);
  if constexpr (kMinPerLane <= 1) {
    if (n <= 32) return launch(std::integral_constant<int, 1>{});
  }
  if constexpr (kMinPerLane <= 2) {
    if (n <= 64) return launch(std::integral_constant<int, 2>{});
  }
  if (n <= 128) launch(std::integral_constant<int, 4>{});
  else if (n <= 256) launch(std::integral_constant<int, 8>{});
  else if (n <= 512) launch(std::integral_constant<int, 16>{});
  else launch(std::integral_constant<int, 32>{});
}

}  // namespace bytegrad::cuda
