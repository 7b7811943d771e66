// Reductions over flagged dimensions (sum, mean, prod, max, min, argmax, argmin, the 2-norm; var/std by
// Welford's method in reduce_variance) and max/min along one
// dimension with indices. Each output element is reduced either by a whole block (when the reduced
// elements are adjacent in memory, so a warp reads them coalesced) or by one thread (when adjacent outputs
// are adjacent in memory instead, or there is little to reduce).
//
// Accumulation: float for float32/float16/bfloat16, double for float64, int64 for the integer types and
// bool (as PyTorch's CUDA reductions). Max/min propagate NaN; among equal values (and among NaNs) the
// first index wins, as PyTorch documents for argmax/argmin and max(dim).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

namespace {

template <typename T>
using reduce_acc_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, int64_t>;

enum class Combine { sum, prod, max, min };

template <typename Acc>
struct ReduceState {
  Acc value;
  int64_t index;  // position along the flattened reduced dimensions; -1: nothing seen yet (max/min)
};

template <typename Acc>
__device__ __forceinline__ ReduceState<Acc> identity(Combine kind) {
  switch (kind) {
    case Combine::sum: return {Acc(0), 0};
    case Combine::prod: return {Acc(1), 0};
    default: return {Acc(0), -1};
  }
}

// Whether x beats y for max (greater) or min (!greater): NaN beats everything, ties go to the lower index.
template <typename Acc>
__device__ __forceinline__ bool wins(ReduceState<Acc> x, ReduceState<Acc> y, bool greater) {
  if (pointwise::is_nan(x.value)) return !pointwise::is_nan(y.value) || x.index < y.index;
  if (pointwise::is_nan(y.value)) return false;
  if (x.value != y.value) return greater ? x.value > y.value : x.value < y.value;
  return x.index < y.index;
}

template <typename Acc>
__device__ __forceinline__ ReduceState<Acc> combine(Combine kind, ReduceState<Acc> x, ReduceState<Acc> y) {
  switch (kind) {
    case Combine::sum: return {x.value + y.value, 0};
    case Combine::prod: return {x.value * y.value, 0};
    default:
      if (y.index < 0) return x;
      if (x.index < 0) return y;
      return wins(x, y, kind == Combine::max) ? x : y;
  }
}

template <typename T>
struct ReduceArgs {
  using Acc = reduce_acc_t<T>;
  const T* in;
  void* values;  // reduced values (any dtype), or nullptr
  ScalarType values_dtype;
  int64_t* indices;  // int64 positions, or nullptr
  int64_t num_outputs;
  int64_t reduce_size;
  Combine kind;
  bool mean;
  bool norm;                // sum of squares, square root written (the 2-norm)
  bool abs;                 // |x| reduced (the 1-norm's sum, the inf-norm's max)
  Acc mean_factor;          // num_outputs / numel in Acc, as PyTorch's MeanOps
  StridedIndexer<3> outer;  // over the output shape: offsets into in, values, indices
  StridedIndexer<1> inner;  // over the reduced dimensions: offset into in

  __device__ __forceinline__ ReduceState<Acc> element(int64_t in_base, int64_t r) const {
    int64_t off[1];
    inner.offsets(r, off);
    const Acc v = convert<Acc>(in[in_base + off[0]]);
    if constexpr (std::is_floating_point_v<Acc>) {
      if (norm) return {v * v, r};
      if (abs) return {v < Acc(0) ? -v : v, r};
    }
    return {v, r};
  }
  __device__ __forceinline__ void write(const int64_t (&o)[3], ReduceState<Acc> s) const {
    Acc v = mean ? s.value * mean_factor : s.value;
    if constexpr (std::is_floating_point_v<Acc>) {
      if (norm) v = sqrt(v);
    }
    if (values) store_as(values, values_dtype, o[1], v);
    if (indices) indices[o[2]] = s.index;
  }
};

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) reduce_block_per_output(ReduceArgs<T> args) {
  using Acc = reduce_acc_t<T>;
  __shared__ ReduceState<Acc> partial[kBlockThreads];
  for (int64_t out_i = blockIdx.x; out_i < args.num_outputs; out_i += gridDim.x) {
    int64_t o[3];
    args.outer.offsets(out_i, o);
    ReduceState<Acc> s = identity<Acc>(args.kind);
    for (int64_t r = threadIdx.x; r < args.reduce_size; r += blockDim.x)
      s = combine(args.kind, s, args.element(o[0], r));
    partial[threadIdx.x] = s;
    __syncthreads();
    for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width)
        partial[threadIdx.x] = combine(args.kind, partial[threadIdx.x], partial[threadIdx.x + width]);
      __syncthreads();
    }
    if (threadIdx.x == 0) args.write(o, partial[0]);
    __syncthreads();  // partial[] is reused by the next output
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) reduce_thread_per_output(ReduceArgs<T> args) {
  using Acc = reduce_acc_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t out_i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; out_i < args.num_outputs;
       out_i += step) {
    int64_t o[3];
    args.outer.offsets(out_i, o);
    ReduceState<Acc> s = identity<Acc>(args.kind);
    for (int64_t r = 0; r < args.reduce_size; ++r) s = combine(args.kind, s, args.element(o[0], r));
    args.write(o, s);
  }
}

Combine combine_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
    case ReduceOp::norm:
    case ReduceOp::norm_one: return Combine::sum;
    case ReduceOp::norm_inf: return Combine::max;
    case ReduceOp::prod: return Combine::prod;
    case ReduceOp::max:
    case ReduceOp::argmax: return Combine::max;
    case ReduceOp::min:
    case ReduceOp::argmin: return Combine::min;
    case ReduceOp::var:
    case ReduceOp::std: break;
  }
  throw std::invalid_argument("cuda backend: unknown reduction");
}

// Sums (and means) over leading dimensions of a contiguous input into contiguous outputs, the shape of a
// bias gradient (grad.sum(0) over (rows, columns)): a block of 8 threads x 128 lanes per 8 kPerThread
// adjacent outputs, each thread reading kPerThread adjacent columns as one vector (2 for 16-bit types, so
// a row's 8 threads read 32 bytes, a whole sector, as float32's 8 threads do with one each), each lane
// summing every 128th row (four loads in flight), then the 128 lanes' sums added in lane order. Each column
// is summed in the same order whatever kPerThread is. Deterministic: no atomics.
constexpr int kColumnThreads = 8;
constexpr int kColumnLanes = 128;

template <typename T, int kPerThread>
__global__ void __launch_bounds__(kColumnThreads* kColumnLanes)
    reduce_columns_kernel(const T* in, void* values, ScalarType values_dtype, int64_t rows, int64_t columns, bool mean,
                          reduce_acc_t<T> mean_factor) {
  using Acc = reduce_acc_t<T>;
  using Row = Vec<T, kPerThread>;
  constexpr int kTile = kColumnThreads * kPerThread;
  __shared__ Acc partial[kColumnLanes][kTile + 1];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x * kPerThread;
  Acc acc[kPerThread] = {};
  // Launched with kPerThread > 1 only when columns is a multiple of it: a thread's columns are all in or all out.
  if (first < columns) {
    const T* p = in + first;
    int64_t r = threadIdx.y;
    constexpr int64_t step = kColumnLanes;
    auto add = [&](const Row& v) {
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) acc[k] += convert<Acc>(v.v[k]);
    };
    auto load = [&](int64_t row) { return *reinterpret_cast<const Row*>(p + row * columns); };
    for (; r + 3 * step < rows; r += 4 * step) {
      const Row a0 = load(r), a1 = load(r + step), a2 = load(r + 2 * step), a3 = load(r + 3 * step);
      add(a0);
      add(a1);
      add(a2);
      add(a3);
    }
    for (; r < rows; r += step) add(load(r));
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) partial[threadIdx.y][threadIdx.x * kPerThread + k] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && first < columns) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int c = threadIdx.x * kPerThread + k;
      Acc total = partial[0][c];
#pragma unroll
      for (int lane = 1; lane < kColumnLanes; ++lane) total += partial[lane][c];
      store_as(values, values_dtype, first + k, mean ? total * mean_factor : total);
    }
  }
}

// The column path applies to sum/mean of a contiguous input over a leading run of dimensions, written to
// a contiguous output; `rows` and `columns` are the reduced and kept element counts.
bool column_reduction(ReduceOp op, const StridedView& in, const std::vector<bool>& reduced, const StridedView* values,
                      const StridedView* indices, int64_t& rows, int64_t& columns) {
  if ((op != ReduceOp::sum && op != ReduceOp::mean) || indices || !values) return false;
  if (!in.is_contiguous() || !values->is_contiguous()) return false;
  rows = 1;
  columns = 1;
  bool in_kept = false;
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    if (in.sizes[d] == 1) continue;
    if (reduced[d]) {
      if (in_kept) return false;  // a reduced dimension after a kept one
      rows *= in.sizes[d];
    } else {
      in_kept = true;
      columns *= in.sizes[d];
    }
  }
  // Up to 16 rows the thread-per-output kernel (one thread per column, coalesced across threads) is the
  // better fit: a 128-lane block would leave most lanes idle (GPT-2's position-embedding gradient, 8 rows
  // of 786432 columns at 8 x 1024 tokens, took 0.48 ms a step here against 0.03 ms there on the H100).
  return columns >= 32 && rows > 16;
}

unsigned next_power_of_two(int64_t n) {
  unsigned p = 1;
  while (p < n && p < kBlockThreads) p *= 2;
  return p;
}

// Launches a reduction over args.num_outputs outputs of args.reduce_size elements each: one thread per
// output when the reductions are short, or strided and many; one block per output otherwise. `Args` has
// `inner`, the indexer over one output's reduced elements.
template <typename Args>
void launch_reduction(const Args& args, void (*thread_per_output)(Args), const char* thread_launch,
                      void (*block_per_output)(Args), const char* block_launch) {
  const bool reduced_elements_adjacent = args.inner.ndim > 0 && args.inner.strides[0][args.inner.ndim - 1] == 1;
  const bool one_thread_each = args.reduce_size <= 16 || (!reduced_elements_adjacent && args.num_outputs >= 4096);
  if (one_thread_each) {
    thread_per_output<<<grid_for(args.num_outputs), kBlockThreads, 0, launch_stream()>>>(args);
    check_cuda(cudaGetLastError(), thread_launch, __FILE__, __LINE__);
  } else {
    const unsigned threads = std::max(32u, next_power_of_two(args.reduce_size));
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(args.num_outputs, int64_t{1} << 20));
    block_per_output<<<blocks, threads, 0, launch_stream()>>>(args);
    check_cuda(cudaGetLastError(), block_launch, __FILE__, __LINE__);
  }
}

// Reduces `in` over the dimensions where reduced[d]; out_sizes is in's shape with 1 there. values and
// indices (either may be absent) are laid out over out_sizes.
void launch_reduce(ReduceOp op, const StridedView& in, const std::vector<bool>& reduced,
                   const std::vector<int64_t>& out_sizes, const StridedView* values, const StridedView* indices) {
  std::vector<int64_t> inner_sizes(in.sizes.size(), 1);
  int64_t reduce_size = 1;
  for (size_t d = 0; d < in.sizes.size(); ++d)
    if (reduced[d]) {
      inner_sizes[d] = in.sizes[d];
      reduce_size *= in.sizes[d];
    }
  int64_t num_outputs = 1;
  for (int64_t s : out_sizes) num_outputs *= s;
  if (num_outputs == 0) return;

  int64_t column_rows = 0, columns = 0;
  if (column_reduction(op, in, reduced, values, indices, column_rows, columns)) {
    dispatch_dtype(in.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = reduce_acc_t<T>;
      const Acc factor = static_cast<Acc>(static_cast<Acc>(num_outputs) / static_cast<Acc>(num_outputs * reduce_size));
      const bool mean = op == ReduceOp::mean;
      constexpr int kPairs = sizeof(T) == 2 ? 2 : 1;  // 16-bit columns in pairs: 4-byte loads
      const bool paired =
          kPairs > 1 && columns % kPairs == 0 && reinterpret_cast<uintptr_t>(in.data) % (sizeof(T) * kPairs) == 0;
      auto launch = [&](auto per_thread) {
        constexpr int kPerThread = decltype(per_thread)::value;
        const dim3 block(kColumnThreads, kColumnLanes);
        const auto blocks =
            static_cast<unsigned>((columns + kColumnThreads * kPerThread - 1) / (kColumnThreads * kPerThread));
        reduce_columns_kernel<T, kPerThread><<<blocks, block, 0, launch_stream()>>>(
            static_cast<const T*>(in.data), values->data, values->dtype, column_rows, columns, mean, factor);
        BYTEGRAD_CUDA_CHECK_LAUNCH("reduce_columns_kernel");
      };
      if (paired) launch(std::integral_constant<int, kPairs>{});
      else launch(std::integral_constant<int, 1>{});
    });
    return;
  }
  const std::vector<int64_t>& value_strides = values ? values->strides : in.strides;
  const std::vector<int64_t>& index_strides = indices ? indices->strides : in.strides;
  dispatch_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = reduce_acc_t<T>;
    ReduceArgs<T> args{};
    args.in = static_cast<const T*>(in.data);
    args.values = values ? values->data : nullptr;
    args.values_dtype = values ? values->dtype : in.dtype;
    args.indices = indices ? static_cast<int64_t*>(indices->data) : nullptr;
    args.num_outputs = num_outputs;
    args.reduce_size = reduce_size;
    args.kind = combine_for(op);
    args.mean = op == ReduceOp::mean;
    args.norm = op == ReduceOp::norm;
    args.abs = op == ReduceOp::norm_one || op == ReduceOp::norm_inf;
    args.mean_factor = static_cast<Acc>(static_cast<Acc>(num_outputs) / static_cast<Acc>(num_outputs * reduce_size));
    args.outer = make_indexer<3>(out_sizes, {in.strides, value_strides, index_strides});
    args.inner = make_indexer<1>(inner_sizes, {in.strides});
    launch_reduction(args, reduce_thread_per_output<T>, "launch of reduce_thread_per_output",
                     reduce_block_per_output<T>, "launch of reduce_block_per_output");
  });
}

// ---------------------------------------------------------------------------------- var / std (Welford)
// Each thread folds its elements into (mean, m2, n); partial states merge with Chan's formula. Accumulates
// in float for float32/float16/bfloat16 and double for float64, as PyTorch's WelfordOps.
template <typename Acc>
struct Welford {
  Acc mean;
  Acc m2;
  Acc n;
};

template <typename Acc>
__device__ __forceinline__ Welford<Acc> welford_add(Welford<Acc> s, Acc x) {
  const Acc n = s.n + Acc(1);
  const Acc delta = x - s.mean;
  const Acc mean = s.mean + delta / n;
  return {mean, s.m2 + delta * (x - mean), n};
}

template <typename Acc>
__device__ __forceinline__ Welford<Acc> welford_merge(Welford<Acc> a, Welford<Acc> b) {
  if (a.n == Acc(0)) return b;
  if (b.n == Acc(0)) return a;
  const Acc n = a.n + b.n;
  const Acc nb_over_n = b.n / n;
  const Acc delta = b.mean - a.mean;
  return {a.mean + delta * nb_over_n, a.m2 + b.m2 + delta * delta * a.n * nb_over_n, n};
}

template <typename T>
struct VarianceArgs {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* in;
  void* out;
  ScalarType out_dtype;
  int64_t num_outputs;
  int64_t reduce_size;
  Acc correction;
  bool take_sqrt;
  StridedIndexer<2> outer;  // over the output shape: offsets into in, out
  StridedIndexer<1> inner;  // over the reduced dimensions: offset into in

  __device__ __forceinline__ Acc element(int64_t in_base, int64_t r) const {
    int64_t off[1];
    inner.offsets(r, off);
    return convert<Acc>(in[in_base + off[0]]);
  }
  __device__ __forceinline__ void write(int64_t out_offset, Welford<Acc> s) const {
    const Acc divisor = s.n > correction ? s.n - correction : Acc(0);
    Acc v = s.m2 / divisor;
    if (take_sqrt) v = sqrt(v);
    store_as(out, out_dtype, out_offset, v);
  }
};

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) variance_block_per_output(VarianceArgs<T> args) {
  using Acc = typename VarianceArgs<T>::Acc;
  __shared__ Welford<Acc> partial[kBlockThreads];
  for (int64_t out_i = blockIdx.x; out_i < args.num_outputs; out_i += gridDim.x) {
    int64_t o[2];
    args.outer.offsets(out_i, o);
    Welford<Acc> s{Acc(0), Acc(0), Acc(0)};
    for (int64_t r = threadIdx.x; r < args.reduce_size; r += blockDim.x) s = welford_add(s, args.element(o[0], r));
    partial[threadIdx.x] = s;
    __syncthreads();
    for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) partial[threadIdx.x] = welford_merge(partial[threadIdx.x], partial[threadIdx.x + width]);
      __syncthreads();
    }
    if (threadIdx.x == 0) args.write(o[1], partial[0]);
    __syncthreads();
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) variance_thread_per_output(VarianceArgs<T> args) {
  using Acc = typename VarianceArgs<T>::Acc;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t out_i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; out_i < args.num_outputs;
       out_i += step) {
    int64_t o[2];
    args.outer.offsets(out_i, o);
    Welford<Acc> s{Acc(0), Acc(0), Acc(0)};
    for (int64_t r = 0; r < args.reduce_size; ++r) s = welford_add(s, args.element(o[0], r));
    args.write(o[1], s);
  }
}

}  // namespace

void reduce_variance(const StridedView& out, const StridedView& in, double correction, bool take_sqrt) {
  if (out.sizes.size() != in.sizes.size())
    throw std::invalid_argument("cuda backend: reduce_variance: the output must keep the input's rank");
  std::vector<int64_t> inner_sizes(in.sizes.size(), 1);
  int64_t reduce_size = 1;
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    const bool reduced = out.sizes[d] == 1 && in.sizes[d] != 1;
    if (!reduced && out.sizes[d] != in.sizes[d])
      throw std::invalid_argument(
          "cuda backend: reduce_variance: output size must be 1 or the input's in every dimension");
    if (reduced) {
      inner_sizes[d] = in.sizes[d];
      reduce_size *= in.sizes[d];
    }
  }
  int64_t num_outputs = 1;
  for (int64_t s : out.sizes) num_outputs *= s;
  if (num_outputs == 0) return;
  dispatch_floating(in.dtype, "var/std", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = typename VarianceArgs<T>::Acc;
    VarianceArgs<T> args{};
    args.in = static_cast<const T*>(in.data);
    args.out = out.data;
    args.out_dtype = out.dtype;
    args.num_outputs = num_outputs;
    args.reduce_size = reduce_size;
    args.correction = static_cast<Acc>(correction);
    args.take_sqrt = take_sqrt;
    args.outer = make_indexer<2>(out.sizes, {in.strides, out.strides});
    args.inner = make_indexer<1>(inner_sizes, {in.strides});
    launch_reduction(args, variance_thread_per_output<T>, "launch of variance_thread_per_output",
                     variance_block_per_output<T>, "launch of variance_block_per_output");
  });
}

namespace {}  // namespace

void reduce(ReduceOp op, const StridedView& out, const StridedView& in) {
  if (out.sizes.size() != in.sizes.size())
    throw std::invalid_argument("cuda backend: reduce: the output must keep the input's rank");
  std::vector<bool> reduced(in.sizes.size());
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    reduced[d] = out.sizes[d] == 1 && in.sizes[d] != 1;
    if (!reduced[d] && out.sizes[d] != in.sizes[d])
      throw std::invalid_argument("cuda backend: reduce: output size must be 1 or the input's in every dimension");
  }
  if (op == ReduceOp::var || op == ReduceOp::std)
    throw std::invalid_argument("cuda backend: reduce: var/std go through reduce_variance");
  if ((op == ReduceOp::norm || op == ReduceOp::norm_one || op == ReduceOp::norm_inf) && !is_floating_point(in.dtype))
    throw std::invalid_argument("cuda backend: reduce: norm needs a floating dtype");
  const bool wants_index = op == ReduceOp::argmax || op == ReduceOp::argmin;
  if (wants_index && out.dtype != ScalarType::int64)
    throw std::invalid_argument("cuda backend: reduce: argmax/argmin write int64");
  launch_reduce(op, in, reduced, out.sizes, wants_index ? nullptr : &out, wants_index ? &out : nullptr);
}

void reduce_with_indices(ReduceOp op, const StridedView& values, const StridedView& indices, const StridedView& in,
                         int64_t dim) {
  const int64_t ndim = static_cast<int64_t>(in.sizes.size());
  if (dim < 0 || dim >= std::max<int64_t>(ndim, 1))
    throw std::invalid_argument("cuda backend: reduce_with_indices: dimension out of range");
  if (op != ReduceOp::max && op != ReduceOp::min && op != ReduceOp::argmax && op != ReduceOp::argmin)
    throw std::invalid_argument("cuda backend: reduce_with_indices: only max and min have indices");
  if (indices.dtype != ScalarType::int64)
    throw std::invalid_argument("cuda backend: reduce_with_indices: indices must be int64");
  if (values.sizes != indices.sizes || values.sizes.size() != in.sizes.size())
    throw std::invalid_argument("cuda backend: reduce_with_indices: values and indices must have in's rank");
  std::vector<bool> reduced(in.sizes.size(), false);
  if (ndim > 0) reduced[dim] = true;
  launch_reduce(op, in, reduced, values.sizes, &values, &indices);
}

}  // namespace bytegrad::cuda
