#include "bytegrad/kernels/aligned_pieces.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <vector>

namespace bytegrad {

namespace {

constexpr int64_t kAlignmentBytes = 16;

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignmentBytes == 0; }

struct Range {
  int64_t begin, end;
};

// An axis of `extent` elements whose first element lies `offset` elements past a 16-byte boundary, cut into
// the body (starting on a boundary, whole groups of `step`) first, then the head before it and the tail after.
std::vector<Range> axis_pieces(int64_t extent, int64_t offset, int64_t step) {
  const int64_t head_end = std::min(extent, (step - offset % step) % step);
  const int64_t body_end = head_end + (extent - head_end) / step * step;
  std::vector<Range> pieces;
  for (Range r : {Range{head_end, body_end}, Range{0, head_end}, Range{body_end, extent}})
    if (r.end > r.begin) pieces.push_back(r);
  return pieces;
}

}  // namespace

bool leading_dimension_aligned(int64_t ld, ScalarType dtype) {
  return ld * static_cast<int64_t>(element_size(dtype)) % kAlignmentBytes == 0;
}

bool gemm_in_aligned_pieces(const GemmArgs& g, const std::function<void(const GemmArgs&)>& gemm) {
  if (g.batches != 1 || g.bias) return false;
  const auto element = static_cast<int64_t>(element_size(g.dtype));
  if (element >= kAlignmentBytes || kAlignmentBytes % element != 0) return false;
  if (!aligned(g.a) || !aligned(g.b) || !aligned(g.c)) return false;
  const int64_t step = kAlignmentBytes / element;  // elements in 16 bytes
  const bool bad_a = !leading_dimension_aligned(g.lda, g.dtype);
  const bool bad_b = !leading_dimension_aligned(g.ldb, g.dtype);
  const bool bad_c = !leading_dimension_aligned(g.ldc, g.dtype);
  if (bad_a || bad_b == bad_c) return false;
  const int64_t bad_ld = bad_c ? g.ldc : g.ldb;
  // Columns `period` apart start at the same offset modulo 16 bytes.
  const int64_t period = step / std::gcd(bad_ld % step, step);
  for (int64_t ld : {g.lda, g.ldb, g.ldc})
    if (ld > INT_MAX / period) return false;
  auto at = [&](const void* p, int64_t elements) {
    return const_cast<char*>(static_cast<const char*>(p)) + elements * element;
  };
  auto group_size = [&](int64_t extent, int64_t q) { return (extent - q + period - 1) / period; };
  // Columns q, q + period, ... of op(B) (B not transposed) and of C.
  auto column_group = [&](int64_t q) {
    GemmArgs group = g;
    group.n = group_size(g.n, q);
    group.b = at(g.b, q * g.ldb);
    group.ldb = period * g.ldb;
    group.c = at(g.c, q * g.ldc);
    group.ldc = period * g.ldc;
    return group;
  };

  if (bad_c) {
    if (!g.transa || g.transb) return false;
    for (int64_t q = 0; q < std::min(period, g.n); ++q) {
      const GemmArgs group = column_group(q);
      for (Range r : axis_pieces(g.m, q * g.ldc % step, step)) {
        GemmArgs piece = group;
        piece.m = r.end - r.begin;
        piece.a = at(g.a, r.begin * g.lda);  // op(A)'s row i is A's stored column i
        piece.c = at(group.c, r.begin);
        gemm(piece);
      }
    }
    return true;
  }
  if (g.transa) return false;
  if (!g.transb) {
    for (int64_t q = 0; q < std::min(period, g.n); ++q) {
      const GemmArgs group = column_group(q);
      bool first = true;
      for (Range r : axis_pieces(g.k, q * g.ldb % step, step)) {
        GemmArgs piece = group;
        piece.k = r.end - r.begin;
        piece.a = at(g.a, r.begin * g.lda);
        piece.b = at(group.b, r.begin);
        piece.beta = first ? g.beta : 1.0;
        first = false;
        gemm(piece);
      }
    }
    return true;
  }
  // op(B) = B^T: op(B)'s rows (the sum over k) are B's stored columns; group 0 starts aligned, so its pieces
  // cover every column of C and take the caller's beta; the other groups add to them.
  for (int64_t q = 0; q < std::min(period, g.k); ++q) {
    GemmArgs group = g;
    group.k = group_size(g.k, q);
    group.a = at(g.a, q * g.lda);
    group.lda = period * g.lda;
    group.b = at(g.b, q * g.ldb);
    group.ldb = period * g.ldb;
    group.beta = q == 0 ? g.beta : 1.0;
    for (Range r : axis_pieces(g.n, q * g.ldb % step, step)) {
      GemmArgs piece = group;
      piece.n = r.end - r.begin;
      piece.b = at(group.b, r.begin);
      piece.c = at(g.c, r.begin * g.ldc);
      gemm(piece);
    }
  }
  return true;
}

}  // namespace bytegrad
