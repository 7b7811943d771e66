// Softmax and log-softmax along one dimension, forward and backward. Each row (all elements along `dim`
// for one position of the other dimensions) is handled by one warp when the dimension is short (<= 1024)
// and by one block otherwise; the row's max and sum are combined with warp shuffles (and shared memory
// across warps). Arithmetic in float for the 16-bit floats and float32, double for float64.
#include <cuda_runtime.h>

#include <array>
#include <cmath>

#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/pointwise_math.h"

namespace bytegrad::cuda {

namespace {

constexpr int kWarp = 32;

struct MaxOp {
  template <typename Acc>
  __device__ Acc operator()(Acc a, Acc b) const { return (pointwise::is_nan(b) || b > a) ? b : a; }  // NaN propagates
};
struct SumOp {
  template <typename Acc>
  __device__ Acc operator()(Acc a, Acc b) const { return a + b; }
};

// Combines v over the kThreadsPerRow threads that share a row; every one of them gets the result.
template <int kThreadsPerRow, typename Acc, typename Op>
__device__ __forceinline__ Acc row_allreduce(Acc v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (kThreadsPerRow > kWarp) {
    __shared__ Acc per_warp[kThreadsPerRow / kWarp];
    __syncthreads();  // the previous call's readers are done with per_warp
    if (threadIdx.x % kWarp == 0) per_warp[threadIdx.x / kWarp] = v;
    __syncthreads();
    v = per_warp[0];
#pragma unroll
    for (int w = 1; w < kThreadsPerRow / kWarp; ++w) v = op(v, per_warp[w]);
  }
  return v;
}

// rows: StridedIndexer over the shape with `dim` set to 1, giving each tensor's offset of a row's start.
template <typename T, int N>
struct RowLayout {
  int64_t num_rows;
  int64_t dim_size;
  int64_t dim_stride[N];
  StridedIndexer<N> rows;
};

template <int kThreadsPerRow>
__device__ __forceinline__ void row_assignment(int64_t& first_row, int64_t& row_step, int& lane) {
  constexpr int kRowsPerBlock = kBlockThreads / kThreadsPerRow;
  first_row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  row_step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  lane = threadIdx.x % kThreadsPerRow;
}

// layout operands: 0 = out, 1 = in
template <typename T, int kThreadsPerRow>
__global__ void __launch_bounds__(kBlockThreads) softmax_forward_kernel(T* out, const T* in, RowLayout<T, 2> layout, bool log) {
  using Acc = opmath_t<T>;
  int64_t row, row_step;
  int lane;
  row_assignment<kThreadsPerRow>(row, row_step, lane);
  for (; row < layout.num_rows; row += row_step) {  // uniform across the threads of a row
    int64_t base[2];
    layout.rows.offsets(row, base);
    const T* x = in + base[1];
    T* y = out + base[0];
    const int64_t sx = layout.dim_stride[1], sy = layout.dim_stride[0];

    Acc max_value = -INFINITY;
    for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow) max_value = MaxOp{}(max_value, convert<Acc>(x[j * sx]));
    max_value = row_allreduce<kThreadsPerRow>(max_value, MaxOp{});

    Acc sum = 0;
    for (int64_t j = lane; j < layout.dim_size; j += kThreadsPerRow) sum += pointwise::m_exp(convert<Acc>(x[j * sx]) - max_value);
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

// layout operands: 0 = grad_in, 1 = grad_out, 2 = output
template <typename T, int kThreadsPerRow>
__global__ void __launch_bounds__(kBlockThreads) softmax_backward_kernel(T* grad_in, const T* grad_out, const T* output,
                                                                         RowLayout<T, 3> layout, bool log) {
  using Acc = opmath_t<T>;
  int64_t row, row_step;
  int lane;
  row_assignment<kThreadsPerRow>(row, row_step, lane);
  for (; row < layout.num_rows; row += row_step) {
    int64_t base[3];
    layout.rows.offsets(row, base);
    T* gi = grad_in + base[0];
    const T* go = grad_out + base[1];
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
      gi[j * s_gi] = convert<T>(log ? g - pointwise::m_exp(out_value) * sum : out_value * (g - sum));
    }
  }
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
  if (dim < 0 || dim >= ndim) throw std::invalid_argument(std::string("cuda backend: ") + op + ": dimension out of range");
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

// Picks warp-per-row or block-per-row and a grid covering the rows.
template <typename Launch>
void launch_rows(int64_t num_rows, int64_t dim_size, Launch&& launch) {
  if (num_rows == 0 || dim_size == 0) return;
  if (dim_size <= 1024) {
    constexpr int kRowsPerBlock = kBlockThreads / kWarp;
    launch(std::integral_constant<int, kWarp>{}, grid_for(num_rows, kRowsPerBlock));
  } else {
    launch(std::integral_constant<int, kBlockThreads>{}, static_cast<unsigned>(std::min<int64_t>(num_rows, int64_t{1} << 20)));
  }
}

}  // namespace

void softmax(const StridedView& out, const StridedView& in, int64_t dim, bool log) {
  if (out.dtype != in.dtype) throw std::invalid_argument("cuda backend: softmax: output dtype differs from the input's");
  dispatch_floating(in.dtype, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto layout = make_row_layout<T, 2>({&out, &in}, dim, "softmax");
    launch_rows(layout.num_rows, layout.dim_size, [&](auto threads_per_row, unsigned blocks) {
      softmax_forward_kernel<T, decltype(threads_per_row)::value>
          <<<blocks, kBlockThreads>>>(static_cast<T*>(out.data), static_cast<const T*>(in.data), layout, log);
      BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
    });
  });
}

void softmax_backward(const StridedView& grad_in, const StridedView& grad_out, const StridedView& output, int64_t dim, bool log) {
  if (grad_out.dtype != grad_in.dtype || output.dtype != grad_in.dtype)
    throw std::invalid_argument("cuda backend: softmax_backward: operands must share one dtype");
  dispatch_floating(grad_in.dtype, "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto layout = make_row_layout<T, 3>({&grad_in, &grad_out, &output}, dim, "softmax_backward");
    launch_rows(layout.num_rows, layout.dim_size, [&](auto threads_per_row, unsigned blocks) {
      softmax_backward_kernel<T, decltype(threads_per_row)::value><<<blocks, kBlockThreads>>>(
          static_cast<T*>(grad_in.data), static_cast<const T*>(grad_out.data), static_cast<const T*>(output.data),
          layout, log);
      BYTEGRAD_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
    });
  });
}

}  // namespace bytegrad::cuda
