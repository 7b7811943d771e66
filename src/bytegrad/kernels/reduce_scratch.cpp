// PyTorch 2.11's reduction launch rule (TensorIterator's reorder/coalesce, then Reduce.cuh's
// setReduceConfig and ReduceConfig's sizes), restated. Variable names follow PyTorch's so the two can be
// read side by side.
#include "bytegrad/kernels/reduce_scratch.h"

#include "bytegrad/core/small_vector.h"
#include "bytegrad/kernels/dimension_order.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace bytegrad {

namespace {

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest power of two not above n (at least 1).
int last_pow2(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return static_cast<int>(p);
}

// TensorIterator's view of the operands after reorder_dimensions and coalesce_dimensions: dimension 0 is
// the fastest moving, reduced dimensions (output stride 0) come first.
// Inline up to five dimensions (Shape's room), so a reduction's scratch sizing takes nothing from malloc.
using IterDims = SmallVector<int64_t, 5>;
struct IterShape {
  IterDims shape;
  IterDims out_stride;  // bytes
  IterDims in_stride;   // bytes
};

IterShape iterator_shape(const ReduceIterGeometry& g) {
  const size_t n = g.input_sizes.size();
  if (g.output_sizes.size() != n || g.input_strides.size() != n || g.output_strides.size() != n)
    throw std::invalid_argument("reduce_scratch: the output and input must have the same rank");
  IterShape it;
  it.shape = g.input_sizes;
  it.out_stride.resize(n);
  it.in_stride.resize(n);
  for (size_t d = 0; d < n; ++d) {
    it.in_stride[d] = g.input_strides[d] * g.input_element_size;
    // compute_strides: a size-1 output dimension broadcast over a longer input one gets stride 0.
    const bool reduced = g.output_sizes[d] == 1 && g.input_sizes[d] != 1;
    it.out_stride[d] = reduced ? 0 : g.output_strides[d] * g.output_element_size;
  }
  if (n <= 1) return it;

  // reorder_dimensions (kernels/dimension_order.h), with the reduction's rule that reduced dimensions go first.
  auto should_swap = [&](size_t dim0, size_t dim1) -> int {
    const IterDims* operands[2] = {&it.out_stride, &it.in_stride};
    for (int arg = 0; arg < 2; ++arg) {
      const int64_t stride0 = (*operands[arg])[dim0];
      const int64_t stride1 = (*operands[arg])[dim1];
      // The reduction's output: reduced dimensions (stride 0) go to the front.
      if (arg == 0 && (stride0 == 0) != (stride1 == 0)) return stride1 == 0 ? 1 : -1;
      if (stride0 == 0 || stride1 == 0) continue;  // a broadcast dimension decides nothing
      if (stride0 < stride1) return -1;
      if (stride0 > stride1) return 1;
      if (it.shape[dim0] > it.shape[dim1]) return 1;  // equal strides: the smaller size first
    }
    return 0;
  };
  const std::vector<size_t> perm = iterator_dimension_order(n, should_swap);
  IterShape permuted;
  for (size_t i = 0; i < n; ++i) {
    permuted.shape.push_back(it.shape[perm[i]]);
    permuted.out_stride.push_back(it.out_stride[perm[i]]);
    permuted.in_stride.push_back(it.in_stride[perm[i]]);
  }
  it = std::move(permuted);

  // coalesce_dimensions: merge neighbours when either has size 1 or every operand steps through them as
  // one (shape[d0] * stride[d0] == stride[d1]); a size-1 dimension takes its neighbour's strides.
  auto can_coalesce = [&](size_t dim0, size_t dim1) {
    if (it.shape[dim0] == 1 || it.shape[dim1] == 1) return true;
    return it.shape[dim0] * it.out_stride[dim0] == it.out_stride[dim1] &&
           it.shape[dim0] * it.in_stride[dim0] == it.in_stride[dim1];
  };
  auto replace_stride = [&](size_t dim0, size_t dim1) {
    it.out_stride[dim0] = it.out_stride[dim1];
    it.in_stride[dim0] = it.in_stride[dim1];
  };
  size_t prev_dim = 0;
  for (size_t dim = 1; dim < n; ++dim) {
    if (can_coalesce(prev_dim, dim)) {
      if (it.shape[prev_dim] == 1) replace_stride(prev_dim, dim);
      it.shape[prev_dim] *= it.shape[dim];
    } else {
      ++prev_dim;
      if (prev_dim != dim) {
        replace_stride(prev_dim, dim);
        it.shape[prev_dim] = it.shape[dim];
      }
    }
  }
  it.shape.resize(prev_dim + 1);
  it.out_stride.resize(prev_dim + 1);
  it.in_stride.resize(prev_dim + 1);
  return it;
}

}  // namespace

ReduceScratch reduce_scratch(const ReduceIterGeometry& g, const ReduceKernelTraits& traits,
                             const ReduceDeviceLimits& device) {
  const IterShape it = iterator_shape(g);
  const size_t ndim = it.shape.size();
  int64_t numel = 1;
  for (int64_t s : it.shape) numel *= s;
  if (numel == 0) return {};  // PyTorch fills the identity (or NaN) without launching the kernel

  int num_reduce_dims = 0;
  int64_t num_outputs = 1;
  for (size_t d = 0; d < ndim; ++d) {
    if (it.out_stride[d] == 0) ++num_reduce_dims;
    else num_outputs *= it.shape[d];
  }
  const int64_t inputs_per_output = numel / num_outputs;
  const int64_t element = g.input_element_size;

  // setReduceConfig: block.x follows the fastest moving dimension of the input.
  bool reduction_on_fastest_striding_dimension = true;
  int64_t dim0 = 1, dim1 = 1, fastest_moving_stride = element;
  if (ndim > 0) {
    reduction_on_fastest_striding_dimension =
        num_reduce_dims == static_cast<int>(ndim) || it.in_stride[0] < it.in_stride[num_reduce_dims];
    if (reduction_on_fastest_striding_dimension) {
      dim0 = inputs_per_output;
      dim1 = num_outputs;
      fastest_moving_stride = it.in_stride[0];
    } else {
      dim0 = num_outputs;
      dim1 = inputs_per_output;
      fastest_moving_stride = it.in_stride[num_reduce_dims];
    }
  }

  // Vectorized loads: along the input when the one reduced dimension is contiguous and long (each thread
  // then covers input_vec_size inputs per load), or along the output when a kept dimension is contiguous
  // (each thread then computes output_vec_size outputs: 4, halved until the data pointer, the first kept
  // dimension's size and every other input stride divide by it).
  int output_vec_size = 1;
  if (fastest_moving_stride == element) {
    if (reduction_on_fastest_striding_dimension && dim0 >= 128 && num_reduce_dims == 1) {
      dim0 /= traits.input_vec_size;
    } else if (!reduction_on_fastest_striding_dimension) {
      int vec = 4;
      auto update = [&vec](int64_t v) {
        while (v % vec != 0) vec /= 2;
      };
      update(g.input_offset);  // allocations are 512-byte aligned: only a view's offset can misalign
      update(it.shape[num_reduce_dims]);
      for (size_t d = 0; d < ndim; ++d)
        if (static_cast<int>(d) != num_reduce_dims) update(it.in_stride[d] / element);
      output_vec_size = vec;
      dim0 /= output_vec_size;
    }
  }

  // set_block_dimension: a power-of-two block of at most max_num_threads / output_vec_size threads, at
  // most a warp wide at first, then as wide as the height leaves room for.
  const int max_num_threads = traits.max_num_threads / output_vec_size;
  const int dim0_pow2 = dim0 < max_num_threads ? last_pow2(dim0) : max_num_threads;
  const int dim1_pow2 = dim1 < max_num_threads ? last_pow2(dim1) : max_num_threads;
  int block_width = std::min(dim0_pow2, 32);
  const int block_height = std::min(dim1_pow2, max_num_threads / block_width);
  block_width = std::min(dim0_pow2, max_num_threads / block_height);
  const int num_threads = block_width * block_height;

  int64_t step_input = 1, step_output = 1;
  const int64_t num_inputs = inputs_per_output;
  auto values_per_thread = [&] { return div_up(num_inputs, step_input); };
  bool block_x_reduce = false, block_y_reduce = false;
  if (ndim == 0 || reduction_on_fastest_striding_dimension) {
    block_x_reduce = true;  // lanes split the inputs: warp shuffles combine them
    step_input *= block_width;
  } else {
    step_output *= block_width;  // lanes take separate outputs
  }

  constexpr int64_t min_values_per_thread = 16;
  constexpr int64_t max_values_per_thread = 256;
  const int64_t warp_split_threshold = std::min<int64_t>(int64_t{block_height} * 16, max_values_per_thread);
  if (values_per_thread() >= warp_split_threshold) {
    block_y_reduce = true;  // warps split the inputs too: combined through shared memory
    step_input *= block_height;
  } else {
    step_output *= block_height;
  }

  // Split each output's inputs across blocks when every thread would still have at least
  // max_values_per_thread values and the grid is not already large enough to fill the device.
  const int64_t blocks_per_sm = device.max_threads_per_multiprocessor / num_threads;
  const int64_t target_grid_size = int64_t{device.multiprocessor_count} * blocks_per_sm;
  const int64_t grid_x = div_up(num_outputs / output_vec_size, step_output);
  int64_t ctas_per_output = 1;
  if (block_y_reduce && values_per_thread() >= max_values_per_thread && grid_x <= target_grid_size) {
    const int64_t ctas1 = div_up(target_grid_size, grid_x);
    const int64_t ctas2 = div_up(values_per_thread(), min_values_per_thread);
    const int64_t ctas3 = div_up(values_per_thread(), max_values_per_thread);
    ctas_per_output = std::max(std::min(ctas1, ctas2), ctas3);
  }
  if (ctas_per_output <= 1) return {};

  // global_memory_size: one accumulator per output per block column, and per lane and vector slot when
  // the lanes hold separate outputs; semaphore_size: one int per grid column.
  ReduceScratch scratch;
  scratch.buffer_bytes = int64_t{traits.accumulator_size} * num_outputs * ctas_per_output;
  if (!block_x_reduce) scratch.buffer_bytes *= int64_t{block_width} * output_vec_size;
  scratch.semaphore_bytes = int64_t{sizeof(int)} * grid_x;
  return scratch;
}

}  // namespace bytegrad
