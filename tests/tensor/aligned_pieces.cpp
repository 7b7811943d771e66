// kernels/aligned_pieces.h on the cpu backend: a product with one operand whose leading dimension is off 16
// bytes, run as interleaved column groups cut at their 16-byte boundaries, gives the product computed in one
// call, in each layout it takes; every body piece sees aligned operands; refusals run nothing.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "bytegrad/kernels/aligned_pieces.h"
#include "bytegrad/kernels/backend.h"
#include "helpers.h"

using namespace bytegrad;

namespace {

struct Product {
  bool transa, transb;
  int64_t m, n, k, lda, ldb, ldc;
};

// Column-major storage, 64-byte aligned (the allocator's blocks are 512-byte aligned), random values.
struct Matrix {
  std::vector<double> storage;
  double* data = nullptr;
  Matrix(int64_t cols, int64_t ld, std::mt19937& rng) : storage(static_cast<size_t>(ld * cols + 8)) {
    std::uniform_real_distribution<double> value(-1.0, 1.0);
    for (double& x : storage) x = value(rng);
    data = storage.data();
    while (reinterpret_cast<uintptr_t>(data) % 64 != 0) ++data;
  }
};

GemmArgs args_for(const Product& p, const Matrix& a, const Matrix& b, double* c) {
  GemmArgs g;
  g.transa = p.transa;
  g.transb = p.transb;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.a = a.data;
  g.lda = p.lda;
  g.b = b.data;
  g.ldb = p.ldb;
  g.c = c;
  g.ldc = p.ldc;
  g.dtype = ScalarType::float64;  // 16 bytes are 2 elements: an odd leading dimension is off
  g.device = kCpu;
  g.beta = 0.5;  // C's old values count: the pieces that add up a sum must take it once
  return g;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

struct Pieces {
  int total = 0, bodies = 0, unaligned_bodies = 0;  // bodies: pieces at least 16 bytes along the cut axis
  int64_t widest_unaligned = 0;  // the cut axis's extent in the widest piece with an unaligned operand
};

// Runs p in aligned pieces and in one call and compares; returns what the pieces looked like. `cut` is the
// extent (m, n or k) the layout cuts at 16-byte boundaries.
Pieces check_pieces(const Product& p, int64_t GemmArgs::*cut) {
  std::mt19937 rng(7);
  const Matrix a(p.transa ? p.m : p.k, p.lda, rng), b(p.transb ? p.k : p.n, p.ldb, rng), c0(p.n, p.ldc, rng);
  Matrix want = c0, got = c0;
  want.data = want.storage.data() + (c0.data - c0.storage.data());
  got.data = got.storage.data() + (c0.data - c0.storage.data());
  KernelBackend& cpu = kernel_backend(kCpu);
  cpu.gemm(args_for(p, a, b, want.data));
  Pieces seen;
  const bool ran = gemm_in_aligned_pieces(args_for(p, a, b, got.data), [&](const GemmArgs& piece) {
    ++seen.total;
    const bool all_aligned =
        aligned(piece.a) && aligned(piece.b) && aligned(piece.c) && leading_dimension_aligned(piece.lda, piece.dtype) &&
        leading_dimension_aligned(piece.ldb, piece.dtype) && leading_dimension_aligned(piece.ldc, piece.dtype);
    if (piece.*cut >= 2) {
      ++seen.bodies;
      seen.unaligned_bodies += all_aligned ? 0 : 1;
    }
    if (!all_aligned) seen.widest_unaligned = std::max(seen.widest_unaligned, piece.*cut);
    cpu.gemm(piece);
  });
  REQUIRE(ran);
  for (size_t i = 0; i < want.storage.size(); ++i)  // the padding between columns is left alone too
    REQUIRE(std::abs(got.storage[i] - want.storage[i]) <= 1e-12 * std::max(1.0, std::abs(want.storage[i])));
  return seen;
}

}  // namespace

TEST_CASE("gemm_in_aligned_pieces: interleaved groups give the whole product in each layout it takes") {
  const int64_t m = 37, n = 50, k = 29;  // odd sizes: every group has a head or a tail somewhere
  // C unaligned, op(A) = A^T: the logits' forward (C = W^T X, C's leading dimension the vocabulary)
  Pieces forward = check_pieces({true, false, m, n, k, 30, 30, 37}, &GemmArgs::m);
  // B unaligned, op(B) = B: the input's gradient (B the logits' gradient, summed over the vocabulary)
  Pieces input_grad = check_pieces({false, false, m, n, k, 38, 29, 38}, &GemmArgs::k);
  // B unaligned, op(B) = B^T: the weight's gradient (summed over the tokens, B's stored columns)
  Pieces weight_grad = check_pieces({false, true, m, n, k, 38, 51, 38}, &GemmArgs::n);
  for (const Pieces& p : {forward, input_grad, weight_grad}) {
    CHECK(p.bodies == 2);  // one body per group: float64 has two groups
    CHECK(p.unaligned_bodies == 0);
    CHECK(p.total > p.bodies);       // and some heads or tails
    CHECK(p.widest_unaligned == 1);  // heads and tails are under 16 bytes (one float64) wide
  }
  // A leading dimension that is even but not a multiple of 16 bytes in float32 (4 elements): two groups
  std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 1.0f), c(64 * 64, 0.0f);
  GemmArgs g;
  g.transa = true;
  g.m = 30, g.n = 8, g.k = 4;
  g.a = a.data(), g.lda = 4;
  g.b = b.data(), g.ldb = 4;
  g.c = c.data(), g.ldc = 30;  // 120 bytes: columns alternate between two offsets modulo 16
  g.device = kCpu;
  int groups_bodies = 0;
  CHECK(gemm_in_aligned_pieces(g, [&](const GemmArgs& piece) {
    if (piece.m >= 4) {
      ++groups_bodies;
      CHECK((aligned(piece.c) && leading_dimension_aligned(piece.ldc, piece.dtype)));
    }
    kernel_backend(kCpu).gemm(piece);
  }));
  CHECK(groups_bodies == 2);
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) REQUIRE(c[static_cast<size_t>(i + j * g.ldc)] == 4.0f);
}

TEST_CASE("gemm_in_aligned_pieces: what it leaves to the plain call") {
  std::vector<double> a(64 * 64), b(64 * 64), c(64 * 64);
  GemmArgs g;
  g.transa = true;
  g.m = 9, g.n = 9, g.k = 9;
  g.a = a.data(), g.lda = 10;
  g.b = b.data(), g.ldb = 10;
  g.c = c.data(), g.ldc = 9;
  g.dtype = ScalarType::float64;
  g.device = kCpu;
  int calls = 0;
  auto pieces = [&](const GemmArgs& args) {
    calls = 0;
    const bool ran = gemm_in_aligned_pieces(args, [&](const GemmArgs&) { ++calls; });
    CHECK(ran == (calls > 0));  // a refusal runs nothing
    return ran;
  };
  CHECK(pieces(g));  // qualifies; each refusal below changes one thing
  g.ldc = 10;
  CHECK_FALSE(pieces(g));  // every operand aligned
  g.ldc = 9;
  g.lda = 9;
  CHECK_FALSE(pieces(g));  // two unaligned
  g.lda = 10;
  g.transa = false;
  CHECK_FALSE(pieces(g));  // C unaligned with op(A) = A: the cut axis is A's contiguous one too
  g.transa = true;
  g.transb = true;
  CHECK_FALSE(pieces(g));  // C unaligned with op(B) = B^T: C's columns would be B's contiguous axis
  g.transb = false;
  g.batches = 2;
  CHECK_FALSE(pieces(g));  // batched
  g.batches = 1;
  g.c = c.data() + 1;
  CHECK_FALSE(pieces(g));  // C itself off 16 bytes
  g.c = c.data();
  g.ldc = 10, g.ldb = 9;
  CHECK_FALSE(pieces(g));                 // B unaligned with op(A) = A^T
  g.lda = 10, g.ldb = INT32_MAX / 2 + 2;  // odd
  g.transa = false;
  CHECK_FALSE(pieces(g));  // two groups of B's columns would put ldb past cuBLAS's int
}
