// The op table: every op bytegrad records for autograd (and every pointwise kernel) is one row here, keyed
// by OpId. From it come the kernels' op enums (UnaryOp, BinaryOp), the dtype checks, the op names in
// records and messages, each op's typed arguments (core/op_args.h), and the link to its derivative:
//   grad    — autograd/functions/ defines `formulas::<op>(const OpRecord&, const ArgsOf<OpId::<op>>&)`
//             building the node named in the row; without that definition the build fails (the
//             dispatch table in autograd/recorder.cpp names every `grad` row's formula).
//   no_grad — bytegrad has no derivative: using the op where a graph is needed is an error naming this
//             table (ops whose result is bool or an integer never need one and are not recorded).
// In-place forms (add_, sqrt_, masked_fill_, ...) record their op's row with in_place set; the node is
// the same, as in PyTorch. docs/adding-an-op.md walks through adding a row.
//
// Columns
//   dtypes: any       — every dtype; the result has the operands' dtype
//           floating  — floating dtypes only (PyTorch would promote integers; bytegrad refuses); for two
//                       tensor operands, checked on their result type (int32 / float32 is allowed)
//           not_bool  — every dtype but bool
//           to_bool   — every dtype; the result is bool (comparisons, logical ops)
//   args:   the op_args:: struct the op records (None: nothing)
//   node:   the autograd node's name, PyTorch's (`-` for no_grad rows)
//   autocast (pointwise rows): PyTorch's CUDA autocast policy for the op (autocast_mode.h's lists), applied
//           by the op's function (tensor/ops_elementwise.cpp) through tensor/autocast.h: none (runs in its
//           operands' dtypes), fp32, lower_precision_fp or promote. Other ops apply theirs in their own
//           function (BYTEGRAD_AUTOCAST).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "bytegrad/core/op_args.h"

// Pointwise ops on one tensor (kernel: UnaryOp, math in kernels/pointwise_math.h), then the activations'
// forward rows (below).
//   X(op, dtypes, grad, node, autocast)
#define BYTEGRAD_UNARY_OPS(X)                              \
  X(neg, not_bool, grad, NegBackward0, none)               \
  X(abs, any, no_grad, -, none)                            \
  X(exp, floating, grad, ExpBackward0, fp32)               \
  X(expm1, floating, grad, Expm1Backward0, fp32)           \
  X(log, floating, grad, LogBackward0, fp32)               \
  X(sqrt, floating, grad, SqrtBackward0, none)             \
  X(reciprocal, floating, grad, ReciprocalBackward0, fp32) \
  X(rsqrt, floating, grad, RsqrtBackward0, fp32)           \
  X(cos, floating, grad, CosBackward0, none)               \
  X(sin, floating, grad, SinBackward0, none)               \
  X(log_sigmoid, floating, no_grad, -, none)               \
  X(logical_not, to_bool, no_grad, -, none)                \
  BYTEGRAD_ACTIVATION_TABLE(BYTEGRAD_ACTIVATION_AS_UNARY, X)

// Activations with PyTorch's fused backward: each row is a unary row `op` and a binary row `op_backward`
// (a: the incoming gradient, b: the saved tensor), and from it come both free functions and their
// declarations, Tensor::op(), the formula (autograd/functions/pointwise.cpp: save the result or the input,
// backward = op_backward(grad, saved)), the CUDA kernel choice, the nn module (nn/activation.h) and the
// tests' sample. Only the math is written elsewhere: the forward and backward cases in
// kernels/pointwise_math.h. docs/adding-an-op.md walks through one.
//   X(op, dtypes, saves, node, autocast, cuda, module, sample)
//     saves:  result or input — what the node keeps for backward (PyTorch's derivatives.yaml)
//     cuda:   fixed — the CUDA kernel is instantiated with the op fixed at compile time (no per-element
//             switch: GPT-2's gelu, where the switch cost a quarter of the kernel's time); switch — the
//             kernel shared by every op
//     module: the nn module class (torch.nn's name)
//     sample: the tests' input domain: real (randn) or positive (rand + 0.5)
#define BYTEGRAD_ACTIVATION_TABLE(R, X)                                              \
  R(X, relu, not_bool, result, ReluBackward0, none, switch, ReLU, real)              \
  R(X, sigmoid, floating, result, SigmoidBackward0, none, switch, Sigmoid, real)     \
  R(X, tanh, floating, result, TanhBackward0, none, switch, Tanh, real)              \
  R(X, gelu, floating, input, GeluBackward0, none, fixed, GELU, real) /* erf form */ \
  R(X, silu, floating, input, SiluBackward0, none, switch, SiLU, real)
#define BYTEGRAD_ACTIVATION_OPS(X) BYTEGRAD_ACTIVATION_TABLE(BYTEGRAD_ACTIVATION_ROW, X)
#define BYTEGRAD_ACTIVATION_ROW(X, ...) X(__VA_ARGS__)
#define BYTEGRAD_ACTIVATION_AS_UNARY(X, op, dtypes, saves, node, autocast, ...) X(op, dtypes, grad, node, autocast)
#define BYTEGRAD_ACTIVATION_AS_BINARY(X, op, dtypes, ...) X(op##_backward, dtypes, None, no_grad, -, none)

// Pointwise ops on two tensors, broadcast together (kernel: BinaryOp), then the activations' backward rows.
// leaky_relu_backward(grad, self, alpha = negative_slope) is also leaky_relu's forward kernel (grad = self).
//   X(op, dtypes, args, grad, node, autocast)
#define BYTEGRAD_BINARY_OPS(X)                              \
  X(add, any, Alpha, grad, AddBackward0, none)              \
  X(sub, any, Alpha, grad, SubBackward0, none)              \
  X(mul, any, None, grad, MulBackward0, none)               \
  X(div, floating, None, grad, DivBackward0, none)          \
  X(pow, not_bool, None, no_grad, -, fp32)                  \
  X(maximum, any, None, no_grad, -, none)                   \
  X(minimum, any, None, no_grad, -, none)                   \
  X(eq, to_bool, None, no_grad, -, none)                    \
  X(ne, to_bool, None, no_grad, -, none)                    \
  X(lt, to_bool, None, no_grad, -, none)                    \
  X(le, to_bool, None, no_grad, -, none)                    \
  X(gt, to_bool, None, no_grad, -, none)                    \
  X(ge, to_bool, None, no_grad, -, none)                    \
  X(logical_and, to_bool, None, no_grad, -, none)           \
  X(logical_or, to_bool, None, no_grad, -, none)            \
  X(leaky_relu_backward, floating, Alpha, no_grad, -, none) \
  BYTEGRAD_ACTIVATION_TABLE(BYTEGRAD_ACTIVATION_AS_BINARY, X)

// A binary op with a Python-number operand (args: Scalar), which never becomes a device tensor. kernel:
// the BinaryOp computed; order: tensor_first (x - s) or scalar_first (s - x).
//   X(op, kernel, order, dtypes, grad, node, autocast)
#define BYTEGRAD_SCALAR_OPS(X)                                                 \
  X(add_scalar, add, tensor_first, any, grad, AddBackward1, none)              \
  X(sub_scalar, sub, tensor_first, any, grad, SubBackward1, none)              \
  X(rsub_scalar, sub, scalar_first, any, grad, RsubBackward1, none)            \
  X(mul_scalar, mul, tensor_first, any, grad, MulBackward1, none)              \
  X(div_scalar, div, tensor_first, floating, grad, DivBackward1, none)         \
  X(rdiv_scalar, div, scalar_first, floating, no_grad, -, none)                \
  X(pow_scalar, pow, tensor_first, any, grad, PowBackward0, fp32)              \
  X(rpow_scalar, pow, scalar_first, any, no_grad, -, fp32)                     \
  X(eq_scalar, eq, tensor_first, to_bool, no_grad, -, none)                    \
  X(ne_scalar, ne, tensor_first, to_bool, no_grad, -, none)                    \
  X(lt_scalar, lt, tensor_first, to_bool, no_grad, -, none)                    \
  X(le_scalar, le, tensor_first, to_bool, no_grad, -, none)                    \
  X(gt_scalar, gt, tensor_first, to_bool, no_grad, -, none)                    \
  X(ge_scalar, ge, tensor_first, to_bool, no_grad, -, none)                    \
  X(clamp_min, maximum, tensor_first, not_bool, grad, ClampMinBackward0, none) \
  X(clamp_max, minimum, tensor_first, not_bool, grad, ClampMaxBackward0, none)

// Every other op. kernel: the KernelBackend method that computes it (none: a view, no kernel).
//   X(op, kernel, dtypes, args, grad, node)
#define BYTEGRAD_STRUCTURED_OPS(X)                                                                                  \
  /* reductions (tensor/ops_reduce.cpp) */                                                                          \
  X(sum, reduce, any, None, grad, SumBackward0)                                                                     \
  X(sum_dims, reduce, any, Dims, grad, SumBackward1)                                                                \
  X(mean, reduce, floating, None, grad, MeanBackward0)                                                              \
  X(mean_dims, reduce, floating, Dims, grad, MeanBackward1)                                                         \
  X(prod, reduce, any, None, no_grad, -)                                                                            \
  X(max, reduce, any, None, no_grad, -)                                                                             \
  X(min, reduce, any, None, no_grad, -)                                                                             \
  X(amax, reduce, any, Dims, no_grad, -)                                                                            \
  X(amin, reduce, any, Dims, no_grad, -)                                                                            \
  X(norm, reduce, floating, Dims, grad, LinalgVectorNormBackward0)                                                  \
  X(var, reduce_variance, floating, Variance, grad, VarBackward0)                                                   \
  X(std, reduce_variance, floating, Variance, grad, StdBackward0)                                                   \
  /* matrix products (tensor/ops_matmul.cpp) */                                                                     \
  X(mm, gemm, not_bool, None, grad, MmBackward0)                                                                    \
  X(bmm, gemm, not_bool, None, grad, BmmBackward0)                                                                  \
  X(addmm, gemm, not_bool, Addmm, grad, AddmmBackward0)                                                             \
  X(dot, gemm, not_bool, None, grad, DotBackward0)                                                                  \
  X(mv, gemm, not_bool, None, grad, MvBackward0)                                                                    \
  /* views (tensor/tensor.cpp) */                                                                                   \
  X(view, none, any, None, grad, ViewBackward0)                                                                     \
  X(t, none, any, None, grad, TBackward0)                                                                           \
  X(transpose, none, any, Transpose, grad, TransposeBackward0)                                                      \
  X(permute, none, any, Permutation, grad, PermuteBackward0)                                                        \
  X(expand, none, any, None, grad, ExpandBackward0)                                                                 \
  X(unsqueeze, none, any, Dim, grad, UnsqueezeBackward0)                                                            \
  X(squeeze, none, any, None, grad, SqueezeBackward0)                                                               \
  X(select, none, any, Select, grad, SelectBackward0)                                                               \
  X(slice, none, any, Slice, grad, SliceBackward0)                                                                  \
  X(unbind, none, any, Dim, grad, UnbindBackward0)                                                                  \
  X(split, none, any, Split, grad, SplitBackward0)                                                                  \
  /* copies and joins (tensor/tensor.cpp, tensor/ops_index.cpp) */                                                  \
  X(clone, copy, any, None, grad, CloneBackward0)                                                                   \
  X(to_dtype, copy, any, None, grad, ToCopyBackward0)                                                               \
  X(to_device, copy, any, None, grad, ToCopyBackward0)                                                              \
  X(copy, copy, any, None, no_grad, -)                                                                              \
  X(cat, copy, any, Dim, grad, CatBackward0)                                                                        \
  X(stack, copy, any, Dim, grad, StackBackward0)                                                                    \
  X(constant_pad_nd, copy, any, Pad, grad, ConstantPadNdBackward0)                                                  \
  /* indexing and nn (tensor/ops_index.cpp, ops_nn.cpp, ops_norm.cpp, ...) */                                       \
  X(index_select, index_select, any, Dim, grad, IndexSelectBackward0)                                               \
  X(gather, gather, any, Dim, no_grad, -)                                                                           \
  X(embedding, index_select, any, None, grad, EmbeddingBackward0)                                                   \
  X(softmax, softmax, floating, Dim, grad, SoftmaxBackward0)                                                        \
  X(log_softmax, softmax, floating, Dim, grad, LogSoftmaxBackward0)                                                 \
  X(masked_fill, masked_fill, any, Scalar, grad, MaskedFillBackward0)                                               \
  X(where, where, any, None, grad, WhereBackward0)                                                                  \
  X(dropout, binary, floating, Dropout, grad, NativeDropoutBackward0)                                               \
  X(native_layer_norm, layer_norm, floating, LayerNorm, grad, NativeLayerNormBackward0)                             \
  X(fused_rms_norm, layer_norm, floating, LayerNorm, grad, FusedRmsNormBackward0)                                   \
  X(triu, triangle, any, Diagonal, grad, TriuBackward0)                                                             \
  X(tril, triangle, any, Diagonal, grad, TrilBackward0)                                                             \
  X(clamp, binary_scalar, not_bool, Clamp, grad, ClampBackward1)                                                    \
  X(leaky_relu, binary, floating, Scalar, grad, LeakyReluBackward0)                                                 \
  /* along one dimension and the masked scans (tensor/ops_sort.cpp); flip (cumsum's backward) has no node */        \
  X(cumsum, cumsum, any, Dim, grad, CumsumBackward0)                                                                \
  X(sort, sort, not_bool, Sort, grad, SortBackward0)                                                                \
  X(topk, sort, not_bool, TopK, grad, TopkBackward0)                                                                \
  X(flip, copy, any, Dim, no_grad, -)                                                                               \
  X(masked_select, masked_select, any, None, grad, MaskedSelectBackward0)                                           \
  /* scaled_dot_product_attention's fused backends (tensor/ops_attention.cpp) */                                    \
  X(scaled_dot_product_cudnn_attention, sdpa, floating, Attention, grad, ScaledDotProductCudnnAttentionBackward0)   \
  X(scaled_dot_product_efficient_attention, sdpa, floating, Attention, grad,                                        \
    ScaledDotProductEfficientAttentionBackward0)                                                                    \
  X(scaled_dot_product_flash_attention, sdpa, floating, Attention, grad, ScaledDotProductFlashAttentionBackward0)   \
  /* losses (tensor/ops_loss.cpp) */                                                                                \
  X(nll_loss, nll_loss, floating, NllLoss, grad, NllLossBackward0)                                                  \
  X(mse_loss, binary, floating, LossReduction, grad, MseLossBackward0)                                              \
  X(binary_cross_entropy_with_logits, binary, floating, LossReduction, grad, BinaryCrossEntropyWithLogitsBackward0) \
  /* in-place updates (fill_, lerp_, addcmul_, addcdiv_: tensor/ops_inplace.cpp) */                                 \
  X(fill, fill, any, Scalar, grad, FillBackward0)                                                                   \
  X(zero, fill, any, None, grad, ZeroBackward0)                                                                     \
  X(lerp, ternary, floating, Scalar, no_grad, -)                                                                    \
  X(addcmul, ternary, floating, Scalar, no_grad, -)                                                                 \
  X(addcdiv, ternary, floating, Scalar, no_grad, -)

namespace bytegrad {

// ----------------------------------------------------------------------------------- the enums

#define BYTEGRAD_ENUMERATOR(op, ...) op,
enum class OpId : uint16_t {
  BYTEGRAD_UNARY_OPS(BYTEGRAD_ENUMERATOR) BYTEGRAD_BINARY_OPS(BYTEGRAD_ENUMERATOR)
      BYTEGRAD_SCALAR_OPS(BYTEGRAD_ENUMERATOR) BYTEGRAD_STRUCTURED_OPS(BYTEGRAD_ENUMERATOR)
};
// The kernels' pointwise op enums: the unary and binary rows, in table order.
enum class UnaryOp : uint8_t { BYTEGRAD_UNARY_OPS(BYTEGRAD_ENUMERATOR) };
enum class BinaryOp : uint8_t { BYTEGRAD_BINARY_OPS(BYTEGRAD_ENUMERATOR) };
#undef BYTEGRAD_ENUMERATOR

#define BYTEGRAD_COUNT_ROW(...) +1  // NOLINT(bugprone-macro-parentheses): a term of the sum below
inline constexpr size_t kOpCount = 0 BYTEGRAD_UNARY_OPS(BYTEGRAD_COUNT_ROW) BYTEGRAD_BINARY_OPS(BYTEGRAD_COUNT_ROW)
    BYTEGRAD_SCALAR_OPS(BYTEGRAD_COUNT_ROW) BYTEGRAD_STRUCTURED_OPS(BYTEGRAD_COUNT_ROW);
#undef BYTEGRAD_COUNT_ROW

enum class DtypeRule : uint8_t { any, floating, not_bool, to_bool };
// PyTorch's autocast policies (tensor/autocast.h's CastPolicy); none: not listed, runs in its operands' dtypes.
enum class AutocastPolicy : uint8_t { none, lower_precision_fp, fp32, fp32_set_opt_dtype, promote };
enum class OperandOrder : uint8_t { tensor_first, scalar_first };

// One row, as values.
struct OpInfo {
  std::string_view name;  // "exp", "add_scalar", ...
  DtypeRule dtypes;
  bool differentiable;
  std::string_view node;    // "ExpBackward0"; "" when not differentiable
  std::string_view kernel;  // "unary", "binary", "reduce", "gemm", "none", ...
  AutocastPolicy autocast;  // the pointwise rows' column; none for the others (see above)
};

namespace op_table_detail {
#define BYTEGRAD_NODE_grad(node) #node
#define BYTEGRAD_NODE_no_grad(node) ""
#define BYTEGRAD_UNARY_INFO(op, dtypes, grad, node, autocast) \
  OpInfo{#op, DtypeRule::dtypes, #grad[0] == 'g', BYTEGRAD_NODE_##grad(node), "unary", AutocastPolicy::autocast},
#define BYTEGRAD_BINARY_INFO(op, dtypes, args, grad, node, autocast) \
  OpInfo{#op, DtypeRule::dtypes, #grad[0] == 'g', BYTEGRAD_NODE_##grad(node), "binary", AutocastPolicy::autocast},
#define BYTEGRAD_SCALAR_INFO(op, kernel, order, dtypes, grad, node, autocast) \
  OpInfo{                                                                     \
      #op, DtypeRule::dtypes, #grad[0] == 'g', BYTEGRAD_NODE_##grad(node), "binary_scalar", AutocastPolicy::autocast},
#define BYTEGRAD_STRUCTURED_INFO(op, kernel, dtypes, args, grad, node) \
  OpInfo{#op, DtypeRule::dtypes, #grad[0] == 'g', BYTEGRAD_NODE_##grad(node), #kernel, AutocastPolicy::none},
inline constexpr std::array<OpInfo, kOpCount> kRows = {BYTEGRAD_UNARY_OPS(BYTEGRAD_UNARY_INFO) BYTEGRAD_BINARY_OPS(
    BYTEGRAD_BINARY_INFO) BYTEGRAD_SCALAR_OPS(BYTEGRAD_SCALAR_INFO) BYTEGRAD_STRUCTURED_OPS(BYTEGRAD_STRUCTURED_INFO)};
#undef BYTEGRAD_UNARY_INFO
#undef BYTEGRAD_BINARY_INFO
#undef BYTEGRAD_SCALAR_INFO
#undef BYTEGRAD_STRUCTURED_INFO
#undef BYTEGRAD_NODE_grad
#undef BYTEGRAD_NODE_no_grad
}  // namespace op_table_detail

constexpr const OpInfo& op_info(OpId op) { return op_table_detail::kRows[static_cast<size_t>(op)]; }
constexpr std::string_view op_name(OpId op) { return op_info(op).name; }
constexpr bool is_differentiable(OpId op) { return op_info(op).differentiable; }
constexpr const std::array<OpInfo, kOpCount>& all_ops() { return op_table_detail::kRows; }

constexpr OpId op_id(UnaryOp op) { return static_cast<OpId>(static_cast<uint16_t>(op)); }
constexpr OpId op_id(BinaryOp op) {
  return static_cast<OpId>(static_cast<uint16_t>(op) + static_cast<uint16_t>(OpId::add));
}
constexpr bool has_bool_output(BinaryOp op) { return op_info(op_id(op)).dtypes == DtypeRule::to_bool; }
constexpr DtypeRule dtype_rule(UnaryOp op) { return op_info(op_id(op)).dtypes; }
constexpr DtypeRule dtype_rule(BinaryOp op) { return op_info(op_id(op)).dtypes; }

// A scalar row's kernel and operand order.
struct ScalarOpKernel {
  BinaryOp kernel;
  OperandOrder order;
};
constexpr ScalarOpKernel scalar_op_kernel(OpId op) {
  switch (op) {
#define BYTEGRAD_SCALAR_KERNEL(op, kernel, order, ...) \
  case OpId::op: return {BinaryOp::kernel, OperandOrder::order};
    BYTEGRAD_SCALAR_OPS(BYTEGRAD_SCALAR_KERNEL)
#undef BYTEGRAD_SCALAR_KERNEL
    default: return {BinaryOp::add, OperandOrder::tensor_first};
  }
}

// ------------------------------------------------------------------------------ typed arguments

template <OpId op>
struct OpArgsOf {
  using type = op_args::None;
};
#define BYTEGRAD_ARGS_BINARY(op, dtypes, args, ...) \
  template <>                                       \
  struct OpArgsOf<OpId::op> {                       \
    using type = op_args::args;                     \
  };
#define BYTEGRAD_ARGS_SCALAR(op, ...) \
  template <>                         \
  struct OpArgsOf<OpId::op> {         \
    using type = op_args::Scalar;     \
  };
#define BYTEGRAD_ARGS_STRUCTURED(op, kernel, dtypes, args, ...) \
  template <>                                                   \
  struct OpArgsOf<OpId::op> {                                   \
    using type = op_args::args;                                 \
  };
BYTEGRAD_BINARY_OPS(BYTEGRAD_ARGS_BINARY)
BYTEGRAD_SCALAR_OPS(BYTEGRAD_ARGS_SCALAR)
BYTEGRAD_STRUCTURED_OPS(BYTEGRAD_ARGS_STRUCTURED)
#undef BYTEGRAD_ARGS_BINARY
#undef BYTEGRAD_ARGS_SCALAR
#undef BYTEGRAD_ARGS_STRUCTURED
// The argument struct an op records (core/op_args.h).
template <OpId op>
using ArgsOf = typename OpArgsOf<op>::type;

}  // namespace bytegrad
