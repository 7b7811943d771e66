// Scaled dot-product attention on tensor cores, for float16 and bfloat16 with head dimensions up to 128 (the
// cases PyTorch hands to cuDNN or its flash backend on an H100): FlashAttention-2's scheme written with
// nvcuda::wmma 16x16x16 products accumulating in float. cuda_attention.cu sends other cases (float32,
// float64, larger heads) to its SIMT kernel; both compute what backend.h's attention_forward and
// attention_backward describe, and neither needs device scratch memory (the op layer allocates PyTorch's
// blocks, so memory is the same whichever kernel runs).
//
// Layout of the work: a block of 4 warps owns 64 rows of one (b, h) (query rows in the forward and in dq,
// key rows in dk/dv), 16 rows per warp; the other operand streams through shared memory in tiles of 64 rows.
// Operands are staged in shared memory as T with rows padded by 8 elements (16 bytes) against bank conflicts;
// head dimensions below the kernel's kD are zero-padded, which adds nothing to any product.
//  - forward: S = Q K^T per warp into shared float, an online softmax over the tile (two lanes per row),
//    P in T, the float output accumulator in shared memory rescaled by exp(m_old - m_new) and then
//    O += P V; at the end O / l and lse = m + log l.
//  - backward, two kernels and no atomics: dk/dv per key block streaming query tiles (S^T = K Q^T and
//    dP^T = V dO^T, P^T from the saved lse, dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q, the
//    accumulators in registers), then dq per query block streaming key tiles (dQ += dS K). delta_i =
//    dout_i . out_i is computed where needed. P and dS go through T for the products, as FlashAttention does.
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cmath>
#include <string>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

using namespace nvcuda;

constexpr int kRows = 64;        // rows a block owns
constexpr int kTileRows = 64;    // rows of the streamed operand per tile
constexpr int kWarpRows = 16;    // rows per warp (one wmma fragment high)
constexpr int kWarps = kRows / kWarpRows;
constexpr int kThreads = kWarps * 32;
constexpr int kScoreLd = kTileRows + 4;   // float score rows (a multiple of 4, as wmma needs for float)
constexpr int kProbLd = kTileRows + 8;    // T probability rows (a multiple of 8 for 16-bit elements)
constexpr float kLog2e = 1.4426950408889634f;
[[maybe_unused]] constexpr float kLn2 = 0.6931471805599453f;

template <int kD>
__host__ __device__ constexpr int operand_ld() {
  return kD + 8;
}
template <int kD>
__host__ __device__ constexpr int accumulator_ld() {
  return kD + 4;
}

// A (B, H, S, D) operand: element (b, h, s, d) at data[b * sb + h * sh + s * ss + d].
template <typename T>
struct Rows {
  T* data;
  int64_t sb, sh, ss;
  __device__ __forceinline__ T* at(int64_t b, int64_t h, int64_t s) const { return data + b * sb + h * sh + s * ss; }
};

template <typename T>
Rows<T> rows_of(const StridedView& v) {
  return {static_cast<T*>(v.data), v.strides[0], v.strides[1], v.strides[2]};
}

struct Shape {
  int64_t B, H, Sq, Sk;
  int D;
};

// Copies rows [s0, s0 + kTileRows) of a (b, h) slice into a shared tile of kTileRows x kD (ld = kD + 8),
// zeros past the slice's rows and past D. `vectorised`: every row starts 16-byte aligned and D % 8 == 0, so
// 8 elements move at a time.
template <typename T, int kD>
__device__ __forceinline__ void load_rows(T* tile, const Rows<const T>& src, int64_t b, int64_t h, int64_t s0,
                                          int64_t rows, int D, bool vectorised) {
  constexpr int ld = operand_ld<kD>();
  if (vectorised) {
    constexpr int chunks = kD / 8;
    for (int idx = threadIdx.x; idx < kTileRows * chunks; idx += kThreads) {
      const int r = idx / chunks, c = (idx % chunks) * 8;
      const int64_t s = s0 + r;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (s < rows && c < D) value = *reinterpret_cast<const uint4*>(src.at(b, h, s) + c);
      *reinterpret_cast<uint4*>(tile + r * ld + c) = value;
    }
  } else {
    for (int idx = threadIdx.x; idx < kTileRows * kD; idx += kThreads) {
      const int r = idx / kD, c = idx % kD;
      const int64_t s = s0 + r;
      tile[r * ld + c] = s < rows && c < D ? src.at(b, h, s)[c] : convert<T>(0.0f);
    }
  }
}

// Writes the block's kRows x D float results (ld accumulator_ld) to rows [r0, r0 + kRows) of dst, times
// `factor`, skipping rows past `rows`. One warp per row at a time, lanes along d (coalesced).
template <typename T, int kD>
__device__ __forceinline__ void store_rows(const Rows<T>& dst, const float* acc, int64_t b, int64_t h, int64_t r0,
                                           int64_t rows, int D, float factor) {
  constexpr int ld = accumulator_ld<kD>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kRows; r += kWarps) {
    const int64_t s = r0 + r;
    if (s >= rows) break;
    T* out = dst.at(b, h, s);
    for (int d = lane; d < D; d += 32) out[d] = convert<T>(acc[r * ld + d] * factor);
  }
}

// Bytes of dynamic shared memory, each buffer a multiple of 128 bytes so that every buffer, and every
// fragment's first element, is 32-byte aligned as wmma requires.
template <typename T, int kD>
__host__ __device__ constexpr size_t operand_bytes() {
  return sizeof(T) * kTileRows * operand_ld<kD>();
}
__host__ __device__ constexpr size_t score_bytes() { return sizeof(float) * kRows * kScoreLd; }
template <typename T>
__host__ __device__ constexpr size_t prob_bytes() {
  return sizeof(T) * kRows * kProbLd;
}
template <int kD>
__host__ __device__ constexpr size_t accumulator_bytes() {
  return sizeof(float) * kRows * accumulator_ld<kD>();
}
__host__ __device__ constexpr size_t row_stat_bytes() { return sizeof(float) * kRows; }

// (16 x 64) = (16 x kD rows of a) (kD x 64, the transpose of 64 rows of b): a warp's scores against a tile,
// stored row-major into `out` (ld kScoreLd).
template <typename T, int kD>
__device__ __forceinline__ void warp_products_with_rows(float* out, const T* a, const T* b) {
  constexpr int ld = operand_ld<kD>();
#pragma unroll
  for (int n = 0; n < kTileRows / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < kD / 16; ++k) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, a + k * 16, ld);
      wmma::load_matrix_sync(fb, b + n * 16 * ld + k * 16, ld);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kScoreLd, wmma::mem_row_major);
  }
}

// acc[n] += (16 x 64 of p, ld kProbLd) (64 x kD of rows, ld operand_ld): a warp's product with a tile's rows.
template <typename T, int kD>
__device__ __forceinline__ void warp_accumulate(
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[kD / 16], const T* p, const T* rows) {
  constexpr int ld = operand_ld<kD>();
#pragma unroll
  for (int k = 0; k < kTileRows / 16; ++k) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, p + k * 16, kProbLd);
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, rows + k * 16 * ld + n * 16, ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// ------------------------------------------------------------------------------------------- forward

template <typename T>
struct ForwardParams {
  Rows<T> out;
  Rows<float> lse;  // data nullptr when not wanted
  Rows<const T> q, k, v;
  Shape n;
  float scale_log2;  // scale * log2(e): scores in base 2
  bool causal, vectorised;
};

template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(ForwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* k_s = reinterpret_cast<T*>(smem + operand_bytes<T, kD>());
  T* v_s = reinterpret_cast<T*>(smem + 2 * operand_bytes<T, kD>());
  float* s_s = reinterpret_cast<float*>(smem + 3 * operand_bytes<T, kD>());
  T* p_s = reinterpret_cast<T*>(smem + 3 * operand_bytes<T, kD>() + score_bytes());
  float* o_s = reinterpret_cast<float*>(smem + 3 * operand_bytes<T, kD>() + score_bytes() + prob_bytes<T>());
  float* l_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(o_s) + accumulator_bytes<kD>());
  constexpr int ld = operand_ld<kD>(), old = accumulator_ld<kD>();

  const int64_t row_blocks = (p.n.Sq + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x / row_blocks, q0 = (blockIdx.x % row_blocks) * kRows;
  const int64_t b = bh / p.n.H, h = bh % p.n.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;  // this lane's row of the warp's 16, and its half of a tile row
  const int row = warp * kWarpRows + r;     // in the block
  const int64_t i = q0 + row;

  load_rows<T, kD>(q_s, p.q, b, h, q0, p.n.Sq, p.n.D, p.vectorised);
  for (int idx = threadIdx.x; idx < kRows * old; idx += kThreads) o_s[idx] = 0.0f;

  const int64_t last_row = min(p.n.Sq, q0 + kRows) - 1;
  const int64_t keys = p.causal ? min(p.n.Sk, last_row + 1) : p.n.Sk;
  const int64_t warp_last_row = q0 + warp * kWarpRows + kWarpRows - 1;
  float m = -INFINITY, l = 0.0f;  // base-2 running maximum and sum of this lane's row (both lanes agree)
  float* s_w = s_s + warp * kWarpRows * kScoreLd;
  T* p_w = p_s + warp * kWarpRows * kProbLd;
  float* o_w = o_s + warp * kWarpRows * old;

  for (int64_t t0 = 0; t0 < keys; t0 += kTileRows) {
    __syncthreads();  // the previous tile has been used
    load_rows<T, kD>(k_s, p.k, b, h, t0, p.n.Sk, p.n.D, p.vectorised);
    load_rows<T, kD>(v_s, p.v, b, h, t0, p.n.Sk, p.n.D, p.vectorised);
    __syncthreads();
    if (p.causal && t0 > warp_last_row) continue;  // no row of this warp sees this tile (warp-uniform)
    warp_products_with_rows<T, kD>(s_w, q_s + warp * kWarpRows * ld, k_s);
    __syncwarp();
    // Online softmax over the lane's 32 columns; the row's two lanes combine by shuffle.
    const float* s_row = s_w + r * kScoreLd + half * 32;
    const int64_t j0 = t0 + half * 32;
    const int64_t visible_end = p.causal ? min(p.n.Sk, i + 1) : p.n.Sk;  // keys j < visible_end
    float tile_max = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < 32; ++c)
      if (j0 + c < visible_end) tile_max = fmaxf(tile_max, s_row[c] * p.scale_log2);
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet keeps p = 0
    float sum = 0.0f;
    T* p_row = p_w + r * kProbLd + half * 32;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const float prob = j0 + c < visible_end ? exp2f(s_row[c] * p.scale_log2 - m_use) : 0.0f;
      sum += prob;
      p_row[c] = convert<T>(prob);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float correction = exp2f(m - m_use);  // 0 while m is -inf
    l = l * correction + sum;
    m = m_new;
    float* o_row = o_w + r * old;
    for (int d = half; d < kD; d += 2) o_row[d] *= correction;
    __syncwarp();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kD / 16];
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) wmma::load_matrix_sync(acc[n], o_w + n * 16, old, wmma::mem_row_major);
    warp_accumulate<T, kD>(acc, p_w, v_s);
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) wmma::store_matrix_sync(o_w + n * 16, acc[n], old, wmma::mem_row_major);
    __syncwarp();
  }
  if (half == 0) l_s[row] = l;
  if (half == 0 && p.lse.data && i < p.n.Sq)
    *p.lse.at(b, h, i) = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
  __syncthreads();
  const int64_t rows_end = min(static_cast<int64_t>(kRows), p.n.Sq - q0);
  for (int rr = warp; rr < rows_end; rr += kWarps) {
    const float lr = l_s[rr];
    const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
    T* out = p.out.at(b, h, q0 + rr);
    for (int d = lane; d < p.n.D; d += 32) out[d] = convert<T>(o_s[rr * old + d] * inv);
  }
#endif
}

// ------------------------------------------------------------------------------------------ backward

template <typename T>
struct BackwardParams {
  Rows<T> dq, dk, dv;
  Rows<const T> dout, q, k, v, out;
  Rows<const float> lse;
  Shape n;
  float scale, scale_log2;
  bool causal, vectorised;
};

// delta_i = dout_i . out_i and lse_i (base 2) for rows [r0, r0 + kRows): two threads per row, dout from the
// shared tile `do_s`, out from global memory.
template <typename T, int kD>
__device__ __forceinline__ void row_stats(float* delta_s, float* lse2_s, const T* do_s, const BackwardParams<T>& p,
                                          int64_t b, int64_t h, int64_t r0) {
  constexpr int ld = operand_ld<kD>();
  const int r = threadIdx.x / 2, half = threadIdx.x % 2;  // kThreads == 2 * kRows
  const int64_t i = r0 + r;
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

// One key block per thread block; query tiles stream through shared memory.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv_kernel(BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr size_t ob = operand_bytes<T, kD>();
  T* k_s = reinterpret_cast<T*>(smem);
  T* v_s = reinterpret_cast<T*>(smem + ob);
  T* q_s = reinterpret_cast<T*>(smem + 2 * ob);
  T* do_s = reinterpret_cast<T*>(smem + 3 * ob);
  float* st_s = reinterpret_cast<float*>(smem + 4 * ob);                  // S^T, per warp 16 keys x 64 queries
  float* dpt_s = reinterpret_cast<float*>(smem + 4 * ob + score_bytes());  // dP^T
  T* pt_s = reinterpret_cast<T*>(smem + 4 * ob + 2 * score_bytes());
  T* dst_s = reinterpret_cast<T*>(smem + 4 * ob + 2 * score_bytes() + prob_bytes<T>());
  float* delta_s = reinterpret_cast<float*>(smem + 4 * ob + 2 * score_bytes() + 2 * prob_bytes<T>());
  float* lse2_s = delta_s + kRows;
  constexpr int ld = operand_ld<kD>();

  const int64_t key_blocks = (p.n.Sk + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x / key_blocks, k0 = (blockIdx.x % key_blocks) * kRows;
  const int64_t b = bh / p.n.H, h = bh % p.n.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int64_t j = k0 + warp * kWarpRows + r;  // this lane's key

  load_rows<T, kD>(k_s, p.k, b, h, k0, p.n.Sk, p.n.D, p.vectorised);
  load_rows<T, kD>(v_s, p.v, b, h, k0, p.n.Sk, p.n.D, p.vectorised);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk_acc[kD / 16], dv_acc[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  float* st_w = st_s + warp * kWarpRows * kScoreLd;
  float* dpt_w = dpt_s + warp * kWarpRows * kScoreLd;
  T* pt_w = pt_s + warp * kWarpRows * kProbLd;
  T* dst_w = dst_s + warp * kWarpRows * kProbLd;

  // Causal: query rows before k0 see none of the block's keys.
  const int64_t first_row = p.causal ? (min(k0, p.n.Sq) / kTileRows) * kTileRows : 0;
  for (int64_t t0 = first_row; t0 < p.n.Sq; t0 += kTileRows) {
    __syncthreads();
    load_rows<T, kD>(q_s, p.q, b, h, t0, p.n.Sq, p.n.D, p.vectorised);
    load_rows<T, kD>(do_s, p.dout, b, h, t0, p.n.Sq, p.n.D, p.vectorised);
    __syncthreads();
    row_stats<T, kD>(delta_s, lse2_s, do_s, p, b, h, t0);
    warp_products_with_rows<T, kD>(st_w, k_s + warp * kWarpRows * ld, q_s);
    warp_products_with_rows<T, kD>(dpt_w, v_s + warp * kWarpRows * ld, do_s);
    __syncthreads();  // delta and lse of the tile are written
    const float* s_row = st_w + r * kScoreLd + half * 32;
    const float* dp_row = dpt_w + r * kScoreLd + half * 32;
    T* p_row = pt_w + r * kProbLd + half * 32;
    T* ds_row = dst_w + r * kProbLd + half * 32;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int qi = half * 32 + c;
      const int64_t i = t0 + qi;
      const bool visible = i < p.n.Sq && j < p.n.Sk && (!p.causal || j <= i);
      const float prob = visible ? exp2f(s_row[c] * p.scale_log2 - lse2_s[qi]) : 0.0f;
      p_row[c] = convert<T>(prob);
      ds_row[c] = convert<T>(prob * (dp_row[c] - delta_s[qi]));
    }
    __syncwarp();
    warp_accumulate<T, kD>(dv_acc, pt_w, do_s);
    warp_accumulate<T, kD>(dk_acc, dst_w, q_s);
  }
  __syncthreads();  // every tile is used: the shared memory holds the results now
  float* acc_s = reinterpret_cast<float*>(smem);
  constexpr int old = accumulator_ld<kD>();
  static_assert(accumulator_bytes<kD>() <= 2 * operand_bytes<T, kD>(), "the results fit where k and v were");
#pragma unroll
  for (int n = 0; n < kD / 16; ++n)
    wmma::store_matrix_sync(acc_s + warp * kWarpRows * old + n * 16, dk_acc[n], old, wmma::mem_row_major);
  __syncthreads();
  store_rows<T, kD>(p.dk, acc_s, b, h, k0, p.n.Sk, p.n.D, p.scale);
  __syncthreads();
#pragma unroll
  for (int n = 0; n < kD / 16; ++n)
    wmma::store_matrix_sync(acc_s + warp * kWarpRows * old + n * 16, dv_acc[n], old, wmma::mem_row_major);
  __syncthreads();
  store_rows<T, kD>(p.dv, acc_s, b, h, k0, p.n.Sk, p.n.D, 1.0f);
#endif
}

// One query block per thread block; key tiles stream through shared memory as in the forward.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads) flash_backward_dq_kernel(BackwardParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr size_t ob = operand_bytes<T, kD>();
  T* q_s = reinterpret_cast<T*>(smem);
  T* do_s = reinterpret_cast<T*>(smem + ob);
  T* k_s = reinterpret_cast<T*>(smem + 2 * ob);
  T* v_s = reinterpret_cast<T*>(smem + 3 * ob);
  float* s_s = reinterpret_cast<float*>(smem + 4 * ob);
  float* dp_s = reinterpret_cast<float*>(smem + 4 * ob + score_bytes());
  T* ds_s = reinterpret_cast<T*>(smem + 4 * ob + 2 * score_bytes());
  float* delta_s = reinterpret_cast<float*>(smem + 4 * ob + 2 * score_bytes() + prob_bytes<T>());
  float* lse2_s = delta_s + kRows;
  constexpr int ld = operand_ld<kD>();

  const int64_t row_blocks = (p.n.Sq + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x / row_blocks, q0 = (blockIdx.x % row_blocks) * kRows;
  const int64_t b = bh / p.n.H, h = bh % p.n.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int row = warp * kWarpRows + r;
  const int64_t i = q0 + row;

  load_rows<T, kD>(q_s, p.q, b, h, q0, p.n.Sq, p.n.D, p.vectorised);
  load_rows<T, kD>(do_s, p.dout, b, h, q0, p.n.Sq, p.n.D, p.vectorised);
  __syncthreads();
  row_stats<T, kD>(delta_s, lse2_s, do_s, p, b, h, q0);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq_acc[kD / 16];
#pragma unroll
  for (int n = 0; n < kD / 16; ++n) wmma::fill_fragment(dq_acc[n], 0.0f);
  float* s_w = s_s + warp * kWarpRows * kScoreLd;
  float* dp_w = dp_s + warp * kWarpRows * kScoreLd;
  T* ds_w = ds_s + warp * kWarpRows * kProbLd;

  const int64_t last_row = min(p.n.Sq, q0 + kRows) - 1;
  const int64_t keys = p.causal ? min(p.n.Sk, last_row + 1) : p.n.Sk;
  const int64_t warp_last_row = q0 + warp * kWarpRows + kWarpRows - 1;
  const int64_t visible_end = p.causal ? min(p.n.Sk, i + 1) : p.n.Sk;
  for (int64_t t0 = 0; t0 < keys; t0 += kTileRows) {
    __syncthreads();
    load_rows<T, kD>(k_s, p.k, b, h, t0, p.n.Sk, p.n.D, p.vectorised);
    load_rows<T, kD>(v_s, p.v, b, h, t0, p.n.Sk, p.n.D, p.vectorised);
    __syncthreads();
    if (p.causal && t0 > warp_last_row) continue;
    warp_products_with_rows<T, kD>(s_w, q_s + warp * kWarpRows * ld, k_s);
    warp_products_with_rows<T, kD>(dp_w, do_s + warp * kWarpRows * ld, v_s);
    __syncwarp();
    const float* s_row = s_w + r * kScoreLd + half * 32;
    const float* dp_row = dp_w + r * kScoreLd + half * 32;
    T* ds_row = ds_w + r * kProbLd + half * 32;
    const int64_t j0 = t0 + half * 32;
    const float lse2 = lse2_s[row], delta = delta_s[row];
    const bool row_valid = i < p.n.Sq;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const bool visible = row_valid && j0 + c < visible_end;
      const float prob = visible ? exp2f(s_row[c] * p.scale_log2 - lse2) : 0.0f;
      ds_row[c] = convert<T>(prob * (dp_row[c] - delta));
    }
    __syncwarp();
    warp_accumulate<T, kD>(dq_acc, ds_w, k_s);
  }
  __syncthreads();
  float* acc_s = reinterpret_cast<float*>(smem);
  constexpr int old = accumulator_ld<kD>();
  static_assert(accumulator_bytes<kD>() <= 2 * operand_bytes<T, kD>(), "the results fit where q and dout were");
#pragma unroll
  for (int n = 0; n < kD / 16; ++n)
    wmma::store_matrix_sync(acc_s + warp * kWarpRows * old + n * 16, dq_acc[n], old, wmma::mem_row_major);
  __syncthreads();
  store_rows<T, kD>(p.dq, acc_s, b, h, q0, p.n.Sq, p.n.D, p.scale);
#endif
}

// ------------------------------------------------------------------------------------------ launching

template <typename Kernel, typename Params>
void launch(Kernel kernel, int64_t blocks, size_t smem, const char* name, const Params& params) {
  if (blocks > INT_MAX) throw std::invalid_argument(std::string("cuda backend: ") + name + ": too many blocks");
  if (blocks == 0) return;
  BYTEGRAD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem>>>(params);
  check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
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
    return cudaFuncGetAttributes(&attributes, flash_forward_kernel<__nv_bfloat16, 64>) == cudaSuccess &&
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
    ForwardParams<T> p{rows_of<T>(out),
                       lse ? Rows<float>{static_cast<float*>(lse->data), lse->strides[0], lse->strides[1],
                                         lse->strides[2]}
                           : Rows<float>{nullptr, 0, 0, 0},
                       rows_of<const T>(q), rows_of<const T>(k), rows_of<const T>(v), n,
                       static_cast<float>(scale) * kLog2e, is_causal, vectorised};
    const size_t smem = 3 * operand_bytes<T, kD>() + score_bytes() + prob_bytes<T>() + accumulator_bytes<kD>() +
                        row_stat_bytes();
    launch(flash_forward_kernel<T, kD>, n.B * n.H * ((n.Sq + kRows - 1) / kRows), smem, "flash_forward_kernel", p);
  });
}

void attention_backward_tensor_cores(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                                     const StridedView& dout, const StridedView& q, const StridedView& k,
                                     const StridedView& v, const StridedView& out, const StridedView& lse,
                                     double scale, bool is_causal) {
  const Shape n{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2], static_cast<int>(q.sizes[3])};
  const bool vectorised =
      n.D % 8 == 0 && rows_aligned(q) && rows_aligned(k) && rows_aligned(v) && rows_aligned(dout);
  dispatch_tensor_core(q.dtype, n.D, [&](auto tag, auto head) {
    using T = typename decltype(tag)::type;
    constexpr int kD = decltype(head)::value;
    BackwardParams<T> p{rows_of<T>(dq),
                        rows_of<T>(dk),
                        rows_of<T>(dv),
                        rows_of<const T>(dout),
                        rows_of<const T>(q),
                        rows_of<const T>(k),
                        rows_of<const T>(v),
                        rows_of<const T>(out),
                        {static_cast<const float*>(lse.data), lse.strides[0], lse.strides[1], lse.strides[2]},
                        n,
                        static_cast<float>(scale),
                        static_cast<float>(scale) * kLog2e,
                        is_causal,
                        vectorised};
    const size_t smem = 4 * operand_bytes<T, kD>() + 2 * score_bytes() + 2 * prob_bytes<T>() + 2 * row_stat_bytes();
    if (n.Sk > 0)
      launch(flash_backward_dkdv_kernel<T, kD>, n.B * n.H * ((n.Sk + kRows - 1) / kRows), smem,
             "flash_backward_dkdv_kernel", p);
    if (n.Sq > 0)
      launch(flash_backward_dq_kernel<T, kD>, n.B * n.H * ((n.Sq + kRows - 1) / kRows), smem,
             "flash_backward_dq_kernel", p);
  });
}

}  // namespace bytegrad::cuda
