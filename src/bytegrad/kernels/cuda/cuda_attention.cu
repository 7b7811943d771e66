// Scaled dot-product attention on the GPU, flash-attention style (no attention library): the scores are
// never materialised; keys and values stream through shared memory in tiles of 32 rows and each query row
// keeps an online softmax (running maximum m, running sum l, the output accumulator rescaled by
// exp(m_old - m_new) as each tile arrives). q, k, v, out and the gradients are read and written through their
// strides (the fused backends' requirement: last dimension contiguous), so GPT-2's transposed views of the
// split c_attn output are used in place. Accumulation in float for float32 and the 16-bit floats, double for
// float64.
//
// float16 and bfloat16 with head dimensions up to 128 go to the tensor-core kernels of cuda_attention_mma.cu;
// this file's kernels serve float32, float64, larger heads, and every call with a bias (the mask) or dropout
// (backend.h's AttentionExtras): the bias is read per score through its strides (an expanded mask reads one
// row many times), dropout is redrawn per element from attention_dropout.h's counter-based generator, so
// backward drops what forward dropped and no mask is stored.
//
// Layout of the work (kept simple rather than fast):
//  - forward: a block of kWarps warps holds kWarps consecutive query rows of one (b, h), one row per warp.
//    Per key tile, lane t scores key t0 + t against its warp's row (a full dot product over D), the warp
//    reduces the tile's maximum and sum with shuffles, and each lane accumulates its share of the output
//    dimensions (d = lane, lane + 32, ...) from the value tile with the probabilities broadcast by shuffle.
//  - backward, two kernels and no atomics: dk/dv with one key row per warp streaming query-row tiles (the
//    probabilities recomputed from the saved logsumexp, delta_i = dout_i . out_i computed per tile), then
//    dq with one query row per warp streaming key tiles, as the forward. The scores are computed twice; no
//    device scratch is needed, so the only device memory is what the op layer allocates (PyTorch's blocks).
// Head dimensions up to 256 (a lane holds up to 8 output dimensions).
// Grouped-query attention (k and v with H / G heads, as cuDNN takes them): query head h reads key/value head
// h / G; dk/dv's blocks run over the key/value heads and each warp sums its key row's gradient over the G
// query heads of its group (still no atomics). Such calls stay off the tensor-core kernels.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <string>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/attention_dropout.h"
#include "bytegrad/kernels/cuda/cuda_attention_rows.cuh"
#include "bytegrad/kernels/cuda/cuda_cudnn_attention.h"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"

namespace bytegrad::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 8;  // rows (query rows, or key rows for dk/dv) per block, one per warp
constexpr int kThreads = kWarps * kWarp;
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile: one per lane
// Each lane keeps head-dim columns lane, lane + 32, ... in registers: PerLane of them, 8 up to head dim 256
// and 16 up to 512 (two instantiations, so the common head dims keep the smaller register footprint).
constexpr int kMaxHeadDim = 512;

template <typename Acc>
__device__ __forceinline__ Acc warp_max(Acc v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename Acc>
__device__ __forceinline__ Acc exp_of(Acc x) {
  if constexpr (std::is_same_v<Acc, double>) return exp(x);
  else return expf(x);
}

template <typename Acc>
__device__ __forceinline__ Acc log_of(Acc x) {
  if constexpr (std::is_same_v<Acc, double>) return log(x);
  else return logf(x);
}

template <typename Acc>
__device__ __forceinline__ Acc minus_infinity() {
  return static_cast<Acc>(-INFINITY);
}

struct Shape4 {
  int64_t B, H, Sq, Sk, D, Dv;
  int64_t G = 1;  // query heads per key/value head (grouped-query attention); k and v have H / G heads
};

// A (B, H, Sq, Sk) operand of any floating dtype (the bias and its gradient); data nullptr when absent.
struct ScoreMatrix {
  void* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0, sj = 0;
  ScalarType dtype = ScalarType::float32;

  template <typename Acc>
  __device__ __forceinline__ Acc load(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const int64_t at = b * sb + h * sh + i * si + j * sj;
    switch (dtype) {
      case ScalarType::float64: return static_cast<Acc>(static_cast<const double*>(data)[at]);
      case ScalarType::float16: return static_cast<Acc>(__half2float(static_cast<const __half*>(data)[at]));
      case ScalarType::bfloat16: return static_cast<Acc>(__bfloat162float(static_cast<const __nv_bfloat16*>(data)[at]));
      default: return static_cast<Acc>(static_cast<const float*>(data)[at]);
    }
  }
  template <typename Acc>
  __device__ __forceinline__ void store(int64_t b, int64_t h, int64_t i, int64_t j, Acc value) const {
    const int64_t at = b * sb + h * sh + i * si + j * sj;
    switch (dtype) {
      case ScalarType::float64: static_cast<double*>(data)[at] = static_cast<double>(value); break;
      case ScalarType::float16: static_cast<__half*>(data)[at] = __float2half(static_cast<float>(value)); break;
      case ScalarType::bfloat16:
        static_cast<__nv_bfloat16*>(data)[at] = __float2bfloat16(static_cast<float>(value));
        break;
      default: static_cast<float*>(data)[at] = static_cast<float>(value); break;
    }
  }
};

ScoreMatrix score_matrix_of(const StridedView* v) {
  if (!v) return {};
  return {v->data, v->strides[0], v->strides[1], v->strides[2], v->strides[3], v->dtype};
}

// The dropout factor of element (b, h, i, j): 1 / (1 - p) kept, 0 dropped, 1 without dropout.
template <typename Acc>
__device__ __forceinline__ Acc dropout_factor(const DropoutDraw& draw, const Shape4& n, int64_t b, int64_t h, int64_t i,
                                              int64_t j) {
  if (!draw.active) return Acc(1);
  const uint64_t index = static_cast<uint64_t>(((b * n.H + h) * n.Sq + i) * n.Sk + j);
  return draw.kept(index) ? static_cast<Acc>(draw.kept_scale) : Acc(0);
}

// The keys query row i may see (causal: top-left aligned, j <= i).
__device__ __forceinline__ int64_t visible_keys(int64_t i, int64_t keys, bool causal) {
  return causal ? min(i + 1, keys) : keys;
}

// Copies rows [t0, t0 + kTile) of a (b, h) slice into a kTile x ld shared tile (zeros past the end).
template <typename T, typename Acc>
__device__ __forceinline__ void load_tile(Acc* tile, int ld, const Rows<const T>& src, int64_t b, int64_t h, int64_t t0,
                                          int64_t rows, int64_t cols) {
  for (int64_t idx = threadIdx.x; idx < kTile * cols; idx += blockDim.x) {
    const int64_t r = idx / cols, d = idx % cols;
    const int64_t s = t0 + r;
    tile[r * ld + d] = s < rows ? convert<Acc>(src.at(b, h, s)[d]) : Acc(0);
  }
}

// The forward's and dq's shared memory: two tiles of kTile rows that the keys and the values stream through,
// each row padded by one column against bank conflicts, then the kernel's own rows (after()). dk/dv lays out
// its tiles itself: built through this struct, its 16-bit kernels spilled registers.
template <typename Acc>
struct TilePair {
  int64_t cols_first, cols_second;
  int ld_first, ld_second;
  Acc *first, *second;

  __device__ __forceinline__ TilePair(int64_t cols_first, int64_t cols_second, Acc* smem)
      : cols_first(cols_first),
        cols_second(cols_second),
        ld_first(static_cast<int>(cols_first) + 1),
        ld_second(static_cast<int>(cols_second) + 1),
        first(smem),
        second(first + kTile * ld_first) {}

  __device__ __forceinline__ Acc* after() const { return second + kTile * ld_second; }

  // Copies rows [t0, t0 + kTile) of the (b, h) slices of two operands of `rows` rows into the tiles.
  template <typename T>
  __device__ __forceinline__ void load(const Rows<const T>& src_first, const Rows<const T>& src_second, int64_t b,
                                       int64_t h, int64_t t0, int64_t rows) const {
    load_tile<T, Acc>(first, ld_first, src_first, b, h, t0, rows, cols_first);
    load_tile<T, Acc>(second, ld_second, src_second, b, h, t0, rows, cols_second);
  }
};

// The block's dynamic shared memory.
template <typename Acc>
__device__ __forceinline__ Acc* shared_memory() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return reinterpret_cast<Acc*>(smem_raw);
}

// Where a thread works: the (b, h) slice of its block, the block's kWarps consecutive rows (query rows, or key
// rows for dk/dv), one per warp, and its warp's row among them. For key rows h is a key/value head (H / G of
// them).
struct WarpRow {
  int64_t b, h;
  int64_t first_row;  // the block's
  int64_t row;        // the warp's
  int warp, lane;
  bool valid;  // false past the end of the slice (its last block)
};

// Which rows a kernel's warps take: query rows (forward, dq) or key rows (dk/dv).
enum class RowsOf { queries, keys };

// The shape is taken by reference, so its sizes are read where they are used.
__device__ __forceinline__ WarpRow warp_row(const Shape4& n, RowsOf which) {
  const int64_t& rows = which == RowsOf::keys ? n.Sk : n.Sq;
  const int64_t row_tiles = (rows + kWarps - 1) / kWarps;
  const int64_t heads = which == RowsOf::keys ? n.H / n.G : n.H;
  const int64_t bh = blockIdx.x / row_tiles, tile = blockIdx.x % row_tiles;
  const int64_t b = bh / heads, h = bh % heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t first_row = tile * kWarps, row = first_row + warp;
  return {b, h, first_row, row, warp, lane, row < rows};
}

// The keys a block of query rows streams (the most any of its rows sees: every warp runs the tile loop, which
// synchronises the block) and the keys its warp's row sees (none past the end).
struct KeyCounts {
  int64_t block, row;
};

template <typename Params>
__device__ __forceinline__ KeyCounts key_counts(const Params& p, int64_t first_row, int64_t row, bool row_valid) {
  const int64_t last_row = min(p.n.Sq - 1, first_row + kWarps - 1);
  return {visible_keys(last_row, p.n.Sk, p.causal), row_valid ? visible_keys(row, p.n.Sk, p.causal) : 0};
}

// Runs body(t0) for the key tiles t0 = 0, kTile, ... below `keys`, each once its keys and values are in the
// tiles (those of query head h's key/value head h / G); every thread of the block runs every tile (the loop
// synchronises the block).
template <typename T, typename Acc, typename Params, typename Body>
__device__ __forceinline__ void for_each_key_tile(const TilePair<Acc>& tiles, const Params& p, int64_t b, int64_t h,
                                                  int64_t keys, Body&& body) {
  for (int64_t t0 = 0; t0 < keys; t0 += kTile) {
    __syncthreads();  // the previous tile has been used (and each warp's own rows are written)
    tiles.template load<T>(p.k, p.v, b, h / p.n.G, t0, p.n.Sk);
    __syncthreads();
    body(t0);
  }
}

// Calls f(c, d) for the lane's register columns: c = 0 .. PerLane - 1 holds head-dim column d = lane + 32 c.
template <int PerLane, typename F>
__device__ __forceinline__ void for_lane_columns(int lane, F&& f) {
#pragma unroll
  for (int c = 0; c < PerLane; ++c) f(c, lane + c * kWarp);
}

// Copies a (b, h, row) operand row into shared memory, the warp's lanes striding over its columns.
template <typename T, typename Acc>
__device__ __forceinline__ void load_row(Acc* dst, const Rows<const T>& src, int64_t b, int64_t h, int64_t row,
                                         int64_t cols, int lane) {
  for (int64_t d = lane; d < cols; d += kWarp) dst[d] = convert<Acc>(src.at(b, h, row)[d]);
}

// acc[c] += sum over the tile's rows r of lane r's weight times tile[r][d], for the lane's columns d below
// cols: the probabilities times the value rows, or the score gradients times the key rows.
template <int PerLane, typename Acc>
__device__ __forceinline__ void accumulate_tile(Acc (&acc)[PerLane], Acc weight, const Acc* tile, int ld, int64_t cols,
                                                int lane) {
  for (int r = 0; r < kTile; ++r) {
    const Acc wr = __shfl_sync(0xffffffffu, weight, r);
    const Acc* tr = tile + r * ld;
    for_lane_columns<PerLane>(lane, [&](int c, int64_t d) {
      if (d < cols) acc[c] += wr * tr[d];
    });
  }
}

// ------------------------------------------------------------------------------------------- forward

template <typename T, typename Acc>
struct ForwardParams {
  Rows<T> out;
  Rows<Acc> lse;  // (B, H, Sq) through sb, sh, ss; data nullptr when not wanted
  Rows<const T> q, k, v;
  Shape4 n;
  Acc scale;
  bool causal;
  ScoreMatrix bias;
  DropoutDraw dropout;
};

template <typename T, typename Acc, int PerLane>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(ForwardParams<T, Acc> p) {
  const int64_t D = p.n.D, Dv = p.n.Dv;
  const TilePair<Acc> tiles(D, Dv, shared_memory<Acc>());  // keys, values; then a q row per warp
  const auto [b, h, first_row, i, warp, lane, row_valid] = warp_row(p.n, RowsOf::queries);

  Acc* qs = tiles.after() + warp * D;
  if (row_valid) load_row(qs, p.q, b, h, i, D, lane);

  const auto [block_keys, row_keys] = key_counts(p, first_row, i, row_valid);

  Acc m = minus_infinity<Acc>(), l = 0;
  Acc acc[PerLane];
  for_lane_columns<PerLane>(lane, [&](int c, int64_t) { acc[c] = 0; });

  for_each_key_tile<T>(tiles, p, b, h, block_keys, [&](int64_t t0) {
    if (!row_valid || t0 >= row_keys) return;  // uniform across the warp
    const bool visible = t0 + lane < row_keys;
    Acc s = minus_infinity<Acc>();
    if (visible) {
      Acc dot = 0;
      const Acc* kr = tiles.first + lane * tiles.ld_first;
      for (int64_t d = 0; d < D; ++d) dot += qs[d] * kr[d];
      s = dot * p.scale;
      if (p.bias.data) s += p.bias.template load<Acc>(b, h, i, t0 + lane);
    }
    const Acc m_new = max(m, warp_max(s));
    // -inf while every score so far is masked out (without a bias: never, key t0 is visible to this row)
    const bool live = m_new > minus_infinity<Acc>();
    const Acc prob = visible && live ? exp_of(s - m_new) : Acc(0);
    const Acc correction = live ? exp_of(m - m_new) : Acc(1);  // 0 on the first live tile (m = -inf)
    l = l * correction + warp_sum(prob);
    // what meets v: the probability times its dropout factor (the sum l is the undropped softmax's)
    const Acc weight = visible ? prob * dropout_factor<Acc>(p.dropout, p.n, b, h, i, t0 + lane) : Acc(0);
    for_lane_columns<PerLane>(lane, [&](int c, int64_t) { acc[c] *= correction; });
    accumulate_tile(acc, weight, tiles.second, tiles.ld_second, Dv, lane);
    m = m_new;
  });
  if (!row_valid) return;
  const bool any = l > 0;
  T* o = p.out.at(b, h, i);
  for_lane_columns<PerLane>(lane, [&](int c, int64_t d) {
    if (d < Dv) o[d] = convert<T>(any ? acc[c] / l : Acc(0));
  });
  if (lane == 0 && p.lse.data) *p.lse.at(b, h, i) = any ? m + log_of(l) : minus_infinity<Acc>();
}

// ---------------------------------------------------------------------------------- backward: dk, dv

template <typename T, typename Acc>
struct BackwardParams : BackwardOperands<T> {
  Rows<const Acc> lse;
  Shape4 n;
  Acc scale;
  bool causal;
  ScoreMatrix bias, grad_bias;
  DropoutDraw dropout;
};

// The backward's probability P_ij, recomputed from query row i's logsumexp, and dP_ij = dout_i . v_j, from
// the q and dout rows of i and the k and v rows of j.
template <typename Acc>
struct ProbabilityAndGrad {
  Acc prob, dp;
};

template <typename T, typename Acc>
__device__ __forceinline__ ProbabilityAndGrad<Acc> probability_and_grad(const BackwardParams<T, Acc>& p, const Acc* q,
                                                                        const Acc* dout, const Acc* k, const Acc* v,
                                                                        Acc row_lse, int64_t b, int64_t h, int64_t i,
                                                                        int64_t j) {
  Acc s = 0, dp = 0;
  for (int64_t d = 0; d < p.n.D; ++d) s += q[d] * k[d];
  for (int64_t d = 0; d < p.n.Dv; ++d) dp += dout[d] * v[d];
  s *= p.scale;
  if (p.bias.data) s += p.bias.template load<Acc>(b, h, i, j);
  return {exp_of(s - row_lse), dp};
}

// One key row j per warp; query rows stream through shared memory in tiles of 32 (lane t: row t0 + t).
template <typename T, typename Acc, int PerLane>
__global__ void __launch_bounds__(kThreads) attention_backward_dkdv_kernel(BackwardParams<T, Acc> p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int64_t D = p.n.D, Dv = p.n.Dv;
  const int ldq = static_cast<int>(D) + 1, ldo = static_cast<int>(Dv) + 1;
  Acc* q_tile = smem;                     // kTile x ldq
  Acc* do_tile = q_tile + kTile * ldq;    // kTile x ldo
  Acc* lse_tile = do_tile + kTile * ldo;  // kTile
  Acc* delta_tile = lse_tile + kTile;     // kTile
  Acc* k_rows = delta_tile + kTile;       // kWarps x D
  Acc* v_rows = k_rows + kWarps * D;      // kWarps x Dv

  const auto [b, hk, first_key, j, warp, lane, key_valid] = warp_row(p.n, RowsOf::keys);

  Acc* ks = k_rows + warp * D;
  Acc* vs = v_rows + warp * Dv;
  if (key_valid) {
    for (int64_t d = lane; d < D; d += kWarp) ks[d] = convert<Acc>(p.k.at(b, hk, j)[d]);
    for (int64_t d = lane; d < Dv; d += kWarp) vs[d] = convert<Acc>(p.v.at(b, hk, j)[d]);
  }
  Acc dk_acc[PerLane], dv_acc[PerLane];
#pragma unroll
  for (int c = 0; c < PerLane; ++c) dk_acc[c] = dv_acc[c] = 0;

  // Causal: rows before the block's first key see none of its keys.
  const int64_t first_row = p.causal ? min(first_key, p.n.Sq) : 0;
  // the query heads reading this key/value head, one after another (each adds to the same accumulators)
  for (int64_t h = hk * p.n.G; h < (hk + 1) * p.n.G; ++h)
    for (int64_t t0 = first_row; t0 < p.n.Sq; t0 += kTile) {
      __syncthreads();
      load_tile<T, Acc>(q_tile, ldq, p.q, b, h, t0, p.n.Sq, D);
      load_tile<T, Acc>(do_tile, ldo, p.dout, b, h, t0, p.n.Sq, Dv);
      if (threadIdx.x < kTile) {
        const int64_t i = t0 + threadIdx.x;
        Acc delta = 0, row_lse = 0;
        if (i < p.n.Sq) {
          const T* o = p.out.at(b, h, i);
          const T* g = p.dout.at(b, h, i);
          for (int64_t d = 0; d < Dv; ++d) delta += convert<Acc>(g[d]) * convert<Acc>(o[d]);
          row_lse = *p.lse.at(b, h, i);
        }
        delta_tile[threadIdx.x] = delta;
        lse_tile[threadIdx.x] = row_lse;
      }
      __syncthreads();
      if (!key_valid) continue;
      const int64_t i = t0 + lane;
      // a row whose logsumexp is -inf saw no key (all masked): no probabilities
      const bool visible = i < p.n.Sq && (!p.causal || j <= i) && lse_tile[lane] > minus_infinity<Acc>();
      Acc weight = 0, ds = 0;
      if (visible) {
        const auto [prob, dp] =
            probability_and_grad(p, q_tile + lane * ldq, do_tile + lane * ldo, ks, vs, lse_tile[lane], b, h, i, j);
        const Acc z = dropout_factor<Acc>(p.dropout, p.n, b, h, i, j);
        weight = prob * z;
        ds = prob * (z * dp - delta_tile[lane]);
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const Acc pi = __shfl_sync(0xffffffffu, weight, ii);
        const Acc dsi = __shfl_sync(0xffffffffu, ds, ii);
        const Acc* qr = q_tile + ii * ldq;
        const Acc* gr = do_tile + ii * ldo;
#pragma unroll
        for (int c = 0; c < PerLane; ++c) {
          const int64_t d = lane + c * kWarp;
          if (d < Dv) dv_acc[c] += pi * gr[d];
          if (d < D) dk_acc[c] += dsi * qr[d];
        }
      }
    }
  if (!key_valid) return;
  T* dkr = p.dk.at(b, hk, j);
  T* dvr = p.dv.at(b, hk, j);
#pragma unroll
  for (int c = 0; c < PerLane; ++c) {
    const int64_t d = lane + c * kWarp;
    if (d < D) dkr[d] = convert<T>(dk_acc[c] * p.scale);
    if (d < Dv) dvr[d] = convert<T>(dv_acc[c]);
  }
}

// ------------------------------------------------------------------------------------- backward: dq

// One query row i per warp; keys and values stream through shared memory as in the forward.
template <typename T, typename Acc, int PerLane>
__global__ void __launch_bounds__(kThreads) attention_backward_dq_kernel(BackwardParams<T, Acc> p) {
  const int64_t D = p.n.D, Dv = p.n.Dv;
  const TilePair<Acc> tiles(D, Dv, shared_memory<Acc>());  // keys, values; then a q row and a dout row per warp
  Acc* q_rows = tiles.after();                             // kWarps x D
  Acc* do_rows = q_rows + kWarps * D;                      // kWarps x Dv
  const auto [b, h, first_row, i, warp, lane, row_valid] = warp_row(p.n, RowsOf::queries);

  Acc* qs = q_rows + warp * D;
  Acc* gs = do_rows + warp * Dv;
  Acc delta = 0, row_lse = 0;
  if (row_valid) {
    load_row(qs, p.q, b, h, i, D, lane);
    Acc partial = 0;
    for (int64_t d = lane; d < Dv; d += kWarp) {
      const Acc g = convert<Acc>(p.dout.at(b, h, i)[d]);
      gs[d] = g;
      partial += g * convert<Acc>(p.out.at(b, h, i)[d]);
    }
    delta = warp_sum(partial);
    row_lse = *p.lse.at(b, h, i);
  }
  const auto [block_keys, row_keys] = key_counts(p, first_row, i, row_valid);

  Acc dq_acc[PerLane];
  for_lane_columns<PerLane>(lane, [&](int c, int64_t) { dq_acc[c] = 0; });

  for_each_key_tile<T>(tiles, p, b, h, block_keys, [&](int64_t t0) {
    if (!row_valid || t0 >= row_keys) return;
    const bool visible = t0 + lane < row_keys;
    Acc ds = 0;
    if (visible && row_lse > minus_infinity<Acc>()) {
      const int64_t j = t0 + lane;
      const auto [prob, dp] = probability_and_grad(p, qs, gs, tiles.first + lane * tiles.ld_first,
                                                   tiles.second + lane * tiles.ld_second, row_lse, b, h, i, j);
      ds = prob * (dropout_factor<Acc>(p.dropout, p.n, b, h, i, j) * dp - delta);
    }
    if (visible && p.grad_bias.data) p.grad_bias.store(b, h, i, t0 + lane, ds);
    accumulate_tile(dq_acc, ds, tiles.first, tiles.ld_first, D, lane);
  });
  if (!row_valid) return;
  if (p.grad_bias.data)  // the keys this row never saw (causal) have no gradient
    for (int64_t j = row_keys + lane; j < p.n.Sk; j += kWarp) p.grad_bias.store(b, h, i, j, Acc(0));
  T* dqr = p.dq.at(b, h, i);
  for_lane_columns<PerLane>(lane, [&](int c, int64_t d) {
    if (d < D) dqr[d] = convert<T>(dq_acc[c] * p.scale);
  });
}

// ------------------------------------------------------------------------------------------ launching

void check_operand(const StridedView& v, size_t rank, const char* what) {
  if (v.sizes.size() != rank)
    throw std::invalid_argument(std::string("cuda backend: attention: ") + what + " has " +
                                std::to_string(v.sizes.size()) + " dimensions, expected " + std::to_string(rank));
  if (rank == 4 && v.sizes[3] > 1 && v.strides[3] != 1)
    throw std::invalid_argument(std::string("cuda backend: attention: ") + what +
                                "'s last dimension must be contiguous (stride 1)");
}

// The bias and its gradient: (B, H, Sq, Sk), any strides.
void check_score_matrix(const StridedView& v, const char* what) {
  if (v.sizes.size() != 4)
    throw std::invalid_argument(std::string("cuda backend: attention: ") + what + " has " +
                                std::to_string(v.sizes.size()) + " dimensions, expected 4");
}

Shape4 shape_of(const StridedView& q, const StridedView& k, const StridedView& v) {
  const int64_t heads = q.sizes[1], kv_heads = k.sizes[1];
  if (v.sizes[1] != kv_heads || (kv_heads != heads && (kv_heads <= 0 || heads % kv_heads != 0)))
    throw std::invalid_argument(
        "cuda backend: attention: key and value must have one number of heads dividing query's");
  const Shape4 n{
      q.sizes[0], heads, q.sizes[2], k.sizes[2], q.sizes[3], v.sizes[3], kv_heads == heads ? 1 : heads / kv_heads};
  if (n.D > kMaxHeadDim || n.Dv > kMaxHeadDim)
    throw std::invalid_argument("cuda backend: attention supports head dimensions up to " +
                                std::to_string(kMaxHeadDim) + ", got " + std::to_string(std::max(n.D, n.Dv)));
  return n;
}

// Blocks over (b, h, row tiles): query heads for query rows, key/value heads (H / G) for key rows.
unsigned blocks_for(const Shape4& n, int64_t rows, bool key_rows = false) {
  const int64_t blocks = n.B * (key_rows ? n.H / n.G : n.H) * ((rows + kWarps - 1) / kWarps);
  if (blocks > INT_MAX) throw std::invalid_argument("cuda backend: attention: too many (batch, head, row) blocks");
  return static_cast<unsigned>(blocks);
}

// Opts the kernel in to `bytes` of dynamic shared memory (beyond the default 48 KiB where needed).
template <typename Kernel>
void set_shared_memory(Kernel kernel, size_t bytes, const char* name) {
  int device = 0, limit = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&device));
  BYTEGRAD_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(limit))
    throw std::invalid_argument(std::string("cuda backend: ") + name + " needs " + std::to_string(bytes) +
                                " bytes of shared memory, the device allows " + std::to_string(limit));
  BYTEGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <typename T>
using acc_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls launch(std::integral_constant<int, PerLane>) with the register columns the head dims need.
template <typename Launch>
void with_columns_per_lane(const Shape4& n, Launch&& launch) {
  if (std::max(n.D, n.Dv) <= 8 * kWarp) launch(std::integral_constant<int, 8>{});
  else launch(std::integral_constant<int, kMaxHeadDim / kWarp>{});
}

void check_lse_dtype(const StridedView& lse, ScalarType input) {
  const ScalarType want = input == ScalarType::float64 ? ScalarType::float64 : ScalarType::float32;
  if (lse.dtype != want)
    throw std::invalid_argument("cuda backend: attention: logsumexp must be " + std::string(scalar_type_name(want)));
}

}  // namespace

void attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                       const StridedView& v, double scale, bool is_causal, const AttentionExtras& extras) {
  check_operand(out, 4, "out");
  check_operand(q, 4, "q");
  check_operand(k, 4, "k");
  check_operand(v, 4, "v");
  if (lse) {
    check_operand(*lse, 3, "logsumexp");
    check_lse_dtype(*lse, q.dtype);
  }
  const Shape4 n = shape_of(q, k, v);
  if (extras.bias) check_score_matrix(*extras.bias, "the bias");
  if (out.numel() == 0) return;
  if (!extras.any() && n.G == 1 && cudnn_attention_pays(n.B, n.H, n.Sq, n.Sk, n.D) &&
      cudnn_attention_forward(out, lse, q, k, v, scale, is_causal, extras.forward_workspace))
    return;
  if (!extras.any() && n.G == 1 && attention_uses_tensor_cores(q.dtype, n.D, n.Dv))
    return attention_forward_tensor_cores(out, lse, q, k, v, scale, is_causal);
  dispatch_floating(q.dtype, "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_of<T>;
    const Rows<Acc> lse_rows =
        lse ? Rows<Acc>{static_cast<Acc*>(lse->data), lse->strides[0], lse->strides[1], lse->strides[2]}
            : Rows<Acc>{nullptr, 0, 0, 0};
    ForwardParams<T, Acc> p{rows_of<T>(out),
                            lse_rows,
                            rows_of<const T>(q),
                            rows_of<const T>(k),
                            rows_of<const T>(v),
                            n,
                            static_cast<Acc>(scale),
                            is_causal,
                            score_matrix_of(extras.bias),
                            dropout_draw(extras.dropout_p, extras.philox_seed, extras.philox_offset)};
    const size_t smem = sizeof(Acc) * (kTile * (n.D + 1) + kTile * (n.Dv + 1) + kWarps * n.D);
    with_columns_per_lane(n, [&](auto columns) {
      constexpr int per_lane = decltype(columns)::value;
      set_shared_memory(attention_forward_kernel<T, Acc, per_lane>, smem, "attention_forward");
      attention_forward_kernel<T, Acc, per_lane><<<blocks_for(n, n.Sq), kThreads, smem, launch_stream()>>>(p);
      BYTEGRAD_CUDA_CHECK_LAUNCH("attention_forward_kernel");
    });
  });
}

void attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv, const StridedView& dout,
                        const StridedView& q, const StridedView& k, const StridedView& v, const StridedView& out,
                        const StridedView& lse, double scale, bool is_causal, DeviceScratch scratch,
                        const AttentionExtras& extras) {
  check_operand(dq, 4, "dq");
  check_operand(dk, 4, "dk");
  check_operand(dv, 4, "dv");
  check_operand(dout, 4, "dout");
  check_operand(q, 4, "q");
  check_operand(k, 4, "k");
  check_operand(v, 4, "v");
  check_operand(out, 4, "out");
  check_operand(lse, 3, "logsumexp");
  check_lse_dtype(lse, q.dtype);
  const Shape4 n = shape_of(q, k, v);
  if (extras.bias) check_score_matrix(*extras.bias, "the bias");
  if (extras.grad_bias) check_score_matrix(*extras.grad_bias, "the bias gradient");
  if (dq.numel() == 0 && dk.numel() == 0 && dv.numel() == 0) return;
  if (!extras.any() && n.G == 1 && cudnn_attention_pays(n.B, n.H, n.Sq, n.Sk, n.D) &&
      cudnn_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale, is_causal, scratch))
    return;
  if (!extras.any() && n.G == 1 && attention_uses_tensor_cores(q.dtype, n.D, n.Dv))
    return attention_backward_tensor_cores(dq, dk, dv, dout, q, k, v, out, lse, scale, is_causal, scratch);
  dispatch_floating(q.dtype, "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = acc_of<T>;
    BackwardParams<T, Acc> p{backward_operands_of<T>(dq, dk, dv, dout, q, k, v, out),
                             rows_of<const Acc>(lse),
                             n,
                             static_cast<Acc>(scale),
                             is_causal,
                             score_matrix_of(extras.bias),
                             score_matrix_of(extras.grad_bias),
                             dropout_draw(extras.dropout_p, extras.philox_seed, extras.philox_offset)};
    with_columns_per_lane(n, [&](auto columns) {
      constexpr int per_lane = decltype(columns)::value;
      if (n.Sk > 0) {
        const size_t smem =
            sizeof(Acc) * (kTile * (n.D + 1) + kTile * (n.Dv + 1) + 2 * kTile + kWarps * n.D + kWarps * n.Dv);
        set_shared_memory(attention_backward_dkdv_kernel<T, Acc, per_lane>, smem, "attention_backward (dk, dv)");
        attention_backward_dkdv_kernel<T, Acc, per_lane>
            <<<blocks_for(n, n.Sk, true), kThreads, smem, launch_stream()>>>(p);
        BYTEGRAD_CUDA_CHECK_LAUNCH("attention_backward_dkdv_kernel");
      }
      if (n.Sq > 0) {
        const size_t smem = sizeof(Acc) * (kTile * (n.D + 1) + kTile * (n.Dv + 1) + kWarps * n.D + kWarps * n.Dv);
        set_shared_memory(attention_backward_dq_kernel<T, Acc, per_lane>, smem, "attention_backward (dq)");
        attention_backward_dq_kernel<T, Acc, per_lane><<<blocks_for(n, n.Sq), kThreads, smem, launch_stream()>>>(p);
        BYTEGRAD_CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
      }
    });
  });
}

}  // namespace bytegrad::cuda
