// The typed arguments an op hands to its derivative (core/op_table.h names one of these per op). They hold
// what the forward knew and the backward needs: plain values, never tensors (those travel as the record's
// inputs and outputs). Dimensions are already wrapped (non-negative).
#pragma once

#include <cstdint>
#include <optional>
#include <variant>

#include "bytegrad/core/strided_view.h"

namespace bytegrad {

// How a loss combines its per-element terms (PyTorch's at::Reduction, same numbering).
enum class Reduction { none = 0, mean = 1, sum = 2 };

namespace op_args {

struct None {};
// add/sub: a + alpha * b.
struct Alpha {
  double alpha = 1.0;
};
// The op's one number: a Python-number operand (add_scalar, pow_scalar's exponent), a fill value
// (masked_fill, fill_), a ternary update's value (lerp_'s weight, addcmul_'s value).
struct Scalar {
  double value = 0.0;
};
struct Dim {
  int64_t dim = 0;
};
// clamp with Python-number bounds: either may be absent (not both).
struct Clamp {
  std::optional<double> min, max;
};
// A reduction over `dims` (empty with whole: every dimension, as dim=None).
struct Dims {
  Shape dims;
  bool keepdim = false;
};
struct Variance {
  Shape dims;
  bool keepdim = false;
  bool whole = false;  // dim=None: every dimension
  double correction = 1.0;
};
struct Transpose {
  int64_t dim0 = 0, dim1 = 0;
};
struct Permutation {
  Shape order;
};
struct Select {
  int64_t dim = 0, index = 0;
};
struct Slice {
  int64_t dim = 0, start = 0, end = 0, step = 1;  // resolved against the size
};
struct Split {
  int64_t split_size = 0, dim = 0;
};
struct Addmm {
  double beta = 1.0, alpha = 1.0;
};
struct Diagonal {
  int64_t diagonal = 0;
};
struct Dropout {
  double p = 0.5;
};
struct LossReduction {
  Reduction reduction = Reduction::mean;
};
struct NllLoss {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
};
struct LayerNorm {
  Shape normalized_shape;
  double eps = 1e-5;
};
// constant_pad_nd: PyTorch's pad list (the last dimension's (before, after) first, then the one before it,
// ...; negative entries crop) and the fill value.
struct Pad {
  Shape pad;
  double value = 0.0;
};
// scaled_dot_product_attention's fused backends: the causal flag and the softmax scale (resolved: the
// caller's scale, or 1 / sqrt(head dim)); with dropout its probability and the call's draw (the counter-based
// generator's seed and offset, which backward reuses to drop the same elements).
// sort along dim; topk's k largest (or smallest) along dim, sorted or in any order.
struct Sort {
  int64_t dim = 0;
  bool descending = false;
};
struct TopK {
  int64_t k = 0, dim = 0;
  bool largest = true, sorted = true;
};
struct Attention {
  bool is_causal = false;
  double scale = 1.0;
  double dropout_p = 0.0;
  uint64_t philox_seed = 0, philox_offset = 0;
};

}  // namespace op_args

// Any op's arguments (an op's own type is ArgsOf<op>, core/op_table.h).
using OpArgs =
    std::variant<op_args::None, op_args::Alpha, op_args::Scalar, op_args::Dim, op_args::Dims, op_args::Variance,
                 op_args::Transpose, op_args::Permutation, op_args::Select, op_args::Slice, op_args::Split,
                 op_args::Addmm, op_args::Diagonal, op_args::Dropout, op_args::LossReduction, op_args::NllLoss,
                 op_args::LayerNorm, op_args::Pad, op_args::Attention, op_args::Clamp, op_args::Sort, op_args::TopK>;

}  // namespace bytegrad
