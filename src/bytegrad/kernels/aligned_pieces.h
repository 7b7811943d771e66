// Matrix products with one operand whose leading dimension is off 16 bytes, run as products whose large
// pieces see only 16-byte aligned operands. GPT-2's 50257-wide logits are the case that matters: a 16-bit row
// that long starts on a 2-byte boundary, and cuBLAS then has only its oldest kernels (sm75 cutlass, about
// 100 TFLOP/s on the H100: 15 ms of a 44 ms bf16 step, in PyTorch's eager step as in bytegrad's).
//
// No copy and no memory: with an odd leading dimension, every `step`-th column (step = elements in 16
// bytes) starts at the same offset modulo 16 bytes. So the columns are taken in `step` interleaved groups,
// each a matrix whose leading dimension is step times the original (a multiple of 16 bytes); within a
// group, the contiguous axis is cut where its first 16-byte boundary falls: a body that starts aligned and
// spans whole 16-byte groups, and a head and a tail under `step` elements each. The head and tail products
// are small and may be slow; the bodies are aligned.
#pragma once

#include <cstdint>
#include <functional>

#include "bytegrad/kernels/gemm_args.h"

namespace bytegrad {

// Whether every column of a matrix with this leading dimension starts on a 16-byte boundary (given an
// aligned first column).
bool leading_dimension_aligned(int64_t ld, ScalarType dtype);

// Runs g (one matrix, no bias, all three pointers 16-byte aligned) as aligned pieces when exactly one
// operand's leading dimension is off 16 bytes, in a layout where the pieces can be expressed:
//   - C unaligned, op(A) = A^T, op(B) = B: C's columns (and B's) in groups; A's stored columns (op(A)'s rows,
//     C's contiguous axis) cut into head, body and tail. Every element of C is written once.
//   - B unaligned, op(A) = A, op(B) = B: B's and C's columns in groups; the sum over k cut into head, body and
//     tail, added up in C (beta 1 after the first piece).
//   - B unaligned, op(A) = A, op(B) = B^T: B's stored columns (the sum over k) and A's columns in groups,
//     added up in C; each group's B rows (C's columns) cut into head, body and tail.
// The sums split over k are rounded to C's dtype once per piece, so 16-bit results can differ from one
// product's in the last bits. `gemm` runs each piece, in order, on one stream. Returns false, having run
// nothing, when g does not qualify (aligned already, A unaligned, another layout, leading dimensions that
// grouping would take past INT_MAX).
bool gemm_in_aligned_pieces(const GemmArgs& g, const std::function<void(const GemmArgs&)>& gemm);

}  // namespace bytegrad
