// Layer normalization over contiguous (M, N) rows. Forward and the input gradient: one warp per row when
// N <= 1024, one 256-thread block per row otherwise (grid-stride over rows); a row's sums are combined with
// warp shuffles (and shared memory across warps). Statistics take two passes over the row (the mean, then
// the mean squared deviation), in float for the 16/32-bit floats and double for float64, so a large common
// offset does not cancel catastrophically. Rows of up to 1024 that are whole aligned 16-byte vectors (GPT-2's
// 768 in float32 or bfloat16) sit in a warp's registers, read and written a vector at a time; other rows in
// registers an element a lane at a time (the forward up to 512, the input gradient up to 1024), or read
// once per pass. Weight and bias gradients: where the caller lends scratch (the cuBLAS workspace: PyTorch
// allocates nothing for these sums) and rows are vector rows, the input gradient's kernel also adds each
// lane's columns of dy * xhat and dy over its rows, each block writes its warps' sums (added in warp order)
// as one partial row of the scratch, and a second kernel adds the partial rows in block order: dy and x are
// read once, and the result is the same from run to run on a card. Otherwise an (8 columns x 128 lanes)
// block per 8 columns and partial row r, each lane summing every 128th of the rows m with m % R == r (four
// rows' loads in flight), then the lanes combined in shared memory. A null mean asks for RMS normalization
// (PyTorch's _fused_rms_norm runs layer_norm's kernels with rms_norm set): the mean is taken as 0 and not
// stored, and the input gradient has no mean(g) term.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/cuda/cuda_rows.cuh"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

namespace {

template <typename T, typename Acc>
__device__ __forceinline__ Acc load_or(const T* p, int64_t i, Acc absent) {
  return p ? convert<Acc>(p[i]) : absent;
}

// The forward's operands (weight and bias may be null). The kernels take them as separate parameters and
// build this inside: passed as one struct, nvcc schedules the kernels differently.
template <typename T>
struct ForwardOperands {
  T* y;
  opmath_t<T>* mean;
  opmath_t<T>* rstd;
  const T* x;
  const T* weight;
  const T* bias;
};

// One row of the input gradient's inputs: g = dy * weight and xhat = (x - mean) * rstd at column j.
template <typename T>
struct InputGradRow {
  using Acc = opmath_t<T>;
  const T* x;
  const T* dy;
  const T* weight;
  Acc mean, rstd;
  __device__ __forceinline__ Acc g(int64_t j) const { return convert<Acc>(dy[j]) * load_or<T, Acc>(weight, j, Acc(1)); }
  __device__ __forceinline__ Acc xhat(int64_t j) const { return (convert<Acc>(x[j]) - mean) * rstd; }
};

// The input gradient's operands (weight may be null); built inside the kernels, as ForwardOperands.
template <typename T>
struct InputGradOperands {
  T* dx;
  const T* dy;
  const T* x;
  const opmath_t<T>* mean;
  const opmath_t<T>* rstd;
  const T* weight;
  __device__ __forceinline__ InputGradRow<T> row(int64_t r, int64_t n) const {
    return {x + r * n, dy + r * n, weight, mean ? mean[r] : opmath_t<T>(0), rstd[r]};
  }
};

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) for g = dy * weight and xhat = (x - mean) * rstd, from
// mean(g) (0 for RMS normalization) and the row's sum of g * xhat.
template <typename T, typename Acc>
__device__ __forceinline__ T input_grad(Acc g, Acc xhat, Acc rstd, Acc mean_g, Acc sum_g_xhat, Acc inv_n) {
  return convert<T>(rstd * (g - mean_g - xhat * sum_g_xhat * inv_n));
}

// rstd = 1 / sqrt(var + eps) from the lanes' sums of squared deviations; lane 0 stores the row's mean and rstd.
template <int kThreadsPerRow, typename Acc>
__device__ __forceinline__ Acc row_rstd(Acc sq, Acc mean, Acc n, double eps, int lane, int64_t row, Acc* mean_out,
                                        Acc* rstd_out) {
  const Acc var = row_allreduce<kThreadsPerRow>(sq, SumOp{}) / n;
  const Acc rstd = Acc(1) / pointwise::m_sqrt(var + static_cast<Acc>(eps));
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  return rstd;
}

// y = (x - mean) * rstd * weight + bias for column j (weight and bias optional).
template <typename T, typename Acc>
__device__ __forceinline__ T normalized(Acc x, Acc mean, Acc rstd, const T* weight, const T* bias, int64_t j) {
  return convert<T>((x - mean) * rstd * load_or<T, Acc>(weight, j, Acc(1)) + load_or<T, Acc>(bias, j, Acc(0)));
}

// The row loop of the forward and input-gradient kernels: this thread's rows of M (grid-stride, the same rows
// for all kThreadsPerRow threads of a row, so a row's threads may synchronize) and its lane in the row.
template <int kThreadsPerRow, typename Body>
__device__ __forceinline__ void for_each_row(int64_t M, Body&& body) {
  int64_t row, row_step;
  int lane;
  row_assignment<kThreadsPerRow>(row, row_step, lane);
  for (; row < M; row += row_step) body(row, lane);  // uniform across the threads of a row
}

// How the forward and the input gradient take a row: StridedRows, kThreadsPerRow threads (a warp or a block)
// striding over a row of any length, reading it once per pass; RegisterRows, a warp holding a row of at most
// 32 kPerLane elements in registers (element lane + 32 i), the strided passes' sums in the same order, each
// operand read once (the forward launches it up to 512 elements, the input gradient up to 1024).
template <int kThreadsPerRow>
struct StridedRows {
  static constexpr int kThreads = kThreadsPerRow;
  static constexpr bool kInRegisters = false;
  using Length = int64_t;
};

template <int kElementsPerLane>
struct RegisterRows {
  static constexpr int kThreads = kWarp, kPerLane = kElementsPerLane;
  static constexpr bool kInRegisters = true;
  using Length = int;
};

// One row of the forward: the mean, then the mean squared deviation (two passes), then y; lane 0 stores the
// row's mean and rstd.
template <typename Rows, typename T>
__device__ __forceinline__ void forward_row(const ForwardOperands<T>& io, int64_t row, typename Rows::Length N,
                                            double eps, int lane) {
  using Acc = opmath_t<T>;
  const T* xr = io.x + row * N;
  if constexpr (Rows::kInRegisters) {
    constexpr int kPerLane = Rows::kPerLane;
    Acc v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      v[i] = j < N ? convert<Acc>(xr[j]) : Acc(0);
    }
    Acc mean = 0;
    if (io.mean) {
      Acc sum = 0;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + i * kWarp < N) sum += v[i];
      mean = row_allreduce<kWarp>(sum, SumOp{}) / static_cast<Acc>(N);
    }
    Acc sq = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + i * kWarp < N) {
        const Acc d = v[i] - mean;
        sq += d * d;
      }
    }
    const Acc rstd = row_rstd<kWarp>(sq, mean, static_cast<Acc>(N), eps, lane, row, io.mean, io.rstd);
    T* yr = io.y + row * N;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      if (j < N) yr[j] = normalized(v[i], mean, rstd, io.weight, io.bias, j);
    }
  } else {
    constexpr int kThreadsPerRow = Rows::kThreads;
    Acc mean = 0;
    if (io.mean) {
      Acc sum = 0;
      for (int64_t j = lane; j < N; j += kThreadsPerRow) sum += convert<Acc>(xr[j]);
      mean = row_allreduce<kThreadsPerRow>(sum, SumOp{}) / static_cast<Acc>(N);
    }
    Acc sq = 0;
    for (int64_t j = lane; j < N; j += kThreadsPerRow) {
      const Acc d = convert<Acc>(xr[j]) - mean;
      sq += d * d;
    }
    const Acc rstd = row_rstd<kThreadsPerRow>(sq, mean, static_cast<Acc>(N), eps, lane, row, io.mean, io.rstd);
    T* yr = io.y + row * N;
    for (int64_t j = lane; j < N; j += kThreadsPerRow)
      yr[j] = normalized(convert<Acc>(xr[j]), mean, rstd, io.weight, io.bias, j);
  }
}

// One row of the input gradient: the sums of g and g * xhat, then dx.
template <typename Rows, typename T>
__device__ __forceinline__ void input_grad_row(const InputGradOperands<T>& io, int64_t row, typename Rows::Length N,
                                               int lane) {
  using Acc = opmath_t<T>;
  const InputGradRow<T> in = io.row(row, N);
  if constexpr (Rows::kInRegisters) {
    constexpr int kPerLane = Rows::kPerLane;
    Acc g[kPerLane], xhat[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      g[i] = j < N ? in.g(j) : Acc(0);
      xhat[i] = j < N ? in.xhat(j) : Acc(0);
    }
    Acc sum_g = 0, sum_g_xhat = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + i * kWarp < N) {
        sum_g += g[i];
        sum_g_xhat += g[i] * xhat[i];
      }
    }
    sum_g = row_allreduce<kWarp>(sum_g, SumOp{});
    sum_g_xhat = row_allreduce<kWarp>(sum_g_xhat, SumOp{});
    const Acc inv_n = Acc(1) / static_cast<Acc>(N);
    const Acc mean_g = io.mean ? sum_g * inv_n : Acc(0);
    T* dr = io.dx + row * N;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      if (j < N) dr[j] = input_grad<T>(g[i], xhat[i], in.rstd, mean_g, sum_g_xhat, inv_n);
    }
  } else {
    constexpr int kThreadsPerRow = Rows::kThreads;
    Acc sum_g = 0, sum_g_xhat = 0;
    for (int64_t j = lane; j < N; j += kThreadsPerRow) {
      const Acc g = in.g(j);
      sum_g += g;
      sum_g_xhat += g * (convert<Acc>(in.x[j]) - in.mean) * in.rstd;
    }
    sum_g = row_allreduce<kThreadsPerRow>(sum_g, SumOp{});
    sum_g_xhat = row_allreduce<kThreadsPerRow>(sum_g_xhat, SumOp{});
    const Acc inv_n = Acc(1) / static_cast<Acc>(N);
    const Acc mean_g = io.mean ? sum_g * inv_n : Acc(0);
    T* dr = io.dx + row * N;
    for (int64_t j = lane; j < N; j += kThreadsPerRow)
      dr[j] = input_grad<T>(in.g(j), in.xhat(j), in.rstd, mean_g, sum_g_xhat, inv_n);
  }
}

// The forward and the input gradient over M rows of N, one kernel each for either way of taking a row.
template <typename T, typename Rows>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_forward_kernel(T* y, opmath_t<T>* mean_out, opmath_t<T>* rstd_out, const T* x, const T* weight,
                              const T* bias, int64_t M, typename Rows::Length N, double eps) {
  const ForwardOperands<T> io{y, mean_out, rstd_out, x, weight, bias};
  for_each_row<Rows::kThreads>(M, [&](int64_t row, int lane) { forward_row<Rows>(io, row, N, eps, lane); });
}

template <typename T, typename Rows>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_input_grad_kernel(T* dx, const T* dy, const T* x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                 const T* weight, int64_t M, typename Rows::Length N) {
  const InputGradOperands<T> io{dx, dy, x, mean, rstd, weight};
  for_each_row<Rows::kThreads>(M, [&](int64_t row, int lane) { input_grad_row<Rows>(io, row, N, lane); });
}

// Weight and bias gradients: blocks of kColumns columns x kLanes lanes (1024 threads). With 8 columns a
// warp reads 4 rows x 32 bytes per load, whole sectors, so narrow tiles cost no bandwidth and give a
// 768-wide row 96 blocks instead of 24.
constexpr int kColumns = 8;
constexpr int kLanes = 128;

// grid (ceil(N / kColumns), R), block (kColumns, kLanes): partial row blockIdx.y of the weight and bias
// gradients. Each lane sums every (kLanes R)-th row, four rows' loads in flight at a time, in row order;
// then the lanes' sums are added in lane order.
template <typename T>
__global__ void __launch_bounds__(kColumns* kLanes)
    layer_norm_gamma_beta_kernel(T* dweight, T* dbias, const T* dy, const T* x, const opmath_t<T>* mean,
                                 const opmath_t<T>* rstd, int64_t M, int64_t N, int64_t R) {
  using Acc = opmath_t<T>;
  __shared__ Acc shared_w[kLanes][kColumns + 1];
  __shared__ Acc shared_b[kLanes][kColumns + 1];
  const int64_t column = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t r = blockIdx.y;
  Acc w = 0, b = 0;
  if (column < N) {
    const int64_t step = R * kLanes;
    int64_t m = r + R * threadIdx.y;
    for (; m + 3 * step < M; m += 4 * step) {
      Acc g[4], xv[4], mu[4], rs[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t row = m + u * step;
        g[u] = convert<Acc>(dy[row * N + column]);
        if (dweight) {
          xv[u] = convert<Acc>(x[row * N + column]);
          mu[u] = mean ? mean[row] : Acc(0);
          rs[u] = rstd[row];
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (dweight) w += g[u] * (xv[u] - mu[u]) * rs[u];
        b += g[u];
      }
    }
    for (; m < M; m += step) {
      const Acc g = convert<Acc>(dy[m * N + column]);
      if (dweight) w += g * (convert<Acc>(x[m * N + column]) - (mean ? mean[m] : Acc(0))) * rstd[m];
      b += g;
    }
  }
  shared_w[threadIdx.y][threadIdx.x] = w;
  shared_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && column < N) {
    for (int k = 1; k < kLanes; ++k) {
      w += shared_w[k][threadIdx.x];
      b += shared_b[k][threadIdx.x];
    }
    if (dweight) dweight[r * N + column] = convert<T>(w);
    if (dbias) dbias[r * N + column] = convert<T>(b);
  }
}

void require_contiguous(const StridedView& v, const char* op) {
  if (!v.is_contiguous())
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": operands must be contiguous");
}

template <typename P>
P* data_or_null(const StridedView* v) {
  return v ? static_cast<P*>(v->data) : nullptr;
}

// ---- The fused backward: dx and per-block partial sums of the weight and bias gradients in one pass.

constexpr int kFusedWarps = 4;
constexpr int kFusedThreads = kFusedWarps * kWarp;

// A row's elements in 16-byte vectors: kVec<T> elements each, vector lane + 32 i of the row held by lane
// `lane` (elements kVec (lane + 32 i) .. + kVec - 1).
template <typename T>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// Blocks of kFusedWarps warps, a warp per row holding it in registers (kVecs vectors a lane), the grid's
// warps taking rows in turn. Each warp adds dy * xhat and dy at every column over its rows (in row order)
// into its own shared-memory rows, a lane only ever touching its own columns (so no barrier until the end;
// in registers they would spill at 768); then the block adds its warps' sums in warp order and writes them
// as partials' row blockIdx.x: [weight sums (N), bias sums (N)], the half not wanted left alone. dx may be
// null. Rows, weight and N are whole aligned vectors (layer_norm_backward_fused checks).
template <typename T, int kVecs>
__global__ void __launch_bounds__(kFusedThreads)
    layer_norm_backward_fused_kernel(T* dx, const T* dy, const T* x, const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                     const T* weight, opmath_t<T>* partials, int64_t M, int N, bool want_weight,
                                     bool want_bias) {
  using Acc = opmath_t<T>;
  constexpr int kV = kVec<T>;
  constexpr int kWidth = kVecs * kWarp * kV;
  static_assert(std::is_same_v<Acc, float> && kV % 4 == 0, "sums are stored as float4s");
  __shared__ __align__(16) Acc sums[kFusedWarps][2][kWidth];  // [warp][weight, bias][column]
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int vectors = N / kV;
  Acc* sum_w = sums[warp][0];
  Acc* sum_b = sums[warp][1];
  // This lane's k-th element of vector i, its column and its accumulators.
  auto column = [&](int i) { return (lane + i * kWarp) * kV; };
  auto add_to = [&](Acc* row_sums, int i, const Acc(&v)[kV]) {
#pragma unroll
    for (int c = 0; c < kV; c += 4) {
      float4* p = reinterpret_cast<float4*>(row_sums + column(i) + c);
      float4 s = *p;
      s.x += v[c];
      s.y += v[c + 1];
      s.z += v[c + 2];
      s.w += v[c + 3];
      *p = s;
    }
  };
#pragma unroll
  for (int i = 0; i < kVecs; ++i)
#pragma unroll
    for (int c = 0; c < kV; c += 4) {
      *reinterpret_cast<float4*>(sum_w + column(i) + c) = float4{0, 0, 0, 0};
      *reinterpret_cast<float4*>(sum_b + column(i) + c) = float4{0, 0, 0, 0};
    }
  // The weight at this lane's columns, read once.
  Acc w[kVecs][kV];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    Vec<T, kV> wv{};
    if (weight && lane + i * kWarp < vectors) wv = *reinterpret_cast<const Vec<T, kV>*>(weight + column(i));
#pragma unroll
    for (int k = 0; k < kV; ++k) w[i][k] = weight ? convert<Acc>(wv.v[k]) : Acc(1);
  }
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * kFusedWarps;
  const Acc inv_n = Acc(1) / static_cast<Acc>(N);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kFusedWarps + warp; row < M; row += row_step) {
    const Acc mu = mean ? mean[row] : Acc(0), rs = rstd[row];
    Acc d[kVecs][kV], xhat[kVecs][kV];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      Vec<T, kV> dv{}, xv{};
      if (lane + i * kWarp < vectors) {
        dv = *reinterpret_cast<const Vec<T, kV>*>(dy + row * N + column(i));
        xv = *reinterpret_cast<const Vec<T, kV>*>(x + row * N + column(i));
      }
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        d[i][k] = convert<Acc>(dv.v[k]);  // 0 past the row's end, where the sums then add nothing
        xhat[i][k] = (convert<Acc>(xv.v[k]) - mu) * rs;
      }
    }
    if (dx) {
      Acc sum_g = 0, sum_g_xhat = 0;
#pragma unroll
      for (int i = 0; i < kVecs; ++i)
#pragma unroll
        for (int k = 0; k < kV; ++k) {
          const Acc g = d[i][k] * w[i][k];
          sum_g += g;
          sum_g_xhat += g * xhat[i][k];
        }
      sum_g = row_allreduce<kWarp>(sum_g, SumOp{});
      sum_g_xhat = row_allreduce<kWarp>(sum_g_xhat, SumOp{});
      const Acc mean_g = mean ? sum_g * inv_n : Acc(0);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        if (lane + i * kWarp >= vectors) continue;
        Vec<T, kV> out;
#pragma unroll
        for (int k = 0; k < kV; ++k)
          out.v[k] = input_grad<T>(d[i][k] * w[i][k], xhat[i][k], rs, mean_g, sum_g_xhat, inv_n);
        *reinterpret_cast<Vec<T, kV>*>(dx + row * N + column(i)) = out;
      }
    }
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (lane + i * kWarp >= vectors) continue;
      Acc dxhat[kV];
#pragma unroll
      for (int k = 0; k < kV; ++k) dxhat[k] = d[i][k] * xhat[i][k];
      add_to(sum_w, i, dxhat);
      add_to(sum_b, i, d[i]);
    }
  }
  __syncthreads();
  Acc* partial_row = partials + static_cast<int64_t>(blockIdx.x) * 2 * N;
  for (int half = 0; half < 2; ++half) {
    if (half == 0 ? !want_weight : !want_bias) continue;
    for (int j = static_cast<int>(threadIdx.x); j < N; j += kFusedThreads) {
      Acc s = sums[0][half][j];
#pragma unroll
      for (int v = 1; v < kFusedWarps; ++v) s += sums[v][half][j];
      partial_row[half * N + j] = s;
    }
  }
}

// The forward over rows of at most 1024 in whole aligned 16-byte vectors: a warp per row holding it in
// registers (kVecs vectors a lane, as the fused backward), the mean, then the mean squared deviation, then y;
// weight and bias read once a thread. Blocks of kBlockThreads, the grid's warps taking rows in turn.
template <typename T, int kVecs>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_forward_vectors_kernel(T* y, opmath_t<T>* mean_out, opmath_t<T>* rstd_out, const T* x, const T* weight,
                                      const T* bias, int64_t M, int N, double eps) {
  using Acc = opmath_t<T>;
  constexpr int kV = kVec<T>;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int vectors = N / kV;
  auto column = [&](int i) { return (lane + i * kWarp) * kV; };
  auto in_row = [&](int i) { return lane + i * kWarp < vectors; };
  Acc w[kVecs][kV], b[kVecs][kV];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    Vec<T, kV> wv{}, bv{};
    if (in_row(i)) {
      if (weight) wv = *reinterpret_cast<const Vec<T, kV>*>(weight + column(i));
      if (bias) bv = *reinterpret_cast<const Vec<T, kV>*>(bias + column(i));
    }
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      w[i][k] = weight ? convert<Acc>(wv.v[k]) : Acc(1);
      b[i][k] = bias ? convert<Acc>(bv.v[k]) : Acc(0);
    }
  }
  constexpr int kWarps = kBlockThreads / kWarp;
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < M; row += row_step) {
    Acc v[kVecs][kV];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      Vec<T, kV> xv{};
      if (in_row(i)) xv = *reinterpret_cast<const Vec<T, kV>*>(x + row * N + column(i));
#pragma unroll
      for (int k = 0; k < kV; ++k) v[i][k] = convert<Acc>(xv.v[k]);
    }
    Acc mu = 0;
    if (mean_out) {
      Acc sum = 0;
#pragma unroll
      for (int i = 0; i < kVecs; ++i)
#pragma unroll
        for (int k = 0; k < kV; ++k) sum += v[i][k];  // 0 past the row's end
      mu = row_allreduce<kWarp>(sum, SumOp{}) / static_cast<Acc>(N);
    }
    Acc sq = 0;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!in_row(i)) continue;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const Acc dev = v[i][k] - mu;
        sq += dev * dev;
      }
    }
    const Acc rs = row_rstd<kWarp>(sq, mu, static_cast<Acc>(N), eps, lane, row, mean_out, rstd_out);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!in_row(i)) continue;
      Vec<T, kV> out;
#pragma unroll
      for (int k = 0; k < kV; ++k) out.v[k] = convert<T>((v[i][k] - mu) * rs * w[i][k] + b[i][k]);
      *reinterpret_cast<Vec<T, kV>*>(y + row * N + column(i)) = out;
    }
  }
}

constexpr int kSumRows = 8;  // thread rows of the partial rows' sum

// grid (ceil(N / kWarp), 2), block (kWarp, kSumRows): blockIdx.y 0 sums the partial rows' weight halves
// into dweight, 1 their bias halves into dbias (null: nothing). Thread row y adds the partial rows y,
// y + kSumRows, ... in order, then thread row 0 adds the kSumRows sums in order.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    layer_norm_partial_rows_sum_kernel(T* dweight, T* dbias, const opmath_t<T>* partials, int blocks, int N) {
  using Acc = opmath_t<T>;
  __shared__ Acc shared[kSumRows][kWarp];
  T* out = blockIdx.y == 0 ? dweight : dbias;
  if (out == nullptr) return;  // uniform across the block
  const int column = static_cast<int>(blockIdx.x) * kWarp + static_cast<int>(threadIdx.x);
  Acc s = 0;
  if (column < N)
    for (int b = static_cast<int>(threadIdx.y); b < blocks; b += kSumRows)
      s += partials[static_cast<int64_t>(b) * 2 * N + static_cast<int64_t>(blockIdx.y) * N + column];
  shared[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && column < N) {
    for (int y = 1; y < kSumRows; ++y) s += shared[y][threadIdx.x];
    out[column] = convert<T>(s);
  }
}

// kVecs for the vector kernels: the fewest of 1, 2, 3, 4, 6, 8 vectors a lane that hold `vectors` (float32's
// 768: 6; bfloat16's: 3), up to kMaxVecs (a row of 1024).
template <int kMaxVecs, typename Launch>
void dispatch_vectors(int64_t vectors, Launch&& launch) {
  const int64_t per_lane = (vectors + kWarp - 1) / kWarp;
  if (per_lane <= 1) launch(std::integral_constant<int, 1>{});
  else if (per_lane <= 2) launch(std::integral_constant<int, 2>{});
  else if (per_lane <= 3) launch(std::integral_constant<int, 3>{});
  else if (per_lane <= 4 || kMaxVecs <= 4) launch(std::integral_constant<int, 4>{});
  else if constexpr (kMaxVecs > 4) {
    if (per_lane <= 6) launch(std::integral_constant<int, 6>{});
    else launch(std::integral_constant<int, 8>{});
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The current device's SM count, and how many blocks of kKernel (kThreads each, no dynamic shared memory) an
// SM holds at once: asked once per thread and device, since each query costs host time and the launches
// here come 50 times a GPT-2 step.
int multiprocessor_count() {
  static thread_local int cached_device = -1, count = 0;
  int device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    BYTEGRAD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    cached_device = device;
  }
  return count;
}

template <auto kKernel, int kThreads>
int resident_blocks_per_sm() {
  static thread_local int cached_device = -1, blocks = 0;
  int device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    BYTEGRAD_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, kThreads, 0));
    cached_device = device;
  }
  return blocks;
}

// The fused pass when it applies: float accumulation (the 16/32-bit floats), rows of at most 1024 in whole
// aligned 16-byte vectors, whole gradients (no partial rows asked for) and scratch for at least one block's
// partial row. As many blocks as
// fit on the SMs at once (at most kFusedBlocksPerSm an SM: 16 warps), fewer where the rows or the scratch
// run out: the same count for the same call on a card, so the same sums from run to run.
constexpr int kFusedBlocksPerSm = 4;

template <typename T>
bool layer_norm_backward_fused(const StridedView* dx, const StridedView* dweight, const StridedView* dbias,
                               const StridedView& dy, const StridedView& x, const StridedView& mean,
                               const StridedView& rstd, const StridedView* weight, DeviceScratch scratch, int64_t M,
                               int64_t N) {
  using Acc = opmath_t<T>;
  if constexpr (!std::is_same_v<Acc, float>) {
    return false;
  } else {
    constexpr int kV = kVec<T>;
    if ((!dweight && !dbias) || N > 1024 || N % kV != 0 || scratch.data == nullptr) return false;
    for (const StridedView* v : {dweight, dbias})
      if (v && v->sizes.at(0) != 1) return false;
    for (const void* p : {dx ? dx->data : nullptr, dy.data, x.data, weight ? weight->data : nullptr, scratch.data})
      if (!aligned16(p)) return false;
    const int64_t row_bytes = 2 * N * static_cast<int64_t>(sizeof(Acc));
    auto* partials = static_cast<Acc*>(scratch.data);
    int64_t blocks = 0;
    dispatch_vectors<1024 / kV / kWarp>(N / kV, [&](auto vecs) {
      constexpr auto kernel = layer_norm_backward_fused_kernel<T, decltype(vecs)::value>;
      const int per_sm = resident_blocks_per_sm<kernel, kFusedThreads>();
      blocks = std::min({int64_t{std::clamp(per_sm, 1, kFusedBlocksPerSm)} * multiprocessor_count(),
                         (M + kFusedWarps - 1) / kFusedWarps, scratch.bytes / row_bytes});
      if (blocks < 1) return;
      kernel<<<static_cast<unsigned>(blocks), kFusedThreads, 0, launch_stream()>>>(
          data_or_null<T>(dx), static_cast<const T*>(dy.data), static_cast<const T*>(x.data),
          static_cast<const Acc*>(mean.data), static_cast<const Acc*>(rstd.data), data_or_null<const T>(weight),
          partials, M, static_cast<int>(N), dweight != nullptr, dbias != nullptr);
      BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_backward_fused_kernel");
    });
    if (blocks < 1) return false;
    const dim3 grid(static_cast<unsigned>((N + kWarp - 1) / kWarp), 2);
    layer_norm_partial_rows_sum_kernel<T><<<grid, dim3(kWarp, kSumRows), 0, launch_stream()>>>(
        data_or_null<T>(dweight), data_or_null<T>(dbias), partials, static_cast<int>(blocks), static_cast<int>(N));
    BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_partial_rows_sum_kernel");
    return true;
  }
}
}  // namespace

void layer_norm(const StridedView& y, const StridedView& mean, const StridedView& rstd, const StridedView& x,
                const StridedView* weight, const StridedView* bias, double eps) {
  const int64_t M = rstd.numel();
  const int64_t N = M > 0 ? x.numel() / M : 0;
  for (const StridedView* v : {&y, mean.data ? &mean : nullptr, &rstd, &x, weight, bias})
    if (v) require_contiguous(*v, "layer_norm");
  dispatch_floating(x.dtype, "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const ForwardOperands<T> io{static_cast<T*>(y.data),       static_cast<Acc*>(mean.data),
                                static_cast<Acc*>(rstd.data),  static_cast<const T*>(x.data),
                                data_or_null<const T>(weight), data_or_null<const T>(bias)};
    if constexpr (sizeof(T) <= 4) {
      constexpr int kV = kVec<T>;
      bool vectors = M > 0 && N > 0 && N <= 1024 && N % kV == 0;
      for (const void* p : {y.data, x.data, weight ? weight->data : nullptr, bias ? bias->data : nullptr})
        vectors = vectors && aligned16(p);
      if (vectors) {
        dispatch_vectors<1024 / kV / kWarp>(N / kV, [&](auto vecs) {
          constexpr auto kernel = layer_norm_forward_vectors_kernel<T, decltype(vecs)::value>;
          const int per_sm = resident_blocks_per_sm<kernel, kBlockThreads>();
          const int64_t blocks = std::min<int64_t>((M + kBlockThreads / kWarp - 1) / (kBlockThreads / kWarp),
                                                   int64_t{std::max(per_sm, 1)} * multiprocessor_count());
          kernel<<<static_cast<unsigned>(blocks), kBlockThreads, 0, launch_stream()>>>(
              io.y, io.mean, io.rstd, io.x, io.weight, io.bias, M, static_cast<int>(N), eps);
          BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_forward_vectors_kernel");
        });
        return;
      }
    }
    // Other rows in registers up to 512 only: at 768 (32 a lane) the general kernel was faster on the H100
    // (0.022 against 0.030 ms a call at 8192 x 768).
    if (M > 0 && N > 0 && N <= 512) {
      dispatch_per_lane<4>(N, [&](auto per_lane) {
        layer_norm_forward_kernel<T, RegisterRows<decltype(per_lane)::value>>
            <<<grid_for(M, kBlockThreads / kWarp), kBlockThreads, 0, launch_stream()>>>(
                io.y, io.mean, io.rstd, io.x, io.weight, io.bias, M, static_cast<int>(N), eps);
        BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel (rows in registers)");
      });
      return;
    }
    launch_rows(M, N, [&](auto threads_per_row, unsigned blocks) {
      layer_norm_forward_kernel<T, StridedRows<decltype(threads_per_row)::value>>
          <<<blocks, kBlockThreads, 0, launch_stream()>>>(io.y, io.mean, io.rstd, io.x, io.weight, io.bias, M, N, eps);
      BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel");
    });
  });
}

void layer_norm_backward(const StridedView* dx, const StridedView* dweight_partials, const StridedView* dbias_partials,
                         const StridedView& dy, const StridedView& x, const StridedView& mean, const StridedView& rstd,
                         const StridedView* weight, DeviceScratch scratch) {
  const int64_t M = rstd.numel();
  const int64_t N = M > 0 ? x.numel() / M : 0;
  for (const StridedView* v :
       {dx, dweight_partials, dbias_partials, &dy, &x, mean.data ? &mean : nullptr, &rstd, weight})
    if (v) require_contiguous(*v, "layer_norm_backward");
  if (M == 0 || N == 0) return;
  dispatch_floating(x.dtype, "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    if (layer_norm_backward_fused<T>(dx, dweight_partials, dbias_partials, dy, x, mean, rstd, weight, scratch, M, N))
      return;
    const InputGradOperands<T> io{data_or_null<T>(dx),
                                  static_cast<const T*>(dy.data),
                                  static_cast<const T*>(x.data),
                                  static_cast<const Acc*>(mean.data),
                                  static_cast<const Acc*>(rstd.data),
                                  data_or_null<const T>(weight)};
    if (dx && N <= 1024) {
      auto launch = [&](auto per_lane) {
        layer_norm_input_grad_kernel<T, RegisterRows<decltype(per_lane)::value>>
            <<<grid_for(M, kBlockThreads / kWarp), kBlockThreads, 0, launch_stream()>>>(
                io.dx, io.dy, io.x, io.mean, io.rstd, io.weight, M, static_cast<int>(N));
        BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_input_grad_kernel (rows in registers)");
      };
      dispatch_per_lane<4>(N, launch);
    } else if (dx) {
      launch_rows(M, N, [&](auto threads_per_row, unsigned blocks) {
        layer_norm_input_grad_kernel<T, StridedRows<decltype(threads_per_row)::value>>
            <<<blocks, kBlockThreads, 0, launch_stream()>>>(io.dx, io.dy, io.x, io.mean, io.rstd, io.weight, M, N);
        BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_input_grad_kernel");
      });
    }
    if ((dweight_partials || dbias_partials) && N > 0) {
      const int64_t R = dweight_partials ? dweight_partials->sizes.at(0) : dbias_partials->sizes.at(0);
      if (dweight_partials && dbias_partials && dbias_partials->sizes.at(0) != R)
        throw std::invalid_argument("cuda backend: layer_norm_backward: weight and bias partials differ in rows");
      const dim3 grid(static_cast<unsigned>((N + kColumns - 1) / kColumns), static_cast<unsigned>(R));
      const dim3 block(kColumns, kLanes);
      layer_norm_gamma_beta_kernel<T><<<grid, block, 0, launch_stream()>>>(
          data_or_null<T>(dweight_partials), data_or_null<T>(dbias_partials), static_cast<const T*>(dy.data),
          static_cast<const T*>(x.data), static_cast<const Acc*>(mean.data), static_cast<const Acc*>(rstd.data), M, N,
          R);
      BYTEGRAD_CUDA_CHECK_LAUNCH("layer_norm_gamma_beta_kernel");
    }
  });
}

}  // namespace bytegrad::cuda
