// Softmax and log-softmax along one dimension, forward and backward. Each row (all elements along `dim`
// for one position of the other dimensions) is handled by one warp when the dimension is short (<= 1024)
// and by one block otherwise; the row's max and sum are combined with warp shuffles (and shared memory
// across warps). Arithmetic in float for the 16-bit floats and float32, double for float64.
//
// Two faster paths for contiguous rows (the dimension innermost, rows back to back): rows are read once into
// a warp's registers (each lane holding elements lane, lane + 32, ...; the general kernel's sums in the same
// order), so a row costs one read and one write, up to 512 elements in the forward and 1024 in the
// backward; forward rows of 513 to 1024 are held by a 128-thread block a row, read with 16-byte loads; rows
// longer than 1024 are read once into the block's shared memory when they fit (the vocabulary-sized
// log_softmax of a language model's loss), 1024 threads a row.
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/cuda/cuda_rows.cuh"
#include "bytegrad/kernels/operand_checks.h"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

namespace {

// rows: StridedIndexer over the shape with `dim` set to 1, giving each tensor's offset of a row's start.
template <typename T, int N>
struct RowLayout {
  int64_t num_rows;
  int64_t dim_size;
  int64_t dim_stride[N];
  StridedIndexer<N> rows;
};

// layout operands: 0 = out, 1 = in. In: the input's element type, T's or a 16-bit float read into a float32
// softmax (each element converted exactly, so the results are those of the float32 input it converts to).
template <typename T, int kThreadsPerRow, typename In = T>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_forward_kernel(T* out, const In* in, RowLayout<T, 2> layout, bool log) {
  using Acc = opmath_t<T>;
  int64_t row, row_step;
  int lane;
  row_assignment<kThreadsPerRow>(row, row_step, lane);
  for (; row < layout.num_rows; row += row_step) {  // uniform across the threads of a row
    int64_t base[2];
    layout.rows.offsets(row, base);
    const In* x = in + base[1];
    T* y = out + base[0];
    const int64_t sx = layout.dim_stride[1], sy = layout.dim_stride[0];

    Acc max_value = -INFINITY;
    for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow)
      max_value = MaxOp{}(max_value, convert<Acc>(x[j * sx]));
    max_value = row_allreduce<kThreadsPerRow>(max_value, MaxOp{});

    Acc sum = 0;
    for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow)
      sum += pointwise::m_exp(convert<Acc>(x[j * sx]) - max_value);
    sum = row_allreduce<kThreadsPerRow>(sum, SumOp{});

    if (log) {
      const Acc log_sum = pointwise::m_log(sum);
      for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow)
        y[j * sy] = convert<T>(convert<Acc>(x[j * sx]) - max_value - log_sum);
    } else {
      for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow)
        y[j * sy] = convert<T>(pointwise::m_exp(convert<Acc>(x[j * sx]) - max_value) / sum);
    }
  }
}

// layout operands: 0 = grad_in, 1 = grad_out, 2 = output. Gi: grad_in's element type (T's, or float16 from
// float32 operands: log_softmax's half_to_float gradient); Go: grad_out's (T's, or a 16-bit float read as its
// float32 value: a deferred cast, tensor/gradient_reader.h).
template <typename T, int kThreadsPerRow, typename Gi = T, typename Go = T>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_backward_kernel(Gi* grad_in, const Go* grad_out, const T* output, RowLayout<T, 3> layout, bool log) {
  using Acc = opmath_t<T>;
  int64_t row, row_step;
  int lane;
  row_assignment<kThreadsPerRow>(row, row_step, lane);
  for (; row < layout.num_rows; row += row_step) {
    int64_t base[3];
    layout.rows.offsets(row, base);
    Gi* gi = grad_in + base[0];
    const Go* go = grad_out + base[1];
    const T* y = output + base[2];
    const int64_t s_gi = layout.dim_stride[0], s_go = layout.dim_stride[1], s_y = layout.dim_stride[2];

    // softmax: grad_in = y * (grad_out - sum(grad_out * y)); log_softmax: grad_out - exp(y) * sum(grad_out)
    Acc sum = 0;
    for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow) {
      const Acc g = convert<Acc>(go[j * s_go]);
      sum += log ? g : g * convert<Acc>(y[j * s_y]);
    }
    sum = row_allreduce<kThreadsPerRow>(sum, SumOp{});

    for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow) {
      const Acc g = convert<Acc>(go[j * s_go]);
      const Acc out_value = convert<Acc>(y[j * s_y]);
      gi[j * s_gi] = convert<Gi>(log ? g - pointwise::m_exp(out_value) * sum : out_value * (g - sum));
    }
  }
}

// float32, float16 or bfloat16 (softmax_backward_dtypes has checked), as its element type's tag.
template <typename F>
void dispatch_float_or_half(ScalarType dtype, F&& f) {
  if (dtype == ScalarType::float16) f(TypeTag<__half>{});
  else if (dtype == ScalarType::bfloat16) f(TypeTag<__nv_bfloat16>{});
  else f(TypeTag<float>{});
}

template <typename T, int N>
RowLayout<T, N> make_row_layout(const std::array<const StridedView*, N>& tensors, int64_t dim, const char* op) {
  const StridedView& first = *tensors[0];
  const int64_t ndim = static_cast<int64_t>(first.sizes.size());
  for (const StridedView* t : tensors) require_same_sizes(first, *t, op);
  RowLayout<T, N> layout{};
  if (ndim == 0) {  // a 0-d tensor is one row of one element
    layout.num_rows = 1;
    layout.dim_size = 1;
    std::array<std::vector<int64_t>, N> no_strides;
    layout.rows = make_indexer<N>({}, no_strides);
    return layout;
  }
  if (dim < 0 || dim >= ndim)
    throw std::invalid_argument(std::string("cuda backend: ") + op + ": dimension out of range");
  layout.dim_size = first.sizes[dim];
  std::vector<int64_t> row_sizes = first.sizes;
  row_sizes[dim] = 1;
  std::array<std::vector<int64_t>, N> strides;
  for (int k = 0; k < N; ++k) {
    strides[k] = tensors[k]->strides;
    layout.dim_stride[k] = tensors[k]->strides[dim];
  }
  layout.num_rows = 1;
  for (int64_t s : row_sizes) layout.num_rows *= s;
  layout.rows = make_indexer<N>(row_sizes, strides);
  return layout;
}

// ------------------------------------------------------------------- contiguous rows: the fast paths

bool rows_are_contiguous(const StridedView& v, int64_t dim) {
  return v.is_contiguous() && !v.sizes.empty() && dim == static_cast<int64_t>(v.sizes.size()) - 1;
}

// One warp per row, kPerLane elements per lane in registers (element lane + 32 * i): one read, one write.
// softmax keeps exp(x - max) in place of x (one array of registers, the quotient's numerator the general
// kernel recomputes); log_softmax keeps x.
// 128-thread blocks (4 rows), as PyTorch's softmax_warp_forward: with a row of registers per lane, small
// blocks keep more warps resident per SM.
constexpr int kForwardWarpThreads = 128;

template <typename T, int kPerLane, bool kLog, typename In = T>
__global__ void __launch_bounds__(kForwardWarpThreads)
    softmax_forward_warp_kernel(T* out, const In* in, int64_t num_rows, int dim) {
  using Acc = opmath_t<T>;
  int64_t row, row_step;
  int lane;
  row_assignment<kWarp, kForwardWarpThreads>(row, row_step, lane);
  for (; row < num_rows; row += row_step) {
    const In* x = in + row * dim;
    T* y = out + row * dim;
    Acc v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      v[i] = j < dim ? convert<Acc>(x[j]) : Acc(-INFINITY);
    }
    Acc max_value = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + i * kWarp < dim) max_value = MaxOp{}(max_value, v[i]);
    max_value = row_allreduce<kWarp>(max_value, MaxOp{});
    Acc sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + i * kWarp < dim) {
        const Acc e = pointwise::m_exp(v[i] - max_value);
        if constexpr (!kLog) v[i] = e;
        sum += e;
      }
    }
    sum = row_allreduce<kWarp>(sum, SumOp{});
    if constexpr (kLog) {
      const Acc log_sum = pointwise::m_log(sum);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int j = lane + i * kWarp;
        if (j < dim) y[j] = convert<T>(v[i] - max_value - log_sum);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int j = lane + i * kWarp;
        if (j < dim) y[j] = convert<T>(v[i] / sum);
      }
    }
  }
}

// What the warp backward kernel stores for each element of a row: its value in Gi (PlainStore), or a
// deferred chain's last step (ChainStore, tensor/gradient_reader.h): the value in Gi, then masked_fill's
// select where there is a mask, then with kMultiply binary_scalar's mul or div by a number (both a product
// in float, the div's by the reciprocal the host computed as binary_with_scalar does): the bits of those
// kernels run one after another. A row's mask bytes are fetched with its operands (one bit a register
// slot), so the row waits on memory once.
template <typename Gi>
struct PlainStore {
  struct Row {
    __device__ void fetch(int, int) {}
    template <typename Acc>
    __device__ Gi operator()(int, Acc v) const {
      return convert<Gi>(v);
    }
  };
  __device__ Row at_row(int64_t) const { return {}; }
};

// A masked_fill's mask (broadcast to the rows' sizes) as the fused kernels read it: where each row's bytes
// start, and their stride along the row. No mask: every row's start is null.
struct MaskRows {
  const uint8_t* mask = nullptr;
  int64_t dim_stride = 0;
  StridedIndexer<1> rows{};  // each row's first mask element
  // Rows over at most two dimensions once merged (attention's mask broadcast over batch and heads: [batch x
  // heads, query]), fewer than 2^31: a row's offset from one 32-bit division. The general walk over the
  // indexer's dimensions was most of the integer work of the softmax kernels that read a mask, which every
  // thread of a row does.
  bool compact = false;
  FastDivider inner{};  // the inner dimension's rows (1 where there is one dimension or none)
  int64_t inner_stride = 0, outer_stride = 0;
  __device__ const uint8_t* row(int64_t r) const {
    if (mask == nullptr) return nullptr;
    if (compact) {
      const auto index = static_cast<uint32_t>(r);
      const uint32_t outer = inner.div(index);
      return mask + static_cast<int64_t>(index - outer * inner.divisor) * inner_stride +
             static_cast<int64_t>(outer) * outer_stride;
    }
    int64_t offset[1];
    rows.offsets(r, offset);
    return mask + offset[0];
  }
};

// The rows of `mask` over rows of `sizes` along dim (mask may be null).
MaskRows mask_rows_of(const StridedView* mask, const std::vector<int64_t>& sizes, int64_t dim) {
  if (mask == nullptr) return {};
  std::vector<int64_t> row_sizes = sizes;
  row_sizes[dim] = 1;
  MaskRows out{static_cast<const uint8_t*>(mask->data), mask->strides[dim],
               make_indexer<1>(row_sizes, {mask->strides})};
  const StridedIndexer<1>& rows = out.rows;
  if (rows.narrow && rows.ndim <= 2) {
    out.compact = true;
    if (rows.ndim == 2) {
      out.inner = rows.dividers[1];
      out.inner_stride = rows.strides[0][1];
    } else {
      out.inner = FastDivider(1);
    }
    if (rows.ndim >= 1) out.outer_stride = rows.strides[0][0];
  }
  return out;
}

template <typename Gi, bool kMultiply>
struct ChainStore {
  MaskRows mask;
  Gi value;
  float factor;
  struct Row {
    const uint8_t* mask;
    int64_t mask_dim_stride;
    Gi value;
    float factor;
    uint32_t masked = 0;  // bit i: the lane's element i is masked (at most 32 a lane)
    __device__ void fetch(int i, int j) {
      if (mask != nullptr && mask[j * mask_dim_stride]) masked |= 1u << i;
    }
    template <typename Acc>
    __device__ Gi operator()(int i, Acc v) const {
      Gi x = convert<Gi>(v);
      if ((masked >> i) & 1u) x = value;
      if constexpr (kMultiply) x = convert<Gi>(convert<float>(x) * factor);
      return x;
    }
  };
  __device__ Row at_row(int64_t row) const { return {mask.row(row), mask.dim_stride, value, factor}; }
};

template <typename T, int kPerLane, typename Gi = T, typename Store = PlainStore<Gi>, typename Go = T>
__global__ void __launch_bounds__(kBlockThreads)
    softmax_backward_warp_kernel(Gi* grad_in, const Go* grad_out, const T* output, int64_t num_rows, int dim, bool log,
                                 Store store = {}) {
  using Acc = opmath_t<T>;
  int64_t row, row_step;
  int lane;
  row_assignment<kWarp>(row, row_step, lane);
  for (; row < num_rows; row += row_step) {
    const Go* go = grad_out + row * dim;
    const T* y = output + row * dim;
    Gi* gi = grad_in + row * dim;
    auto stored = store.at_row(row);
    Acc g[kPerLane], o[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      g[i] = j < dim ? convert<Acc>(go[j]) : Acc(0);
      o[i] = j < dim ? convert<Acc>(y[j]) : Acc(0);
      if (j < dim) stored.fetch(i, j);
    }
    Acc sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + i * kWarp < dim) sum += log ? g[i] : g[i] * o[i];
    sum = row_allreduce<kWarp>(sum, SumOp{});
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + i * kWarp;
      if (j < dim) gi[j] = stored(i, log ? g[i] - pointwise::m_exp(o[i]) * sum : o[i] * (g[i] - sum));
    }
  }
}

// Rows of 513 to 1024 contiguous elements (attention's scores at sequence length 1024): one 128-thread block
// a row, each thread holding kVectors runs of V consecutive elements in registers (thread t: elements
// V * t + 128 * V * k, V = 16 bytes of the output's type, so a 16-bit input is read as its float32 copy would
// be, and gives its bits), read once and written once with wide accesses. The row's max and sum combine each
// thread's values in order, then across the block. The general kernel's warp a row read the row three times.
constexpr int kRowBlockThreads = 128;

template <typename T>
inline constexpr int kRowBlockVector = static_cast<int>(16 / sizeof(T));

// How the block-a-row forward reads a run of V elements of a row: as they are (PlainLoad), or as a pending
// chain would have written them (ScaledLoad, tensor/pending_scores.h): x * factor in In's opmath rounded to
// In (binary_with_scalar's mul, and its div as a product by the reciprocal the host computed the same way),
// then masked_fill's select (the run's mask bytes as one load where they are contiguous); the bits of the
// launches it replaces.
struct PlainLoad {
  struct Row {
    template <typename In, int V>
    __device__ void operator()(int /*first*/, const Vec<In, V>& chunk, opmath_t<In> (&out)[V]) const {
#pragma unroll
      for (int e = 0; e < V; ++e) out[e] = convert<opmath_t<In>>(chunk.v[e]);
    }
  };
  __device__ Row at_row(int64_t) const { return {}; }
};

template <typename In, int V>
struct ScaledLoad {
  using M = opmath_t<In>;
  M factor;
  MaskRows mask;
  bool mask_runs;  // a run's V mask bytes are contiguous and aligned: one load
  In value;
  struct Row {
    M factor;
    const uint8_t* mask;
    int64_t mask_dim_stride;
    bool mask_runs;
    In value;
    __device__ void operator()(int first, const Vec<In, V>& chunk, M (&out)[V]) const {
      bool masked[V] = {};
      if (mask != nullptr) {
        if (mask_runs) {
          const Vec<uint8_t, V> bytes = *reinterpret_cast<const Vec<uint8_t, V>*>(mask + first);
#pragma unroll
          for (int e = 0; e < V; ++e) masked[e] = bytes.v[e] != 0;
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) masked[e] = mask[(first + e) * mask_dim_stride] != 0;
        }
      }
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const In scaled = masked[e] ? value : convert<In>(convert<M>(chunk.v[e]) * factor);
        out[e] = convert<M>(scaled);
      }
    }
  };
  __device__ Row at_row(int64_t row) const { return {factor, mask.row(row), mask.dim_stride, mask_runs, value}; }
};

// Copy (not void): each output element also written to `copy` (Copy*, laid out as out) converted to Copy, as a
// cast run after would write it.
template <typename T, typename In, int kVectors, bool kLog, typename Load = PlainLoad, typename Copy = void>
__global__ void __launch_bounds__(kRowBlockThreads)
    softmax_forward_block_kernel(T* out, const In* in, int64_t num_rows, int dim, Load load = {},
                                 void* copy = nullptr) {
  using Acc = opmath_t<T>;
  constexpr int V = kRowBlockVector<T>;
  for (int64_t row = blockIdx.x; row < num_rows; row += gridDim.x) {
    const In* x = in + row * dim;
    T* y = out + row * dim;
    const auto loaded = load.at_row(row);
    Acc v[kVectors][V];
    Acc max_value = -INFINITY;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int first = (k * kRowBlockThreads + static_cast<int>(threadIdx.x)) * V;
      if (first < dim) {
        const Vec<In, V> chunk = *reinterpret_cast<const Vec<In, V>*>(x + first);
        opmath_t<In> values[V];
        loaded(first, chunk, values);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          v[k][e] = static_cast<Acc>(values[e]);
          max_value = MaxOp{}(max_value, v[k][e]);
        }
      }
    }
    max_value = row_allreduce<kRowBlockThreads>(max_value, MaxOp{});
    Acc sum = 0;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      if ((k * kRowBlockThreads + static_cast<int>(threadIdx.x)) * V < dim) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const Acc exp_value = pointwise::m_exp(v[k][e] - max_value);
          if constexpr (!kLog) v[k][e] = exp_value;
          sum += exp_value;
        }
      }
    }
    sum = row_allreduce<kRowBlockThreads>(sum, SumOp{});
    const Acc log_sum = kLog ? pointwise::m_log(sum) : Acc(0);
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      const int first = (k * kRowBlockThreads + static_cast<int>(threadIdx.x)) * V;
      if (first < dim) {
        Vec<T, V> chunk;
#pragma unroll
        for (int e = 0; e < V; ++e) chunk.v[e] = convert<T>(kLog ? v[k][e] - max_value - log_sum : v[k][e] / sum);
        *reinterpret_cast<Vec<T, V>*>(y + first) = chunk;
        if constexpr (!std::is_void_v<Copy>) {
          Vec<Copy, V> copied;
#pragma unroll
          for (int e = 0; e < V; ++e) copied.v[e] = convert<Copy>(chunk.v[e]);
          *reinterpret_cast<Vec<Copy, V>*>(static_cast<Copy*>(copy) + row * dim + first) = copied;
        }
      }
    }
  }
}

constexpr int kLongRowThreads = 1024;

// One 1024-thread block per row, the row's operands read once into dynamic shared memory (as T).
template <typename T, typename In = T>
__global__ void __launch_bounds__(kLongRowThreads)
    softmax_forward_smem_kernel(T* out, const In* in, int64_t num_rows, int64_t dim, bool log) {
  using Acc = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* cache = reinterpret_cast<T*>(smem_bytes);
  for (int64_t row = blockIdx.x; row < num_rows; row += gridDim.x) {
    const In* x = in + row * dim;
    T* y = out + row * dim;
    Acc max_value = -INFINITY;
    for (int64_t j = threadIdx.x; j < dim; j += kLongRowThreads) {
      const T value = convert<T>(x[j]);
      cache[j] = value;
      max_value = MaxOp{}(max_value, convert<Acc>(value));
    }
    max_value = row_allreduce<kLongRowThreads>(max_value, MaxOp{});
    Acc sum = 0;
    for (int64_t j = threadIdx.x; j < dim; j += kLongRowThreads)
      sum += pointwise::m_exp(convert<Acc>(cache[j]) - max_value);
    sum = row_allreduce<kLongRowThreads>(sum, SumOp{});
    if (log) {
      const Acc log_sum = pointwise::m_log(sum);
      for (int64_t j = threadIdx.x; j < dim; j += kLongRowThreads)
        y[j] = convert<T>(convert<Acc>(cache[j]) - max_value - log_sum);
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += kLongRowThreads)
        y[j] = convert<T>(pointwise::m_exp(convert<Acc>(cache[j]) - max_value) / sum);
    }
    __syncthreads();  // the next row overwrites the cache
  }
}

// grad_out cached (and the output too for softmax, which reads it twice).
template <typename T, typename Gi = T, typename Go = T>
__global__ void __launch_bounds__(kLongRowThreads)
    softmax_backward_smem_kernel(Gi* grad_in, const Go* grad_out, const T* output, int64_t num_rows, int64_t dim,
                                 bool log) {
  using Acc = opmath_t<T>;
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* g_cache = reinterpret_cast<T*>(smem_bytes);  // grad_out's values as T (exact from a 16-bit Go)
  T* y_cache = g_cache + dim;                     // used by softmax only
  for (int64_t row = blockIdx.x; row < num_rows; row += gridDim.x) {
    const Go* go = grad_out + row * dim;
    const T* y = output + row * dim;
    Gi* gi = grad_in + row * dim;
    Acc sum = 0;
    for (int64_t j = threadIdx.x; j < dim; j += kLongRowThreads) {
      const T g = convert<T>(go[j]);
      g_cache[j] = g;
      if (log) {
        sum += convert<Acc>(g);
      } else {
        const T out_value = y[j];
        y_cache[j] = out_value;
        sum += convert<Acc>(g) * convert<Acc>(out_value);
      }
    }
    sum = row_allreduce<kLongRowThreads>(sum, SumOp{});
    for (int64_t j = threadIdx.x; j < dim; j += kLongRowThreads) {
      const Acc g = convert<Acc>(g_cache[j]);
      const Acc out_value = convert<Acc>(log ? y[j] : y_cache[j]);
      gi[j] = convert<Gi>(log ? g - pointwise::m_exp(out_value) * sum : out_value * (g - sum));
    }
    __syncthreads();
  }
}

// The most dynamic shared memory a block of this device may use (opt-in), read once per device.
size_t max_shared_bytes() {
  static thread_local int cached_device = -1;
  static thread_local size_t cached = 0;
  int device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    int bytes = 0;
    BYTEGRAD_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cached = static_cast<size_t>(bytes);
    cached_device = device;
  }
  return cached;
}

// Lets `kernel` use `bytes` of dynamic shared memory (above the default 48 KiB it must be asked for, once
// per kernel and device for the largest size yet).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, size_t> allowed;
  int device = 0;
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  size_t& current = allowed[{device, reinterpret_cast<const void*>(kernel)}];
  if (bytes <= current) return;
  BYTEGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  current = bytes;
}

unsigned long_row_blocks(int64_t num_rows) {
  return static_cast<unsigned>(std::min<int64_t>(num_rows, int64_t{1} << 20));
}

// The fast forward for contiguous rows, when one applies; false leaves the call to the general kernel.
template <typename T, typename In = T>
bool softmax_forward_fast(const StridedView& out, const StridedView& in, int64_t dim, bool log) {
  if (!rows_are_contiguous(in, dim) || !rows_are_contiguous(out, dim)) return false;
  const int64_t dim_size = in.sizes[dim];
  const int64_t num_rows = dim_size > 0 ? in.numel() / dim_size : 0;
  if (num_rows == 0 || dim_size == 0) return true;
  // A warp's registers a row only up to 512 (16 a lane): at 1024 (32 a lane) the registers cost more in
  // resident warps than the single read saves (measured on the H100 at GPT-2's 1024-long attention rows:
  // 0.58 ms a call against 0.38 ms for the general kernel); those take a block a row below.
  if (dim_size <= 512) {
    dispatch_per_lane<1>(dim_size, [&](auto per_lane) {
      constexpr int kPerLane = decltype(per_lane)::value;
      const unsigned blocks = grid_for(num_rows, kForwardWarpThreads / kWarp);
      if (log)
        softmax_forward_warp_kernel<T, kPerLane, true, In><<<blocks, kForwardWarpThreads, 0, launch_stream()>>>(
            static_cast<T*>(out.data), static_cast<const In*>(in.data), num_rows, static_cast<int>(dim_size));
      else
        softmax_forward_warp_kernel<T, kPerLane, false, In><<<blocks, kForwardWarpThreads, 0, launch_stream()>>>(
            static_cast<T*>(out.data), static_cast<const In*>(in.data), num_rows, static_cast<int>(dim_size));
      BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_forward_warp_kernel");
    });
    return true;
  }
  if (dim_size <= 1024) {
    // A block a row from registers where the rows split into whole 16-byte runs; else the general kernel.
    constexpr int V = kRowBlockVector<T>;
    constexpr int kVectors = (1024 + kRowBlockThreads * V - 1) / (kRowBlockThreads * V);
    const auto aligned = [](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
    if (dim_size % V != 0 || !aligned(in.data, sizeof(In) * V) || !aligned(out.data, sizeof(T) * V)) return false;
    const unsigned blocks = long_row_blocks(num_rows);
    if (log)
      softmax_forward_block_kernel<T, In, kVectors, true><<<blocks, kRowBlockThreads, 0, launch_stream()>>>(
          static_cast<T*>(out.data), static_cast<const In*>(in.data), num_rows, static_cast<int>(dim_size));
    else
      softmax_forward_block_kernel<T, In, kVectors, false><<<blocks, kRowBlockThreads, 0, launch_stream()>>>(
          static_cast<T*>(out.data), static_cast<const In*>(in.data), num_rows, static_cast<int>(dim_size));
    BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_forward_block_kernel");
    return true;
  }
  const size_t bytes = static_cast<size_t>(dim_size) * sizeof(T);  // the row as T: In does not move the choice
  if (bytes + 1024 > max_shared_bytes()) return false;             // + the reductions' static shared memory
  allow_shared_bytes(softmax_forward_smem_kernel<T, In>, bytes);
  softmax_forward_smem_kernel<T, In><<<long_row_blocks(num_rows), kLongRowThreads, bytes, launch_stream()>>>(
      static_cast<T*>(out.data), static_cast<const In*>(in.data), num_rows, dim_size, log);
  BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_forward_smem_kernel");
  return true;
}

template <typename T, typename Gi = T, typename Go = T>
bool softmax_backward_fast(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output,
                           int64_t dim, bool log) {
  if (!rows_are_contiguous(grad_in, dim) || !rows_are_contiguous(grad_out, dim) || !rows_are_contiguous(output, dim))
    return false;
  if (grad_out.sizes != grad_in.sizes || output.sizes != grad_in.sizes) return false;
  const int64_t dim_size = grad_in.sizes[dim];
  const int64_t num_rows = dim_size > 0 ? grad_in.numel() / dim_size : 0;
  if (num_rows == 0 || dim_size == 0) return true;
  if (dim_size <= 1024) {
    dispatch_per_lane<1>(dim_size, [&](auto per_lane) {
      softmax_backward_warp_kernel<T, decltype(per_lane)::value, Gi, PlainStore<Gi>, Go>
          <<<grid_for(num_rows, kBlockThreads / kWarp), kBlockThreads, 0, launch_stream()>>>(
              static_cast<Gi*>(grad_in.data), static_cast<const Go*>(grad_out.data), static_cast<const T*>(output.data),
              num_rows, static_cast<int>(dim_size), log);
      BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_backward_warp_kernel");
    });
    return true;
  }
  const size_t bytes = static_cast<size_t>(dim_size) * sizeof(T) * (log ? 1 : 2);
  if (bytes + 1024 > max_shared_bytes()) return false;  // + the reductions' static shared memory
  allow_shared_bytes(softmax_backward_smem_kernel<T, Gi, Go>, bytes);
  softmax_backward_smem_kernel<T, Gi, Go><<<long_row_blocks(num_rows), kLongRowThreads, bytes, launch_stream()>>>(
      static_cast<Gi*>(grad_in.data), static_cast<const Go*>(grad_out.data), static_cast<const T*>(output.data),
      num_rows, dim_size, log);
  BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_backward_smem_kernel");
  return true;
}

}  // namespace

namespace {

// T: the output's element type; In: the input's (T's, or a 16-bit float into a float32 output).
template <typename T, typename In>
void softmax_typed(const StridedView& out, const StridedView& in, int64_t dim, bool log) {
  if (out.sizes == in.sizes && softmax_forward_fast<T, In>(out, in, dim, log)) return;
  const auto layout = make_row_layout<T, 2>({&out, &in}, dim, "softmax");
  launch_rows(layout.num_rows, layout.dim_size, [&](auto threads_per_row, unsigned blocks) {
    softmax_forward_kernel<T, decltype(threads_per_row)::value, In><<<blocks, kBlockThreads, 0, launch_stream()>>>(
        static_cast<T*>(out.data), static_cast<const In*>(in.data), layout, log);
    BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
  });
}

}  // namespace

void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) {
  if (softmax_reads_16_bit_input(out, in, "cuda")) {
    if (in.dtype == ScalarType::float16) softmax_typed<float, __half>(out, in, dim, log);
    else softmax_typed<float, __nv_bfloat16>(out, in, dim, log);
    return;
  }
  dispatch_floating(in.dtype, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_typed<T, T>(out, in, dim, log);
  });
}

namespace {

// Gi: grad_in's element type; Go: grad_out's; T: output's.
template <typename T, typename Gi, typename Go = T>
void softmax_backward_typed(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output,
                            int64_t dim, bool log) {
  if (softmax_backward_fast<T, Gi, Go>(grad_in, grad_out, output, dim, log)) return;
  const auto layout = make_row_layout<T, 3>({&grad_in, &grad_out, &output}, dim, "softmax_backward");
  launch_rows(layout.num_rows, layout.dim_size, [&](auto threads_per_row, unsigned blocks) {
    softmax_backward_kernel<T, decltype(threads_per_row)::value, Gi, Go><<<blocks, kBlockThreads, 0, launch_stream()>>>(
        static_cast<Gi*>(grad_in.data), static_cast<const Go*>(grad_out.data), static_cast<const T*>(output.data),
        layout, log);
    BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
  });
}

}  // namespace

void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim,
                      bool log) {
  const SoftmaxBackwardDtypes dtypes = softmax_backward_dtypes(grad_in, grad_out, output, "cuda");
  if (dtypes.half_grad_in || dtypes.half_grad_out) {  // float32 operands with a 16-bit gradient on either side
    dispatch_float_or_half(grad_in.dtype, [&](auto gi_tag) {
      dispatch_float_or_half(grad_out.dtype, [&](auto go_tag) {
        softmax_backward_typed<float, typename decltype(gi_tag)::type, typename decltype(go_tag)::type>(
            grad_in, grad_out, output, dim, log);
      });
    });
    return;
  }
  dispatch_floating(grad_in.dtype, "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_typed<T, T>(grad_in, grad_out, output, dim, log);
  });
}

// ------------------------------------------------------- a deferred gradient's chain from softmax's gradient

bool softmax_backward_chain_fits(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                                 int64_t dim, const ScalarStep* then) {
  const auto float_or_half = [](ScalarType t) {
    return t == ScalarType::float32 || t == ScalarType::bfloat16 || t == ScalarType::float16;
  };
  return float_or_half(grad_out.dtype) && output.dtype == ScalarType::float32 &&
         (out.dtype == ScalarType::float32 || out.dtype == ScalarType::bfloat16 || out.dtype == ScalarType::float16) &&
         (then == nullptr || then->op == BinaryOp::mul || then->op == BinaryOp::div) && rows_are_contiguous(out, dim) &&
         rows_are_contiguous(grad_out, dim) && rows_are_contiguous(output, dim) && grad_out.sizes == out.sizes &&
         output.sizes == out.sizes && out.sizes[dim] <= 1024;
}

namespace {

template <typename Gi, bool kMultiply>
void launch_softmax_backward_chain(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                                   int64_t num_rows, int64_t dim_size, const ChainStore<Gi, kMultiply>& store) {
  dispatch_float_or_half(grad_out.dtype, [&](auto go_tag) {
    using Go = typename decltype(go_tag)::type;
    dispatch_per_lane<1>(dim_size, [&](auto per_lane) {
      softmax_backward_warp_kernel<float, decltype(per_lane)::value, Gi, ChainStore<Gi, kMultiply>, Go>
          <<<grid_for(num_rows, kBlockThreads / kWarp), kBlockThreads, 0, launch_stream()>>>(
              static_cast<Gi*>(out.data), static_cast<const Go*>(grad_out.data), static_cast<const float*>(output.data),
              num_rows, static_cast<int>(dim_size), false, store);
      BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_backward_warp_kernel (chain)");
    });
  });
}

template <typename Gi>
void softmax_backward_chain_typed(const StridedView& out, const StridedView& grad_out, const StridedView& output,
                                  int64_t dim, const StridedView* mask, double value, const ScalarStep* then) {
  const int64_t dim_size = out.sizes[dim];
  const int64_t num_rows = dim_size > 0 ? out.numel() / dim_size : 0;
  if (num_rows == 0 || dim_size == 0) return;
  if (mask != nullptr) {
    require_same_sizes(out, *mask, "softmax_backward_then");
    if (mask->dtype != ScalarType::bool_ && mask->dtype != ScalarType::uint8)
      throw std::invalid_argument("cuda backend: softmax_backward_then: the mask must be bool");
  }
  const MaskRows mask_rows = mask_rows_of(mask, out.sizes, dim);
  if (then == nullptr) {
    launch_softmax_backward_chain<Gi, false>(out, grad_out, output, num_rows, dim_size,
                                             ChainStore<Gi, false>{mask_rows, from_double<Gi>(value), 1.0f});
    return;
  }
  // binary_with_scalar in float: x * scalar, and a division as x * (1 / scalar).
  const float scalar = from_double<float>(then->scalar);
  const float factor = then->op == BinaryOp::div ? 1.0f / scalar : scalar;
  launch_softmax_backward_chain<Gi, true>(out, grad_out, output, num_rows, dim_size,
                                          ChainStore<Gi, true>{mask_rows, from_double<Gi>(value), factor});
}

}  // namespace

// ------------------------------------------------------- softmax of a pending chain's scores (one kernel)

bool softmax_of_scaled_fits(const StridedView& out, const StridedView& source, ScalarStep scale,
                            const StridedView* mask, int64_t dim, const StridedView* copy) {
  const auto half = [](ScalarType t) { return t == ScalarType::float16 || t == ScalarType::bfloat16; };
  const bool dtypes = (source.dtype == ScalarType::float32 || half(source.dtype)) &&
                      (out.dtype == source.dtype || (out.dtype == ScalarType::float32 && half(source.dtype)));
  if (!dtypes || (scale.op != BinaryOp::mul && scale.op != BinaryOp::div) || out.sizes != source.sizes) return false;
  if (mask != nullptr && (mask->sizes != source.sizes || mask->dtype != ScalarType::bool_)) return false;
  if (!rows_are_contiguous(out, dim) || !rows_are_contiguous(source, dim)) return false;
  // The block-a-row kernel's rows (513 to 1024, whole 16-byte runs of the output's type, aligned).
  const int64_t dim_size = out.sizes[dim];
  const int vector = static_cast<int>(16 / element_size(out.dtype));
  const auto aligned = [](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  if (copy != nullptr &&
      (out.dtype != ScalarType::float32 || !half(copy->dtype) || copy->sizes != out.sizes || !copy->is_contiguous() ||
       !out.is_contiguous() || !aligned(copy->data, element_size(copy->dtype) * vector)))
    return false;
  return dim_size > 512 && dim_size <= 1024 && dim_size % vector == 0 &&
         aligned(source.data, element_size(source.dtype) * vector) &&
         aligned(out.data, element_size(out.dtype) * vector);
}

namespace {

template <typename T, typename In, typename Copy = void>
void launch_softmax_of_scaled(const StridedView& out, const StridedView& source, ScalarStep scale,
                              const StridedView* mask, double value, int64_t dim, bool log, void* copy = nullptr) {
  const int64_t dim_size = out.sizes[dim];
  const int64_t num_rows = dim_size > 0 ? out.numel() / dim_size : 0;
  if (num_rows == 0) return;
  constexpr int V = kRowBlockVector<T>;
  using M = opmath_t<In>;
  // binary_with_scalar in M: x * scalar, and a division as x * (1 / scalar).
  const M scalar = from_double<M>(scale.scalar);
  ScaledLoad<In, V> load{scale.op == BinaryOp::div ? M(1) / scalar : scalar, mask_rows_of(mask, out.sizes, dim), false,
                         from_double<In>(value)};
  if (mask != nullptr) {
    // Unit stride along the row, the data and every row's start V-byte aligned: a run's bytes load as one.
    bool runs = mask->strides[dim] == 1 && reinterpret_cast<uintptr_t>(mask->data) % V == 0;
    for (size_t d = 0; d < mask->strides.size(); ++d)
      if (static_cast<int64_t>(d) != dim && mask->strides[d] % V != 0) runs = false;
    load.mask_runs = runs;
  }
  constexpr int kVectors = (1024 + kRowBlockThreads * V - 1) / (kRowBlockThreads * V);
  const unsigned blocks = long_row_blocks(num_rows);
  if (log)
    softmax_forward_block_kernel<T, In, kVectors, true, ScaledLoad<In, V>, Copy>
        <<<blocks, kRowBlockThreads, 0, launch_stream()>>>(static_cast<T*>(out.data),
                                                           static_cast<const In*>(source.data), num_rows,
                                                           static_cast<int>(dim_size), load, copy);
  else
    softmax_forward_block_kernel<T, In, kVectors, false, ScaledLoad<In, V>, Copy>
        <<<blocks, kRowBlockThreads, 0, launch_stream()>>>(static_cast<T*>(out.data),
                                                           static_cast<const In*>(source.data), num_rows,
                                                           static_cast<int>(dim_size), load, copy);
  BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_forward_block_kernel (pending scores)");
}

}  // namespace

void softmax_of_scaled(const StridedView& out, const StridedView& source, ScalarStep scale, const StridedView* mask,
                       double value, int64_t dim, bool log, const StridedView* copy) {
  if (!softmax_of_scaled_fits(out, source, scale, mask, dim, copy))
    throw std::invalid_argument("cuda backend: softmax_of_scaled: operands the one-pass kernel does not take");
  dispatch_float_or_half(source.dtype, [&](auto in_tag) {
    using In = typename decltype(in_tag)::type;
    if (copy != nullptr && copy->dtype == ScalarType::bfloat16)
      launch_softmax_of_scaled<float, In, __nv_bfloat16>(out, source, scale, mask, value, dim, log, copy->data);
    else if (copy != nullptr)
      launch_softmax_of_scaled<float, In, __half>(out, source, scale, mask, value, dim, log, copy->data);
    else if (out.dtype == ScalarType::float32)
      launch_softmax_of_scaled<float, In>(out, source, scale, mask, value, dim, log);
    else launch_softmax_of_scaled<In, In>(out, source, scale, mask, value, dim, log);
  });
}

void softmax_backward_then(const StridedView& out, const StridedView& grad_out, const StridedView& output, int64_t dim,
                           const StridedView* mask, double value, const ScalarStep* then) {
  if (!softmax_backward_chain_fits(out, grad_out, output, dim, then))
    throw std::invalid_argument("cuda backend: softmax_backward_then: operands the one-pass kernel does not take");
  if (out.dtype == ScalarType::bfloat16)
    softmax_backward_chain_typed<__nv_bfloat16>(out, grad_out, output, dim, mask, value, then);
  else if (out.dtype == ScalarType::float16)
    softmax_backward_chain_typed<__half>(out, grad_out, output, dim, mask, value, then);
  else softmax_backward_chain_typed<float>(out, grad_out, output, dim, mask, value, then);
}

}  // namespace bytegrad::cuda
