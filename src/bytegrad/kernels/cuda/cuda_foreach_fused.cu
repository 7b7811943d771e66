// The one-pass optimizer update (cuda_foreach.cuh's passes): each element of a position's tensors loaded
// once, every stage's op applied in order in registers, each tensor written once.
//
// Compiled without contraction (-fmad=false, set in CMakeLists.txt), unlike the other kernels: each op must
// round as it does in its own launch, where its result is stored before the next op reads it, and a product
// ending one op and a sum starting the next would otherwise become one fused multiply-add (the compiler and
// ptxas both contract mul.f32 and add.f32, seen as 1-ulp differences in Adam's denominators). The ops of
// the passes contract nothing inside themselves implicitly (ternary_value writes its multiply-adds out), so
// their results are the separate launches' bit for bit.
#include <cuda_runtime.h>

#include <iterator>

#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/kernels/cuda/cuda_foreach.cuh"
#include "bytegrad/kernels/cuda/cuda_launch_stream.h"

namespace bytegrad::cuda {

namespace {

template <typename T, typename Program>
__device__ __forceinline__ void run_stages(const double* scalars, T (&r)[kFusedSlots]) {
  constexpr FusedProgram P = Program::value;
#pragma unroll
  for (int s = 0; s < P.stages; ++s)
    r[P.stage[s].out] = foreach_element<T>(P.stage[s].kind, P.stage[s].op, P.stage[s].scalar_first, r[P.stage[s].in[0]],
                                           r[P.stage[s].in[1]], r[P.stage[s].in[2]], scalars[s]);
}

template <typename T, typename Program>
__global__ void __launch_bounds__(kBlockThreads) fused_foreach_kernel(FusedTable table) {
  constexpr FusedProgram P = Program::value;
  constexpr int N = static_cast<int>(16 / sizeof(T));
  const ForeachBlock block = foreach_block(table.block_start, table.numel, table.count);
  const int t = block.tensor;
  const int64_t begin = block.begin, end = block.end;
  double scalars[kFusedStages];
#pragma unroll
  for (int s = 0; s < kFusedStages; ++s) scalars[s] = table.scalar[t][s];
  T* slot[kFusedSlots];
  bool aligned = true;
#pragma unroll
  for (int q = 0; q < kFusedSlots; ++q) {
    slot[q] = static_cast<T*>(table.slot[t][q]);
    if ((P.load_mask | P.store_mask) >> q & 1u) aligned = aligned && reinterpret_cast<uintptr_t>(slot[q]) % 16 == 0;
  }
  auto one_element = [&](int64_t j) {
    T r[kFusedSlots];
#pragma unroll
    for (int q = 0; q < kFusedSlots; ++q) r[q] = (P.load_mask >> q & 1u) ? slot[q][j] : T(0);
    run_stages<T, Program>(scalars, r);
#pragma unroll
    for (int q = 0; q < kFusedSlots; ++q)
      if (P.store_mask >> q & 1u) slot[q][j] = r[q];
  };
  int64_t i = begin + static_cast<int64_t>(threadIdx.x) * N;
  if (aligned) {
    for (; i + N <= end; i += static_cast<int64_t>(blockDim.x) * N) {
      Vec<T, N> v[kFusedSlots];
#pragma unroll
      for (int q = 0; q < kFusedSlots; ++q)
        if (P.load_mask >> q & 1u) v[q] = *reinterpret_cast<const Vec<T, N>*>(slot[q] + i);
#pragma unroll
      for (int e = 0; e < N; ++e) {
        T r[kFusedSlots];
#pragma unroll
        for (int q = 0; q < kFusedSlots; ++q) r[q] = (P.load_mask >> q & 1u) ? v[q].v[e] : T(0);
        run_stages<T, Program>(scalars, r);
#pragma unroll
        for (int q = 0; q < kFusedSlots; ++q) v[q].v[e] = r[q];
      }
#pragma unroll
      for (int q = 0; q < kFusedSlots; ++q)
        if (P.store_mask >> q & 1u) *reinterpret_cast<Vec<T, N>*>(slot[q] + i) = v[q];
    }
    if (i < end)
      for (int64_t j = i; j < end && j < i + N; ++j) one_element(j);
  } else {
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) one_element(j);
  }
}

static_assert(std::size(kFusedPrograms) == 2, "launch_pass names each program");

template <typename T>
void launch_pass(int program, int blocks, const FusedTable& table) {
  switch (program) {
    case 0: fused_foreach_kernel<T, AdamWithDecay><<<blocks, kBlockThreads, 0, launch_stream()>>>(table); break;
    default: fused_foreach_kernel<T, AdamWithoutDecay><<<blocks, kBlockThreads, 0, launch_stream()>>>(table); break;
  }
  BYTEGRAD_CUDA_CHECK_LAUNCH("fused_foreach_kernel");
}

}  // namespace

void launch_fused_pass(int program, ScalarType dtype, int blocks, const FusedTable& table) {
  dispatch_floating(dtype, "foreach",
                    [&](auto tag) { launch_pass<typename decltype(tag)::type>(program, blocks, table); });
}

}  // namespace bytegrad::cuda
