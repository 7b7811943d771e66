// Scaled dot-product attention on tensor cores, for float16 and bfloat16 with head dimensions up to 128 (the
// cases PyTorch hands to cuDNN or its flash backend on an H100): FlashAttention-2's scheme on mma.sync
// m16n8k16 products accumulating in float, with the scores, probabilities and accumulators in registers.
// cuda_attention.cu sends other cases (float32, float64, larger heads) to its SIMT kernel; both compute what
// backend.h's attention_forward and attention_backward describe, and neither needs device scratch memory
// (the op layer allocates PyTorch's blocks, so memory is the same whichever kernel runs).
//
// Layout of the work: a block of 4 warps owns 64 rows of one (b, h) (query rows in the forward and in dq,
// key rows in dk/dv), 16 rows per warp; the other operand streams through shared memory in tiles of 64 rows,
// the next tile copied (cp.async) while the current one is used. Shared rows are padded by 8 elements
// (16 bytes), which keeps ldmatrix free of bank conflicts; head dimensions below the kernel's kD are
// zero-padded, which adds nothing to any product.
//  - forward: per tile S = Q K^T (16 x 64 per warp), an online softmax on the registers (running maximum and
//    sum per row, the output accumulators rescaled by exp(m_old - m_new)), then O += P V with P reused as the
//    next product's A operand; at the end O / l and lse = m + log l.
//  - backward, two kernels and no atomics: dk/dv per key block streaming query tiles (S^T = K Q^T and
//    dP^T = V dO^T, P^T from the saved lse, dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q), then dq
//    per query block streaming key tiles (dQ += dS K). delta_i = dout_i . out_i is computed where needed.
//    P and dS go through T for the products, as FlashAttention does. That is the path without scratch.
//
// What runs (the kernels named ...2): the forward gives each warp 32 query rows for heads up to 64 (a block
// of 128 rows), so every K and V fragment read from shared memory feeds two mma rows, launches the longest
// causal row blocks first, and masks only the tiles that cross the diagonal or an end. With the cuDNN
// workspace the backward is three kernels: delta and zeros for the float dQ accumulator (16-byte accesses),
// dk/dv per key block with dQ += dS K added to the accumulator (sm_90: 16-byte vector reductions, red.v4.f32)
// and lse and delta staged asynchronously beside each query tile, then dq = scale * accumulator.
//
// Fragments (PTX ISA, mma.m16n8k16 with .row.col): lane = 4 g + t. A (16 x 16) holds rows g and g + 8,
// columns 2t, 2t + 1 and 2t + 8, 2t + 9; B (16 x 8) holds rows 2t, 2t + 1, 2t + 8, 2t + 9 of column g;
// C (16 x 8) holds rows g and g + 8, columns 2t and 2t + 1. So two C tiles side by side are one A operand.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_attention_rows.cuh"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

constexpr int kRows = 64;      // rows a block owns
constexpr int kTileRows = 64;  // rows of the streamed operand per tile
constexpr int kWarpRows = 16;  // rows per warp (one mma tile high)
constexpr int kWarps = kRows / kWarpRows;
constexpr int kThreads = kWarps * 32;
[[maybe_unused]] constexpr int kTileCols = kTileRows / 8;
[[maybe_unused]] constexpr int kProbLd =
    kTileRows + 8;  // 16-bit rows of dS^T in shared memory  // 8-wide C tiles across a tile of the streamed operand
constexpr float kLog2e = 1.4426950408889634f;
[[maybe_unused]] constexpr float kLn2 = 0.6931471805599453f;

template <int kD>
__host__ __device__ constexpr int operand_ld() {
  return kD + 8;
}

// Bytes of one staged operand tile (64 rows of kD, padded); a multiple of 128, so buffers stay aligned.
template <typename T, int kD>
__host__ __device__ constexpr size_t operand_bytes() {
  return sizeof(T) * kTileRows * operand_ld<kD>();
}

struct Shape {
  int64_t B, H, Sq, Sk;
  int D;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements; lanes 8m..8m+7 give the row addresses of matrix m.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// c += a b on one m16n8k16 tile.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a pair of T, the first in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// A 16 x 64 block of C tiles (c[j]: columns 8j..8j+7) as the A operands of four 16-wide k-steps.
template <typename T>
__device__ __forceinline__ void as_a_operand(uint32_t (&a)[kTileCols / 2][4], const float (&c)[kTileCols][4]) {
#pragma unroll
  for (int k = 0; k < kTileCols / 2; ++k) {
    a[k][0] = pack<T>(c[2 * k][0], c[2 * k][1]);
    a[k][1] = pack<T>(c[2 * k][2], c[2 * k][3]);
    a[k][2] = pack<T>(c[2 * k + 1][0], c[2 * k + 1][1]);
    a[k][3] = pack<T>(c[2 * k + 1][2], c[2 * k + 1][3]);
  }
}

// s = (16 rows of `a`) (64 rows of `b`)^T over kD: a warp's scores of its rows against a staged tile.
template <typename T, int kD>
__device__ __forceinline__ void products_with_rows(float (&s)[kTileCols][4], const T* a, const T* b) {
  constexpr int ld = operand_ld<kD>();
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kTileCols; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int k = 0; k < kD / 16; ++k) {
    uint32_t fa[4];
    ldmatrix_x4(fa, a + (lane % 16) * ld + k * 16 + (lane / 16) * 8);
#pragma unroll
    for (int j = 0; j < kTileCols; j += 2) {
      uint32_t fb[4];  // b0, b1 of tile j, then of tile j + 1
      ldmatrix_x4(fb, b + (8 * j + lane % 8 + (lane / 16) * 8) * ld + k * 16 + ((lane / 8) % 2) * 8);
      mma<T>(s[j], fa, fb[0], fb[1]);
      mma<T>(s[j + 1], fa, fb[2], fb[3]);
    }
  }
}

// acc += p (16 x 64, as A operands) times the staged tile `rows` (64 x kD).
template <typename T, int kD>
__device__ __forceinline__ void accumulate(float (&acc)[kD / 8][4], const uint32_t (&p)[kTileCols / 2][4],
                                           const T* rows) {
  constexpr int ld = operand_ld<kD>();
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < kTileCols / 2; ++k) {
#pragma unroll
    for (int n = 0; n < kD / 8; n += 2) {
      uint32_t fb[4];  // b0, b1 of column tile n, then of n + 1
      ldmatrix_x4_trans(fb, rows + (16 * k + lane % 8 + ((lane / 8) % 2) * 8) * ld + 8 * n + (lane / 16) * 8);
      mma<T>(acc[n], p[k], fb[0], fb[1]);
      mma<T>(acc[n + 1], p[k], fb[2], fb[3]);
    }
  }
}

// Stages rows [s0, s0 + kTileRows) of a (b, h) slice into a shared tile (ld kD + 8), zeros past the slice's
// rows and past D. `vectorised` (every row 16-byte aligned, D % 8 == 0): asynchronous 16-byte copies, to be
// waited for with wait_copies; otherwise plain element stores.
template <typename T, int kD, int kN = kTileRows>
__device__ __forceinline__ void stage_rows(T* tile, const Rows<const T>& src, int64_t b, int64_t h, int64_t s0,
                                           int64_t rows, int D, bool vectorised) {
  constexpr int ld = operand_ld<kD>();
  if (vectorised) {
    constexpr int chunks = kD / 8;
    for (int idx = threadIdx.x; idx < kN * chunks; idx += kThreads) {
      const int r = idx / chunks, c = (idx % chunks) * 8;
      const int64_t s = s0 + r;
      const bool inside = s < rows && c < D;
      const T* from = inside ? src.at(b, h, s) + c : src.data;  // not read when outside: zero-filled
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(tile + r * ld + c)),
                   "l"(from), "r"(inside ? 16 : 0));
    }
  } else {
    for (int idx = threadIdx.x; idx < kN * kD; idx += kThreads) {
      const int r = idx / kD, c = idx % kD;
      const int64_t s = s0 + r;
      tile[r * ld + c] = s < rows && c < D ? src.at(b, h, s)[c] : convert<T>(0.0f);
    }
  }
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` committed groups are still in flight (0 or 1).
__device__ __forceinline__ void wait_copies(int pending) {
  if (pending == 0) asm volatile("cp.async.wait_group 0;\n" ::);
  else asm volatile("cp.async.wait_group 1;\n" ::);
}

// 2^x on the special-function unit (2^-inf = 0), as exp2f compiles to with fast math.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// One float (4 bytes) copied asynchronously into shared memory, zero when !inside.
__device__ __forceinline__ void copy_float_async(float* dst, const float* src, bool inside) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(inside ? 4 : 0));
}

// Writes a warp's 16 rows x D of C tiles (acc[n]: columns 8n..8n+7) times the row's factor (factor0 for rows
// r0 + g, factor1 for r0 + 8 + g) to rows r0.. of dst; `paired` (D even, rows 4-byte aligned): two elements
// per store.
template <typename T, int kD>
__device__ __forceinline__ void store_tile_rows(const Rows<T>& dst, const float (&acc)[kD / 8][4], int64_t b, int64_t h,
                                                int64_t r0, int64_t rows, int D, float factor0, float factor1,
                                                bool paired) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t s = r0 + g + 8 * half;
    if (s >= rows) continue;
    T* out = dst.at(b, h, s);
    const float factor = half ? factor1 : factor0;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      const int d = 8 * n + 2 * t;
      if (paired) {
        if (d < D)
          *reinterpret_cast<uint32_t*>(out + d) = pack<T>(acc[n][2 * half] * factor, acc[n][2 * half + 1] * factor);
      } else {
        if (d < D) out[d] = convert<T>(acc[n][2 * half] * factor);
        if (d + 1 < D) out[d + 1] = convert<T>(acc[n][2 * half + 1] * factor);
      }
    }
  }
}

#endif  // __CUDA_ARCH__ >= 800

// ------------------------------------------------------------------------------------------- forward

template <typename T>
struct ForwardParams {
  Rows<T> out;
  Rows<float> lse;  // data nullptr when not wanted
  Rows<const T> q, k, v;
  Shape n;
  float scale_log2;  // scale * log2(e): scores in base 2
  bool causal, vectorised;
  bool paired_out;  // out takes two elements per store
};

// The forward as run: each warp owns kM row tiles (32 rows for heads up to 64, so each K/V fragment read from
// shared memory serves two mma rows), the block 4 warps of them (128 rows), its Q fragments held in registers
// for the whole key loop. The longest (causal: last) row blocks are launched first; the causal mask and the
// key-range test run only on the tiles that cross them.
template <int kD>
struct ForwardShape {
  static constexpr int kM = kD <= 64 ? 2 : 1;                 // 16-row mma tiles per warp
  static constexpr int kBlockRows = kWarps * kWarpRows * kM;  // query rows per block
};

// kKeys: keys per staged tile (64, or 32 to hold fewer scores); kQInRegisters: Q's fragments loaded once
// (else re-read from shared memory per tile); kMinBlocks: resident blocks the registers are capped for.
template <typename T, int kD, int kKeys, bool kQInRegisters, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) flash_forward2_kernel(ForwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int kM = ForwardShape<kD>::kM, kBlockRows = ForwardShape<kD>::kBlockRows;
  constexpr int kCols = kKeys / 8;  // 8-wide C tiles across a key tile
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = operand_ld<kD>();
  constexpr size_t ob = sizeof(T) * kKeys * ld;
  T* q_s = reinterpret_cast<T*>(smem);
  unsigned char* kv = smem + sizeof(T) * kBlockRows * ld;
  T* k_s[2] = {reinterpret_cast<T*>(kv), reinterpret_cast<T*>(kv + ob)};
  T* v_s[2] = {reinterpret_cast<T*>(kv + 2 * ob), reinterpret_cast<T*>(kv + 3 * ob)};

  const int Sq = static_cast<int>(p.n.Sq), Sk = static_cast<int>(p.n.Sk);
  const int64_t BH = p.n.B * p.n.H;
  const int row_blocks = (Sq + kBlockRows - 1) / kBlockRows;
  const int64_t bh = blockIdx.x % BH;
  const int q0 = (row_blocks - 1 - static_cast<int>(blockIdx.x / BH)) * kBlockRows;  // longest first
  const int64_t b = bh / p.n.H, h = bh % p.n.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_row0 = q0 + warp * kWarpRows * kM, warp_row_last = warp_row0 + kWarpRows * kM - 1;

  const int keys = p.causal ? min(Sk, min(Sq, q0 + kBlockRows)) : Sk;
  const int tiles = (keys + kKeys - 1) / kKeys;
  stage_rows<T, kD, kBlockRows>(q_s, p.q, b, h, q0, Sq, p.n.D, p.vectorised);
  if (tiles > 0) {
    stage_rows<T, kD, kKeys>(k_s[0], p.k, b, h, 0, Sk, p.n.D, p.vectorised);
    stage_rows<T, kD, kKeys>(v_s[0], p.v, b, h, 0, Sk, p.n.D, p.vectorised);
  }
  commit_copies();

  float m[kM][2], l[kM][2];  // base 2; l is this thread's part of the row sum
  float o[kM][kD / 8][4];
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
  }
  uint32_t qf[kM][kQInRegisters ? kD / 16 : 1][4];
  // keys visible to every row of the warp: tiles wholly below this need no mask
  const int unmasked_end = p.causal ? min(Sk, warp_row0 + 1) : Sk;

  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile % 2;
    const int t0 = tile * kKeys;
    wait_copies(0);
    __syncthreads();  // this tile is staged, and every warp is done with the other stage
    if (kQInRegisters && tile == 0) {
#pragma unroll
      for (int i = 0; i < kM; ++i)
#pragma unroll
        for (int k = 0; k < kD / 16; ++k)
          ldmatrix_x4(qf[i][kQInRegisters ? k : 0],
                      q_s + (warp * kWarpRows * kM + 16 * i + lane % 16) * ld + k * 16 + (lane / 16) * 8);
    }
    if (tile + 1 < tiles) {
      stage_rows<T, kD, kKeys>((stage ? k_s[0] : k_s[1]), p.k, b, h, t0 + kKeys, Sk, p.n.D, p.vectorised);
      stage_rows<T, kD, kKeys>((stage ? v_s[0] : v_s[1]), p.v, b, h, t0 + kKeys, Sk, p.n.D, p.vectorised);
    }
    commit_copies();
    if (p.causal && t0 > warp_row_last) continue;  // no row of this warp sees the tile
    const T* kt = stage ? k_s[1] : k_s[0];
    const T* vt = stage ? v_s[1] : v_s[0];
    float s[kM][kCols][4];
#pragma unroll
    for (int i = 0; i < kM; ++i)
#pragma unroll
      for (int j = 0; j < kCols; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < kD / 16; ++k) {
      if constexpr (!kQInRegisters) {
#pragma unroll
        for (int i = 0; i < kM; ++i)
          ldmatrix_x4(qf[i][0], q_s + (warp * kWarpRows * kM + 16 * i + lane % 16) * ld + k * 16 + (lane / 16) * 8);
      }
#pragma unroll
      for (int j = 0; j < kCols; j += 2) {
        uint32_t fb[4];
        ldmatrix_x4(fb, kt + (8 * j + lane % 8 + (lane / 16) * 8) * ld + k * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          mma<T>(s[i][j], qf[i][kQInRegisters ? k : 0], fb[0], fb[1]);
          mma<T>(s[i][j + 1], qf[i][kQInRegisters ? k : 0], fb[2], fb[3]);
        }
      }
    }
    const bool masked = t0 + kKeys > unmasked_end;
    uint32_t pa[kM][kCols / 2][4];
#pragma unroll
    for (int i = 0; i < kM; ++i) {
      float tile_max[2] = {-INFINITY, -INFINITY};
      if (masked) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp_row0 + 16 * i + g + 8 * r;
          const int visible_end = p.causal ? min(Sk, row + 1) : Sk;
#pragma unroll
          for (int j = 0; j < kCols; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = t0 + 8 * j + 2 * t + e;
              float& x = s[i][j][2 * r + e];
              x = key < visible_end ? x * p.scale_log2 : -INFINITY;
              tile_max[r] = fmaxf(tile_max[r], x);
            }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kCols; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[i][j][e] *= p.scale_log2;
            tile_max[e / 2] = fmaxf(tile_max[e / 2], s[i][j][e]);
          }
      }
      float correction[2], m_use[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // the row's four threads (t = 0..3) agree on its maximum
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const float m_new = fmaxf(m[i][r], tile_max[r]);
        m_use[r] = m_new == -INFINITY ? 0.0f : m_new;   // a row with nothing visible yet keeps p = 0
        correction[r] = fast_exp2(m[i][r] - m_use[r]);  // 0 while m is -inf
        m[i][r] = m_new;
        l[i][r] *= correction[r];
      }
#pragma unroll
      for (int j = 0; j < kCols; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[i][j][e] = fast_exp2(s[i][j][e] - m_use[e / 2]);
          l[i][e / 2] += s[i][j][e];
        }
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        o[i][n][0] *= correction[0];
        o[i][n][1] *= correction[0];
        o[i][n][2] *= correction[1];
        o[i][n][3] *= correction[1];
      }
#pragma unroll
      for (int k = 0; k < kCols / 2; ++k) {
        pa[i][k][0] = pack<T>(s[i][2 * k][0], s[i][2 * k][1]);
        pa[i][k][1] = pack<T>(s[i][2 * k][2], s[i][2 * k][3]);
        pa[i][k][2] = pack<T>(s[i][2 * k + 1][0], s[i][2 * k + 1][1]);
        pa[i][k][3] = pack<T>(s[i][2 * k + 1][2], s[i][2 * k + 1][3]);
      }
    }
#pragma unroll
    for (int k = 0; k < kCols / 2; ++k) {
#pragma unroll
      for (int n = 0; n < kD / 8; n += 2) {
        uint32_t fb[4];
        ldmatrix_x4_trans(fb, vt + (16 * k + lane % 8 + ((lane / 8) % 2) * 8) * ld + 8 * n + (lane / 16) * 8);
#pragma unroll
        for (int i = 0; i < kM; ++i) {
          mma<T>(o[i][n], pa[i][k], fb[0], fb[1]);
          mma<T>(o[i][n + 1], pa[i][k], fb[2], fb[3]);
        }
      }
    }
  }
  wait_copies(0);
#pragma unroll
  for (int i = 0; i < kM; ++i) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + 16 * i + g + 8 * r;
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 1);
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 2);
      inv[r] = l[i][r] > 0.0f ? 1.0f / l[i][r] : 0.0f;
      if (t == 0 && p.lse.data && row < Sq)
        *p.lse.at(b, h, row) = l[i][r] > 0.0f ? (m[i][r] + log2f(l[i][r])) * kLn2 : -INFINITY;
    }
    store_tile_rows<T, kD>(p.out, o[i], b, h, warp_row0 + 16 * i, Sq, p.n.D, inv[0], inv[1], p.vectorised);
  }
#endif
}

// ------------------------------------------------------------------------------------------ backward

template <typename T>
struct BackwardParams : BackwardOperands<T> {
  Rows<const float> lse;
  Shape n;
  float scale, scale_log2;
  bool causal, vectorised;
  // With scratch: dq accumulated in float (atomically, by the dk/dv kernel) and delta computed beforehand,
  // both (B, H, Sq[, D]) contiguous; nullptr without.
  float* dq_acc;
  float* delta;
  bool vector_dq;     // dq_acc rows take 16-byte vector reductions (D % 4 == 0)
  bool paired_grads;  // dk and dv take two elements per store
  bool vector_rows;   // out, dout and dq rows take 16-byte accesses (D % 8 == 0)
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// delta_i = dout_i . out_i and lse_i (base 2) for rows [r0, r0 + kRows): two threads per row, dout from the
// staged tile `do_s`, out from global memory.
template <typename T, int kD>
__device__ __forceinline__ void row_stats(float* delta_s, float* lse2_s, const T* do_s, const BackwardParams<T>& p,
                                          int64_t b, int64_t h, int64_t r0) {
  constexpr int ld = operand_ld<kD>();
  static_assert(kThreads == 2 * kRows, "two threads per row");
  const int r = threadIdx.x / 2, half = threadIdx.x % 2;
  const int64_t i = r0 + r;
  if (p.delta) {  // computed by flash_backward_prepare_kernel
    if (half == 0) {
      delta_s[r] = i < p.n.Sq ? p.delta[(b * p.n.H + h) * p.n.Sq + i] : 0.0f;
      lse2_s[r] = i < p.n.Sq ? *p.lse.at(b, h, i) * kLog2e : 0.0f;
    }
    return;
  }
  float delta = 0.0f;
  if (i < p.n.Sq) {
    const T* o = p.out.at(b, h, i);
    for (int d = half; d < p.n.D; d += 2) delta += convert<float>(do_s[r * ld + d]) * convert<float>(o[d]);
  }
  delta += __shfl_xor_sync(0xffffffffu, delta, 1);
  if (half == 0) {
    delta_s[r] = delta;
    lse2_s[r] = i < p.n.Sq ? *p.lse.at(b, h, i) * kLog2e : 0.0f;
  }
}
#endif

// With scratch, before the dk/dv kernel: delta_i = dout_i . out_i into p.delta and zeros into p.dq_acc, a
// warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads) flash_backward_prepare_kernel(BackwardParams<T> p) {
  const int64_t rows = p.n.B * p.n.H * p.n.Sq;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t b = row / (p.n.H * p.n.Sq), h = row / p.n.Sq % p.n.H, i = row % p.n.Sq;
  const T* o = p.out.at(b, h, i);
  const T* g = p.dout.at(b, h, i);
  float delta = 0.0f;
  for (int d = lane; d < p.n.D; d += 32) {
    delta += convert<float>(o[d]) * convert<float>(g[d]);
    p.dq_acc[row * p.n.D + d] = 0.0f;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) delta += __shfl_xor_sync(0xffffffffu, delta, offset);
  if (lane == 0) p.delta[row] = delta;
}

// With scratch, after the dk/dv kernel: dq = scale * the float accumulator.
template <typename T>
__global__ void flash_backward_dq_convert_kernel(BackwardParams<T> p) {
  const int64_t total = p.n.B * p.n.H * p.n.Sq * p.n.D;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = idx % p.n.D, row = idx / p.n.D;
    const int64_t b = row / (p.n.H * p.n.Sq), h = row / p.n.Sq % p.n.H, i = row % p.n.Sq;
    p.dq.at(b, h, i)[d] = convert<T>(p.dq_acc[idx] * p.scale);
  }
}

// The two passes around the dk/dv kernel with 16-byte accesses (D % 8 == 0, out, dout and dq rows 16-byte
// aligned): zeros into the accumulator and delta (a thread per row), then dq = scale * the accumulator (eight
// elements a thread).
template <typename T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const T* x = reinterpret_cast<const T*>(&a);
  const T* y = reinterpret_cast<const T*>(&b);
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) sum += convert<float>(x[e]) * convert<float>(y[e]);
  return sum;
}

template <typename T>
__global__ void flash_backward_prepare2_kernel(BackwardParams<T> p) {
  const int64_t rows = p.n.B * p.n.H * p.n.Sq, quads = rows * p.n.D / 4;
  const int64_t units = rows > quads ? rows : quads;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (u < quads) reinterpret_cast<float4*>(p.dq_acc)[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (u < rows) {
      const int64_t b = u / (p.n.H * p.n.Sq), h = u / p.n.Sq % p.n.H, i = u % p.n.Sq;
      const uint4* o = reinterpret_cast<const uint4*>(p.out.at(b, h, i));
      const uint4* g = reinterpret_cast<const uint4*>(p.dout.at(b, h, i));
      float delta = 0.0f;
      for (int c = 0; c < p.n.D / 8; ++c) delta += dot8<T>(o[c], g[c]);
      p.delta[u] = delta;
    }
  }
}

template <typename T>
__global__ void flash_backward_dq_convert2_kernel(BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int chunks = p.n.D / 8;
  const int64_t units = p.n.B * p.n.H * p.n.Sq * chunks;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = u / chunks;
    const int c = static_cast<int>(u % chunks);
    const int64_t b = row / (p.n.H * p.n.Sq), h = row / p.n.Sq % p.n.H, i = row % p.n.Sq;
    const float4 lo = reinterpret_cast<const float4*>(p.dq_acc)[2 * u];
    const float4 hi = reinterpret_cast<const float4*>(p.dq_acc)[2 * u + 1];
    uint4 out;
    out.x = pack<T>(lo.x * p.scale, lo.y * p.scale);
    out.y = pack<T>(lo.z * p.scale, lo.w * p.scale);
    out.z = pack<T>(hi.x * p.scale, hi.y * p.scale);
    out.w = pack<T>(hi.z * p.scale, hi.w * p.scale);
    reinterpret_cast<uint4*>(p.dq.at(b, h, i))[c] = out;
  }
#endif
}

// What the backward kernels share: their shared memory's layout, the rows a block owns, a warp's products with a
// tile, zeroing an accumulator (inlined: each kernel compiles to the code it had with these written out).

// A backward block's shared memory, in tiles of operand_bytes: the two operands it keeps for every tile, the
// two it streams in two stages each ([stage]), then its float row statistics.
template <typename T, int kD>
struct BackwardTiles {
  T* kept_a;
  T* kept_b;
  T* streamed_a[2];
  T* streamed_b[2];
  float* stats;
  __device__ __forceinline__ explicit BackwardTiles(unsigned char* smem) {
    constexpr size_t ob = operand_bytes<T, kD>();
    kept_a = reinterpret_cast<T*>(smem);
    kept_b = reinterpret_cast<T*>(smem + ob);
    streamed_a[0] = reinterpret_cast<T*>(smem + 2 * ob);
    streamed_a[1] = reinterpret_cast<T*>(smem + 3 * ob);
    streamed_b[0] = reinterpret_cast<T*>(smem + 4 * ob);
    streamed_b[1] = reinterpret_cast<T*>(smem + 5 * ob);
    stats = reinterpret_cast<float*>(smem + 6 * ob);
  }
};

// A warp's two products with one streamed tile: s = (its kWarpRows rows of a) b^T, dp = (its rows of c) d^T.
struct WarpProducts {
  float s[kTileCols][4], dp[kTileCols][4];
};
template <typename T, int kD>
__device__ __forceinline__ WarpProducts warp_products(const T* a, const T* b, const T* c, const T* d, int warp) {
  constexpr int ld = operand_ld<kD>();
  WarpProducts r;
  products_with_rows<T, kD>(r.s, a + warp * kWarpRows * ld, b);
  products_with_rows<T, kD>(r.dp, c + warp * kWarpRows * ld, d);
  return r;
}

// The (b, h) slice and first row of the kRows rows (of `rows`) this block owns: the slice's blocks are
// consecutive in blockIdx.x.
struct BlockRows {
  int64_t b, h, r0;
};
__device__ __forceinline__ BlockRows block_rows(int64_t rows, const Shape& n) {
  const int64_t row_blocks = (rows + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x / row_blocks, r0 = (blockIdx.x % row_blocks) * kRows;
  return {bh / n.H, bh % n.H, r0};
}

template <int kN>
__device__ __forceinline__ void zero_tiles(float (&acc)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// One key block per thread block; query tiles stream through shared memory (the path without scratch; dq
// follows in flash_backward_dq_kernel).
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv_kernel(BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const auto& [k_s, v_s, q_s, do_s, stats] = BackwardTiles<T, kD>(smem);
  float* delta_s[2] = {stats, stats + kRows};
  float* lse2_s[2] = {delta_s[1] + kRows, delta_s[1] + 2 * kRows};

  const auto [b, h, k0] = block_rows(p.n.Sk, p.n);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t warp_key0 = k0 + warp * kWarpRows;
  const int64_t key[2] = {warp_key0 + g, warp_key0 + g + 8};

  // Causal: query rows before k0 see none of the block's keys.
  const int64_t first_row = p.causal ? (min(k0, p.n.Sq) / kTileRows) * kTileRows : 0;
  const int tiles = static_cast<int>((p.n.Sq - first_row + kTileRows - 1) / kTileRows);
  stage_rows<T, kD>(k_s, p.k, b, h, k0, p.n.Sk, p.n.D, p.vectorised);
  stage_rows<T, kD>(v_s, p.v, b, h, k0, p.n.Sk, p.n.D, p.vectorised);
  if (tiles > 0) {
    stage_rows<T, kD>(q_s[0], p.q, b, h, first_row, p.n.Sq, p.n.D, p.vectorised);
    stage_rows<T, kD>(do_s[0], p.dout, b, h, first_row, p.n.Sq, p.n.D, p.vectorised);
  }
  commit_copies();
  float dk[kD / 8][4], dv[kD / 8][4];
  zero_tiles(dk);
  zero_tiles(dv);

  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile % 2;
    const int64_t t0 = first_row + static_cast<int64_t>(tile) * kTileRows;
    wait_copies(0);
    __syncthreads();  // this tile is staged, and every warp is done with the other stage
    if (tile + 1 < tiles) {
      stage_rows<T, kD>((stage ? q_s[0] : q_s[1]), p.q, b, h, t0 + kTileRows, p.n.Sq, p.n.D, p.vectorised);
      stage_rows<T, kD>((stage ? do_s[0] : do_s[1]), p.dout, b, h, t0 + kTileRows, p.n.Sq, p.n.D, p.vectorised);
    }
    commit_copies();
    row_stats<T, kD>((stage ? delta_s[1] : delta_s[0]), (stage ? lse2_s[1] : lse2_s[0]), (stage ? do_s[1] : do_s[0]), p,
                     b, h, t0);
    __syncthreads();  // the tile's delta and lse are written
    // S^T and dP^T: this warp's keys x the tile's queries
    auto [s, dp] = warp_products<T, kD>(k_s, (stage ? q_s[1] : q_s[0]), v_s, (stage ? do_s[1] : do_s[0]), warp);
#pragma unroll
    for (int j = 0; j < kTileCols; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * j + 2 * t + e % 2;
        const int64_t i = t0 + qi, kj = key[e / 2];
        const bool visible = i < p.n.Sq && kj < p.n.Sk && (!p.causal || kj <= i);
        const float prob = visible ? exp2f(s[j][e] * p.scale_log2 - (stage ? lse2_s[1] : lse2_s[0])[qi]) : 0.0f;
        s[j][e] = prob;
        dp[j][e] = prob * (dp[j][e] - (stage ? delta_s[1] : delta_s[0])[qi]);
      }
    uint32_t pa[kTileCols / 2][4], dsa[kTileCols / 2][4];
    as_a_operand<T>(pa, s);
    as_a_operand<T>(dsa, dp);
    accumulate<T, kD>(dv, pa, (stage ? do_s[1] : do_s[0]));
    accumulate<T, kD>(dk, dsa, (stage ? q_s[1] : q_s[0]));
  }
  wait_copies(0);
  store_tile_rows<T, kD>(p.dk, dk, b, h, warp_key0, p.n.Sk, p.n.D, p.scale, p.scale, false);
  store_tile_rows<T, kD>(p.dv, dv, b, h, warp_key0, p.n.Sk, p.n.D, 1.0f, 1.0f, false);
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// dq_acc[row * D + d .. + 3] += a warp's 16 x kD dQ tile (C tiles dq[n], rows r0..r0+15 of one (b, h) slice).
// sm_90 with D % 4 == 0: each pair of lanes (t, t ^ 1) swaps halves so a lane holds four consecutive columns of
// one row, added with one vector reduction; otherwise one atomic add per element.
template <int kD>
__device__ __forceinline__ void add_dq_rows(float* slice, const float (&dq)[kD / 8][4], int r0, int rows, int D,
                                            bool vector_add) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#if __CUDA_ARCH__ >= 900
  if (vector_add) {
    const bool odd = t % 2;
    const int row = r0 + g + (odd ? 8 : 0);
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      // even t keeps row g and takes the odd neighbour's row-g pair; odd t keeps row g + 8
      const float send0 = odd ? dq[n][0] : dq[n][2], send1 = odd ? dq[n][1] : dq[n][3];
      const float got0 = __shfl_xor_sync(0xffffffffu, send0, 1), got1 = __shfl_xor_sync(0xffffffffu, send1, 1);
      float v0, v1, v2, v3;
      if (odd) {
        v0 = got0, v1 = got1, v2 = dq[n][2], v3 = dq[n][3];
      } else {
        v0 = dq[n][0], v1 = dq[n][1], v2 = got0, v3 = got1;
      }
      const int d = 8 * n + 2 * (t & ~1);
      if (row < rows && d < D)
        asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(
                         slice + static_cast<int64_t>(row) * D + d),
                     "f"(v0), "f"(v1), "f"(v2), "f"(v3)
                     : "memory");
    }
    return;
  }
#endif
  (void)vector_add;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    if (row >= rows) continue;
    float* out = slice + static_cast<int64_t>(row) * D;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      const int d = 8 * n + 2 * t;
      if (d < D) atomicAdd(out + d, dq[n][2 * r]);
      if (d + 1 < D) atomicAdd(out + d + 1, dq[n][2 * r + 1]);
    }
  }
}
#endif

// The backward with scratch, as run: one key block of 64 per thread block (16 keys a warp), query tiles of 64
// streaming through shared memory with their lse and delta (copied asynchronously beside them, so no tile
// waits on a global load), dQ += dS K added to the float accumulator by vector reductions. Longest (causal:
// first) key blocks are launched first; masks run only on the tiles that cross the diagonal or an end.
template <typename T, int kD, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kD <= 64 ? kMinBlocks : 1)
    flash_backward_dkdv2_kernel(BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<T, kD> smem_tiles(smem);
  T* const k_s = smem_tiles.kept_a;  // named, not bound: add_dq below captures it
  T* const v_s = smem_tiles.kept_b;
  T* const* q_s = smem_tiles.streamed_a;
  T* const* do_s = smem_tiles.streamed_b;
  float* lse_s[2] = {smem_tiles.stats, smem_tiles.stats + kTileRows};
  float* delta_s[2] = {lse_s[1] + kTileRows, lse_s[1] + 2 * kTileRows};
  // dS^T, the block's keys x a tile's queries, in two buffers: tile t's is written in iteration t and read
  // (for dQ) in iteration t + 1, after that iteration's one barrier
  T* ds_s[2] = {reinterpret_cast<T*>(delta_s[1] + kTileRows),
                reinterpret_cast<T*>(delta_s[1] + kTileRows) + kRows * kProbLd};

  const int Sq = static_cast<int>(p.n.Sq), Sk = static_cast<int>(p.n.Sk);
  const int64_t BH = p.n.B * p.n.H;
  const int key_blocks = (Sk + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x % BH;
  const int kb = static_cast<int>(blockIdx.x / BH);
  const int k0 = (p.causal ? kb : key_blocks - 1 - kb) * kRows;  // causal: the first key blocks see the most
  const int64_t b = bh / p.n.H, h = bh % p.n.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_key0 = k0 + warp * kWarpRows;
  float* dq_slice = p.dq_acc + bh * static_cast<int64_t>(Sq) * p.n.D;
  const float* delta_slice = p.delta + bh * static_cast<int64_t>(Sq);

  // Causal: query rows before k0 see none of the block's keys.
  const int first_row = p.causal ? (min(k0, Sq) / kTileRows) * kTileRows : 0;
  const int tiles = (Sq - first_row + kTileRows - 1) / kTileRows;
  auto stage_stats = [&](int s, int r0) {  // lse (natural log) and delta of query rows r0.. (zero past Sq)
    const int x = threadIdx.x % kTileRows, i = r0 + x;
    const bool inside = i < Sq;
    float* stats = smem_tiles.stats + (threadIdx.x < kTileRows ? 0 : 2 * kTileRows) + s * kTileRows;
    if (threadIdx.x < kTileRows) copy_float_async(stats + x, inside ? p.lse.at(b, h, i) : p.lse.data, inside);
    else copy_float_async(stats + x, inside ? delta_slice + i : p.delta, inside);
  };
  stage_rows<T, kD>(k_s, p.k, b, h, k0, Sk, p.n.D, p.vectorised);
  stage_rows<T, kD>(v_s, p.v, b, h, k0, Sk, p.n.D, p.vectorised);
  if (tiles > 0) {
    stage_rows<T, kD>(q_s[0], p.q, b, h, first_row, Sq, p.n.D, p.vectorised);
    stage_rows<T, kD>(do_s[0], p.dout, b, h, first_row, Sq, p.n.D, p.vectorised);
    stage_stats(0, first_row);
  }
  commit_copies();
  float dk[kD / 8][4], dv[kD / 8][4];
  zero_tiles(dk);
  zero_tiles(dv);
  // tiles whose every query sees every key of this warp, inside both ends, need no mask
  const bool keys_inside = warp_key0 + kWarpRows <= Sk;
  // each warp takes 16 of a tile's queries: dQ rows += dS (16 x 64 keys) K, A read transposed out of dS^T
  auto add_dq = [&](const T* ds, int q0) {
    uint32_t dsq[kTileCols / 2][4];
#pragma unroll
    for (int k = 0; k < kTileCols / 2; ++k)
      ldmatrix_x4_trans(dsq[k],
                        ds + (16 * k + lane % 8 + (lane / 16) * 8) * kProbLd + warp * kWarpRows + ((lane / 8) % 2) * 8);
    float dq[kD / 8][4];
    zero_tiles(dq);
    accumulate<T, kD>(dq, dsq, k_s);
    add_dq_rows<kD>(dq_slice, dq, q0 + warp * kWarpRows, Sq, p.n.D, p.vector_dq);
  };

  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile % 2;
    const int t0 = first_row + tile * kTileRows;
    wait_copies(0);
    __syncthreads();  // this tile is staged, the previous tile's dS^T written; the other stage is free
    if (tile + 1 < tiles) {
      stage_rows<T, kD>((stage ? q_s[0] : q_s[1]), p.q, b, h, t0 + kTileRows, Sq, p.n.D, p.vectorised);
      stage_rows<T, kD>((stage ? do_s[0] : do_s[1]), p.dout, b, h, t0 + kTileRows, Sq, p.n.D, p.vectorised);
      stage_stats(stage ? 0 : 1, t0 + kTileRows);
    }
    commit_copies();
    if (tile > 0) add_dq(stage ? ds_s[0] : ds_s[1], t0 - kTileRows);  // the previous tile's
    const T* qt = stage ? q_s[1] : q_s[0];
    const T* dot = stage ? do_s[1] : do_s[0];
    const float* lt = stage ? lse_s[1] : lse_s[0];
    const float* dt = stage ? delta_s[1] : delta_s[0];
    auto [s, dp] = warp_products<T, kD>(k_s, qt, v_s, dot, warp);  // S^T and dP^T: this warp's keys x the queries
    const bool masked = !keys_inside || t0 + kTileRows > Sq || (p.causal && warp_key0 + kWarpRows - 1 > t0);
#pragma unroll
    for (int j = 0; j < kTileCols; ++j) {
      const int qi = 8 * j + 2 * t;
      const float2 lse2 = *reinterpret_cast<const float2*>(lt + qi);
      const float2 delta2 = *reinterpret_cast<const float2*>(dt + qi);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lse = (e % 2 ? lse2.y : lse2.x) * kLog2e, delta = e % 2 ? delta2.y : delta2.x;
        float prob = fast_exp2(fmaf(s[j][e], p.scale_log2, -lse));
        if (masked) {
          const int i = t0 + qi + e % 2, kj = warp_key0 + g + 8 * (e / 2);
          const bool visible = i < Sq && kj < Sk && (!p.causal || kj <= i);
          prob = visible ? prob : 0.0f;
        }
        s[j][e] = prob;
        dp[j][e] = prob * (dp[j][e] - delta);
      }
    }
    uint32_t pa[kTileCols / 2][4], dsa[kTileCols / 2][4];
    as_a_operand<T>(pa, s);
    as_a_operand<T>(dsa, dp);
    // dS^T to shared memory, for this tile's dQ in the next iteration
    T* ds = stage ? ds_s[1] : ds_s[0];
#pragma unroll
    for (int j = 0; j < kTileCols / 2; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          *reinterpret_cast<uint32_t*>(ds + (warp * kWarpRows + g + 8 * r) * kProbLd + 16 * j + 8 * c + 2 * t) =
              dsa[j][2 * c + r];
    accumulate<T, kD>(dv, pa, dot);
    accumulate<T, kD>(dk, dsa, qt);
  }
  wait_copies(0);
  if (tiles > 0) {
    __syncthreads();  // the last tile's dS^T is written
    add_dq(((tiles - 1) % 2) ? ds_s[1] : ds_s[0], first_row + (tiles - 1) * kTileRows);
  }
  store_tile_rows<T, kD>(p.dk, dk, b, h, warp_key0, Sk, p.n.D, p.scale, p.scale, p.paired_grads);
  store_tile_rows<T, kD>(p.dv, dv, b, h, warp_key0, Sk, p.n.D, 1.0f, 1.0f, p.paired_grads);
#endif
}

// One query block per thread block; key tiles stream through shared memory as in the forward.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) flash_backward_dq_kernel(BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const auto& [q_s, do_s, k_s, v_s, stats] = BackwardTiles<T, kD>(smem);
  float* delta_s = stats;
  float* lse2_s = delta_s + kRows;

  const auto [b, h, q0] = block_rows(p.n.Sq, p.n);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t warp_row0 = q0 + warp * kWarpRows;
  const int64_t row[2] = {warp_row0 + g, warp_row0 + g + 8};
  int64_t visible_end[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) visible_end[r] = row[r] >= p.n.Sq ? 0 : p.causal ? min(p.n.Sk, row[r] + 1) : p.n.Sk;

  const int64_t keys = p.causal ? min(p.n.Sk, min(p.n.Sq, q0 + kRows)) : p.n.Sk;
  const int tiles = static_cast<int>((keys + kTileRows - 1) / kTileRows);
  stage_rows<T, kD>(q_s, p.q, b, h, q0, p.n.Sq, p.n.D, p.vectorised);
  stage_rows<T, kD>(do_s, p.dout, b, h, q0, p.n.Sq, p.n.D, p.vectorised);
  commit_copies();
  if (tiles > 0) {
    stage_rows<T, kD>(k_s[0], p.k, b, h, 0, p.n.Sk, p.n.D, p.vectorised);
    stage_rows<T, kD>(v_s[0], p.v, b, h, 0, p.n.Sk, p.n.D, p.vectorised);
  }
  commit_copies();
  wait_copies(1);  // q and dout
  __syncthreads();
  row_stats<T, kD>(delta_s, lse2_s, do_s, p, b, h, q0);
  __syncthreads();
  const int local0 = warp * kWarpRows + g;
  const float lse2[2] = {lse2_s[local0], lse2_s[local0 + 8]}, delta[2] = {delta_s[local0], delta_s[local0 + 8]};
  float dq[kD / 8][4];
  zero_tiles(dq);

  for (int tile = 0; tile < tiles; ++tile) {
    const int stage = tile % 2;
    const int64_t t0 = static_cast<int64_t>(tile) * kTileRows;
    wait_copies(0);
    __syncthreads();
    if (tile + 1 < tiles) {
      stage_rows<T, kD>((stage ? k_s[0] : k_s[1]), p.k, b, h, t0 + kTileRows, p.n.Sk, p.n.D, p.vectorised);
      stage_rows<T, kD>((stage ? v_s[0] : v_s[1]), p.v, b, h, t0 + kTileRows, p.n.Sk, p.n.D, p.vectorised);
    }
    commit_copies();
    if (p.causal && t0 > warp_row0 + kWarpRows - 1) continue;
    auto [s, dp] = warp_products<T, kD>(q_s, (stage ? k_s[1] : k_s[0]), do_s, (stage ? v_s[1] : v_s[0]), warp);
#pragma unroll
    for (int j = 0; j < kTileCols; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int64_t kj = t0 + 8 * j + 2 * t + e % 2;
        const float prob = kj < visible_end[r] ? exp2f(s[j][e] * p.scale_log2 - lse2[r]) : 0.0f;
        dp[j][e] = prob * (dp[j][e] - delta[r]);
      }
    uint32_t dsa[kTileCols / 2][4];
    as_a_operand<T>(dsa, dp);
    accumulate<T, kD>(dq, dsa, (stage ? k_s[1] : k_s[0]));
  }
  wait_copies(0);
  store_tile_rows<T, kD>(p.dq, dq, b, h, warp_row0, p.n.Sq, p.n.D, p.scale, p.scale, false);
#endif
}

// ------------------------------------------------------------------------------------------ launching

template <typename Kernel, typename Params>
void launch(Kernel kernel, int64_t blocks, size_t smem, const char* name, const Params& params) {
  if (blocks > INT_MAX) throw std::invalid_argument(std::string("cuda backend: ") + name + ": too many blocks");
  if (blocks == 0) return;
  BYTEGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, launch_stream()>>>(params);
  check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
}

// Rows of 16-bit elements whose pairs (d, d + 1), d even, are 4-byte aligned.
bool paired_rows(const StridedView& v) {
  const auto address = reinterpret_cast<uintptr_t>(v.data);
  return v.sizes[3] % 2 == 0 && address % 4 == 0 && v.strides[0] % 2 == 0 && v.strides[1] % 2 == 0 &&
         v.strides[2] % 2 == 0 && v.strides[3] == 1;
}

bool rows_aligned(const StridedView& v) {
  const auto address = reinterpret_cast<uintptr_t>(v.data);
  return address % 16 == 0 && v.strides[0] % 8 == 0 && v.strides[1] % 8 == 0 && v.strides[2] % 8 == 0;
}

// Calls f(TypeTag<T>{}, std::integral_constant<int, kD>{}) with the smallest kD in {32, 64, 128} >= D.
template <typename F>
void dispatch_tensor_core(ScalarType dtype, int64_t D, F&& f) {
  auto with_type = [&](auto tag) {
    if (D <= 32) f(tag, std::integral_constant<int, 32>{});
    else if (D <= 64) f(tag, std::integral_constant<int, 64>{});
    else f(tag, std::integral_constant<int, 128>{});
  };
  if (dtype == ScalarType::bfloat16) with_type(TypeTag<__nv_bfloat16>{});
  else with_type(TypeTag<__half>{});
}

}  // namespace

bool attention_uses_tensor_cores(ScalarType dtype, int64_t D, int64_t Dv) {
  // The kernels' bodies exist only where they were compiled for sm_80 or later (CMAKE_CUDA_ARCHITECTURES).
  static const bool compiled_for_tensor_cores = [] {
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, flash_forward2_kernel<__nv_bfloat16, 64, 64, false, 2>) == cudaSuccess &&
           attributes.binaryVersion >= 80;
  }();
  return (dtype == ScalarType::bfloat16 || dtype == ScalarType::float16) && D == Dv && D > 0 && D <= 128 &&
         compiled_for_tensor_cores;
}

void attention_forward_tensor_cores(const StridedView& out, const StridedView* lse, const StridedView& q,
                                    const StridedView& k, const StridedView& v, double scale, bool is_causal) {
  const Shape n{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2], static_cast<int>(q.sizes[3])};
  const bool vectorised = n.D % 8 == 0 && rows_aligned(q) && rows_aligned(k) && rows_aligned(v);
  dispatch_tensor_core(q.dtype, n.D, [&](auto tag, auto head) {
    using T = typename decltype(tag)::type;
    constexpr int kD = decltype(head)::value;
    ForwardParams<T> p{
        rows_of<T>(out),
        lse ? Rows<float>{static_cast<float*>(lse->data), lse->strides[0], lse->strides[1], lse->strides[2]}
            : Rows<float>{nullptr, 0, 0, 0},
        rows_of<const T>(q),
        rows_of<const T>(k),
        rows_of<const T>(v),
        n,
        static_cast<float>(scale) * kLog2e,
        is_causal,
        vectorised,
        paired_rows(out)};
    constexpr int kBlockRows = ForwardShape<kD>::kBlockRows;
    const int64_t blocks = n.B * n.H * ((n.Sq + kBlockRows - 1) / kBlockRows);
    // q, and k and v in two stages
    auto smem = [](int keys) { return sizeof(T) * (kBlockRows + 4 * keys) * operand_ld<kD>(); };
    // Heads of 64: Q re-read from shared memory per tile, which leaves registers for two resident blocks
    // (234 registers): 0.107 ms at 8x12x1024x64 against 0.111 with Q held, and 0.107 / 0.132 for 32-key tiles
    // with three blocks / with Q held, same run.
    if constexpr (kD == 64)
      launch(flash_forward2_kernel<T, kD, 64, false, 2>, blocks, smem(64), "flash_forward2_kernel", p);
    else launch(flash_forward2_kernel<T, kD, 64, true, 1>, blocks, smem(64), "flash_forward2_kernel", p);
  });
}

void attention_backward_tensor_cores(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                                     const StridedView& dout, const StridedView& q, const StridedView& k,
                                     const StridedView& v, const StridedView& out, const StridedView& lse, double scale,
                                     bool is_causal, DeviceScratch scratch) {
  const Shape n{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2], static_cast<int>(q.sizes[3])};
  // cuDNN's backward workspace (4 B H Sq D + 4 B H Sq + 256 bytes) holds exactly a float dQ accumulator and
  // the per-row delta, as ours needs.
  const int64_t accumulator_floats = n.B * n.H * n.Sq * n.D, delta_floats = n.B * n.H * n.Sq;
  const bool with_scratch = scratch.data != nullptr && reinterpret_cast<uintptr_t>(scratch.data) % 16 == 0 &&
                            scratch.bytes >= 4 * (accumulator_floats + delta_floats);
  const bool vectorised = n.D % 8 == 0 && rows_aligned(q) && rows_aligned(k) && rows_aligned(v) && rows_aligned(dout);
  dispatch_tensor_core(q.dtype, n.D, [&](auto tag, auto head) {
    using T = typename decltype(tag)::type;
    constexpr int kD = decltype(head)::value;
    BackwardParams<T> p{backward_operands_of<T>(dq, dk, dv, dout, q, k, v, out),
                        rows_of<const float>(lse),
                        n,
                        static_cast<float>(scale),
                        static_cast<float>(scale) * kLog2e,
                        is_causal,
                        vectorised,
                        with_scratch ? static_cast<float*>(scratch.data) : nullptr,
                        with_scratch ? static_cast<float*>(scratch.data) + accumulator_floats : nullptr,
                        n.D % 4 == 0,
                        paired_rows(dk) && paired_rows(dv),
                        n.D % 8 == 0 && rows_aligned(out) && rows_aligned(dout) && rows_aligned(dq)};
    // two resident operands and two staged ones in two stages, then delta and lse (two stages for dk/dv)
    const size_t smem = 6 * operand_bytes<T, kD>() + 4 * sizeof(float) * kRows;
    const int64_t key_blocks = n.B * n.H * ((n.Sk + kRows - 1) / kRows);
    if (with_scratch) {
      const int64_t rows = n.B * n.H * n.Sq;
      if (p.vector_rows)
        launch(flash_backward_prepare2_kernel<T>,
               std::min<int64_t>((std::max(rows, accumulator_floats / 4) + kThreads - 1) / kThreads, 65536), 0,
               "flash_backward_prepare2_kernel", p);
      else
        launch(flash_backward_prepare_kernel<T>, (rows + kWarps - 1) / kWarps, 0, "flash_backward_prepare_kernel", p);
      if (n.Sk > 0)  // three resident blocks for heads up to 64 (168 registers, 75 KB of shared memory)
        launch(flash_backward_dkdv2_kernel<T, kD, 3>, key_blocks, smem + 2 * sizeof(T) * kRows * kProbLd,
               "flash_backward_dkdv2_kernel", p);
      const int64_t total = accumulator_floats;
      if (p.vector_rows)
        launch(flash_backward_dq_convert2_kernel<T>, std::min<int64_t>((total / 8 + kThreads - 1) / kThreads, 65536), 0,
               "flash_backward_dq_convert2_kernel", p);
      else
        launch(flash_backward_dq_convert_kernel<T>, std::min<int64_t>((total + kThreads - 1) / kThreads, 65536), 0,
               "flash_backward_dq_convert_kernel", p);
      return;
    }
    if (n.Sk > 0) launch(flash_backward_dkdv_kernel<T, kD>, key_blocks, smem, "flash_backward_dkdv_kernel", p);
    if (n.Sq > 0)
      launch(flash_backward_dq_kernel<T, kD>, n.B * n.H * ((n.Sq + kRows - 1) / kRows), smem,
             "flash_backward_dq_kernel", p);
  });
}

}  // namespace bytegrad::cuda
