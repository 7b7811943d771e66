// What the multi-tensor launches of cuda_elementwise.cu and the one-pass optimizer update of
// cuda_foreach_fused.cu share: the element functions of unary and scalar ops, the foreach kinds and one
// element of each, and the passes (the op sequences that run as one kernel) with their kernel parameters.
#pragma once

#include <cstdint>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

template <typename T, typename Out>
struct UnaryFn {
  UnaryOp op;
  __device__ Out operator()(T x) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::unary<Acc>(op, convert<Acc>(x)));
  }
};

template <typename T, typename Out>
struct BinaryScalarFn {
  BinaryOp op;
  opmath_t<T> scalar;  // the number in the tensor's math type
  double exact;        // the number itself, for comparisons
  bool scalar_first;
  __device__ Out operator()(T a) const {
    using Acc = opmath_t<T>;
    return convert<Out>(pointwise::binary_with_scalar<Acc>(op, convert<Acc>(a), scalar, exact, scalar_first));
  }
};

// ---- multi-tensor launches

enum class ForeachKind : uint8_t { unary, binary_scalar, ternary };

inline constexpr int kForeachChunk = 8192;  // elements per block

// What a block of a multi-tensor launch works on: the tensor whose blocks include this one (the last whose
// first block, block_start[t], is at or before it) and its elements [begin, end).
struct ForeachBlock {
  int tensor;
  int64_t begin, end;
};

__device__ __forceinline__ ForeachBlock foreach_block(const int* block_start, const int64_t* numel, int count) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (block_start[mid] <= static_cast<int>(blockIdx.x)) lo = mid;
    else hi = mid - 1;
  }
  const int64_t begin = static_cast<int64_t>(blockIdx.x - block_start[lo]) * kForeachChunk;
  return {lo, begin, begin + kForeachChunk < numel[lo] ? begin + kForeachChunk : numel[lo]};
}

template <typename T>
__device__ __forceinline__ T foreach_element(ForeachKind kind, int op, bool scalar_first, T x, T y, T z,
                                             double scalar) {
  using Acc = opmath_t<T>;
  switch (kind) {
    case ForeachKind::unary: return UnaryFn<T, T>{static_cast<UnaryOp>(op)}(x);
    case ForeachKind::binary_scalar:
      return BinaryScalarFn<T, T>{static_cast<BinaryOp>(op), from_double<Acc>(scalar), scalar, scalar_first}(x);
    default:
      return convert<T>(ternary_value<Acc>(static_cast<TernaryOp>(op), convert<Acc>(x), convert<Acc>(y),
                                           convert<Acc>(z), static_cast<Acc>(scalar)));
  }
}

// ---- one pass over several foreach ops (cuda_elementwise.cu's foreach_flush finds them; the kernel is in
// cuda_foreach_fused.cu)

inline constexpr int kFusedSlots = 5;     // distinct tensors at one position
inline constexpr int kFusedStages = 8;    // ops in one pass
inline constexpr int kFusedTensors = 24;  // positions per launch (the table stays within 4 KB of kernel parameters)

struct FusedStage {
  ForeachKind kind;
  int op;
  bool scalar_first;
  int out;
  int in[3];
};

// A pass: its stages over slots (a position's distinct tensors, numbered by first use), the slots read before
// any stage writes them and the slots some stage writes.
struct FusedProgram {
  const char* name;
  int stages;
  FusedStage stage[kFusedStages];
  unsigned load_mask, store_mask;
};

constexpr FusedStage unary_stage(UnaryOp op, int out, int in) {
  return {ForeachKind::unary, static_cast<int>(op), false, out, {in, in, in}};
}
constexpr FusedStage scalar_stage(BinaryOp op, int out, int in) {
  return {ForeachKind::binary_scalar, static_cast<int>(op), false, out, {in, in, in}};
}
constexpr FusedStage ternary_stage(TernaryOp op, int out, int self, int a, int b) {
  return {ForeachKind::ternary, static_cast<int>(op), false, out, {self, a, b}};
}

// optim/adam.cpp's foreach update (PyTorch's _multi_tensor_adam): with AdamW's decoupled weight decay
// (param.mul_ first; slots param, exp_avg, grad, exp_avg_sq, denominator) and without weight decay (slots
// exp_avg, grad, exp_avg_sq, denominator, param).
struct AdamWithDecay {
  static constexpr FusedProgram value{
      "adamw",
      8,
      {scalar_stage(BinaryOp::mul, 0, 0), ternary_stage(TernaryOp::lerp, 1, 1, 2, 2), scalar_stage(BinaryOp::mul, 3, 3),
       ternary_stage(TernaryOp::addcmul, 3, 3, 2, 2), unary_stage(UnaryOp::sqrt, 4, 3),
       scalar_stage(BinaryOp::div, 4, 4), scalar_stage(BinaryOp::add, 4, 4),
       ternary_stage(TernaryOp::addcdiv, 0, 0, 1, 4)},
      0b01111u,
      0b11011u};
};
struct AdamWithoutDecay {
  static constexpr FusedProgram value{"adam",
                                      7,
                                      {ternary_stage(TernaryOp::lerp, 0, 0, 1, 1), scalar_stage(BinaryOp::mul, 2, 2),
                                       ternary_stage(TernaryOp::addcmul, 2, 2, 1, 1), unary_stage(UnaryOp::sqrt, 3, 2),
                                       scalar_stage(BinaryOp::div, 3, 3), scalar_stage(BinaryOp::add, 3, 3),
                                       ternary_stage(TernaryOp::addcdiv, 4, 4, 0, 3)},
                                      0b10111u,
                                      0b11101u};
};
inline constexpr const FusedProgram* kFusedPrograms[] = {&AdamWithDecay::value, &AdamWithoutDecay::value};

struct FusedTable {
  int count;
  int block_start[kFusedTensors + 1];
  int64_t numel[kFusedTensors];
  void* slot[kFusedTensors][kFusedSlots];
  double scalar[kFusedTensors][kFusedStages];
};

// Runs `blocks` blocks of kFusedPrograms[program] over the table's positions, on the launch stream.
void launch_fused_pass(int program, ScalarType dtype, int blocks, const FusedTable& table);

}  // namespace bytegrad::cuda
