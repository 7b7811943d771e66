// Negative log-likelihood, forward and backward, as PyTorch's CUDA nll_loss kernels compute it: the reduced
// forward is one block summing -w[t] * input[i][t] and the weights w[t] of non-ignored targets t = target[i]
// in opmath (float for float32 and the 16-bit floats; w = 1 without class weights); the unreduced forward
// and the backward write one element per row. A target outside [0, C) contributes NaN (PyTorch raises a device-side
// assert instead).
#include <cuda_runtime.h>

#include <cmath>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_kernel_common.cuh"
#include "bytegrad/kernels/operand_checks.h"

namespace bytegrad::cuda {

namespace {

constexpr int kLossThreads = 256;

// What every nll kernel reads besides the values: each row's target class, the class weights, where they
// lie and ignore_index. Trivially copyable: kernels take it by value.
template <typename T>
struct NllTargets {
  const int64_t* target;
  const T* weights;  // nullptr: every class weighs 1
  int64_t weight_stride;
  NllGeometry g;
  int64_t ignore_index;

  __device__ int64_t of_row(int64_t i) const { return target[i * g.target_stride]; }
  __device__ opmath_t<T> weight(int64_t t) const {
    return weights ? convert<opmath_t<T>>(weights[t * weight_stride]) : opmath_t<T>(1);
  }
};

template <typename T>
NllTargets<T> nll_targets(const StridedView& target, const StridedView* weight, const NllGeometry& g,
                          int64_t ignore_index) {
  return {static_cast<const int64_t*>(target.data), weight ? static_cast<const T*>(weight->data) : nullptr,
          weight && !weight->strides.empty() ? weight->strides[0] : 0, g, ignore_index};
}

template <typename T>
__global__ void __launch_bounds__(kLossThreads)
    nll_reduce_kernel(T* output, T* total_weight, const T* input, NllTargets<T> targets, bool mean) {
  using Acc = opmath_t<T>;
  const NllGeometry& g = targets.g;
  __shared__ Acc sums[kLossThreads];
  __shared__ Acc counts[kLossThreads];
  Acc sum = 0, count = 0;
  for (int64_t i = threadIdx.x; i < g.batch; i += kLossThreads) {
    const int64_t t = targets.of_row(i);
    if (t == targets.ignore_index) continue;
    if (t < 0 || t >= g.classes) {
      sum += NAN;
      count += 1;
    } else {
      const Acc w = targets.weight(t);
      sum -= w * convert<Acc>(input[i * g.row_stride + t * g.class_stride]);
      count += w;
    }
  }
  sums[threadIdx.x] = sum;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int half = kLossThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *total_weight = convert<T>(counts[0]);
    *output = convert<T>(mean ? sums[0] / counts[0] : sums[0]);  // 0 / 0 = NaN when all are ignored
  }
}

template <typename T>
struct NllNoReduceFunctor {
  T* output;
  int64_t output_stride;
  const T* input;
  NllTargets<T> targets;
  __device__ void operator()(int64_t i) const {
    using Acc = opmath_t<T>;
    const NllGeometry& g = targets.g;
    const int64_t t = targets.of_row(i);
    T value;
    if (t == targets.ignore_index) value = convert<T>(0.0f);
    else if (t < 0 || t >= g.classes) value = convert<T>(static_cast<float>(NAN));
    else value = convert<T>(-targets.weight(t) * convert<Acc>(input[i * g.row_stride + t * g.class_stride]));
    output[i * output_stride] = value;
  }
};

template <typename T>
struct NllBackwardFunctor {
  T* grad_input;
  const T* grad_output;
  int64_t grad_output_stride;  // per row for Reduction::none; 0 reads the single 0-d gradient
  const T* total_weight;       // divides for mean; nullptr otherwise
  NllTargets<T> targets;
  __device__ void operator()(int64_t i) const {
    const NllGeometry& g = targets.g;
    const int64_t t = targets.of_row(i);
    if (t == targets.ignore_index || t < 0 || t >= g.classes) return;
    using Acc = opmath_t<T>;
    Acc grad = convert<Acc>(grad_output[i * grad_output_stride]);
    if (total_weight) grad = grad / convert<Acc>(*total_weight);
    if (targets.weights) grad = grad * targets.weight(t);
    grad_input[i * g.row_stride + t * g.class_stride] = convert<T>(-grad);
  }
};

// nll_loss_backward's element of row i as packed rows (backend.h's nll_loss_backward_rows): the column
// (-1 for an ignored row, which stays zero) and the value NllBackwardFunctor writes there.
template <typename T>
struct NllRowsFunctor {
  int64_t* columns;
  T* values;
  const T* grad_output;
  int64_t grad_output_stride;
  const T* total_weight;
  NllTargets<T> targets;
  __device__ void operator()(int64_t i) const {
    const NllGeometry& g = targets.g;
    const int64_t t = targets.of_row(i);
    if (t == targets.ignore_index || t < 0 || t >= g.classes) {
      columns[i] = -1;
      values[i] = convert<T>(0.0f);
      return;
    }
    using Acc = opmath_t<T>;
    Acc grad = convert<Acc>(grad_output[i * grad_output_stride]);
    if (total_weight) grad = grad / convert<Acc>(*total_weight);
    if (targets.weights) grad = grad * targets.weight(t);
    columns[i] = t;
    values[i] = convert<T>(-grad);
  }
};

// Row i's one element of the cast of packed rows (backend.h's cast_nll_rows), on a zeroed output.
template <typename To, typename From>
struct CastNllRows {
  To* out;
  int64_t classes;
  const int64_t* columns;
  const From* values;
  __device__ void operator()(int64_t i) const {
    const int64_t t = columns[i];
    if (t >= 0) out[i * classes + t] = convert<To>(values[i]);
  }
};

// One row's target element of a cast (backend.h's cast_target_elements).
template <typename To, typename From>
struct CastTargetElements {
  To* out;
  int64_t out_row, out_class;
  const From* in;
  const int64_t* target;
  NllGeometry g;
  int64_t ignore_index;
  __device__ void operator()(int64_t i) const {
    const int64_t t = target[i * g.target_stride];
    if (t == ignore_index || t < 0 || t >= g.classes) return;
    out[i * out_row + t * out_class] = convert<To>(in[i * g.row_stride + t * g.class_stride]);
  }
};

}  // namespace

void nll_loss(const StridedView& output, const StridedView& total_weight, const StridedView& log_probs,
              const StridedView& target, Reduction reduction, int64_t ignore_index, const StridedView* weight) {
  const NllGeometry g = nll_geometry(log_probs, target, "cuda");
  dispatch_floating(log_probs.dtype, "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(output.data);
    T* total = static_cast<T*>(total_weight.data);
    const T* in = static_cast<const T*>(log_probs.data);
    const NllTargets<T> targets = nll_targets<T>(target, weight, g, ignore_index);
    if (reduction == Reduction::none && log_probs.sizes.size() == 2) {
      BYTEGRAD_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(T), launch_stream()));  // PyTorch: total_weight.zero_()
      NllNoReduceFunctor<T> f{out, output.strides.empty() ? 0 : output.strides[0], in, targets};
      for_each_index(g.batch, f, "nll_loss no-reduce kernel");
      return;
    }
    nll_reduce_kernel<T>
        <<<1, kLossThreads, 0, launch_stream()>>>(out, total, in, targets, reduction == Reduction::mean);
    BYTEGRAD_CUDA_CHECK_LAUNCH("nll_reduce_kernel");
  });
}

void cast_target_elements(const StridedView& out, const StridedView& in, const StridedView& target,
                          int64_t ignore_index) {
  const NllGeometry g = nll_geometry(in, target, "cuda");
  const int64_t out_row = out.strides[0], out_class = out.strides[1];
  dispatch_floating(out.dtype, "cast_target_elements", [&](auto out_tag) {
    using To = typename decltype(out_tag)::type;
    dispatch_floating(in.dtype, "cast_target_elements", [&](auto in_tag) {
      using From = typename decltype(in_tag)::type;
      auto* dst = static_cast<To*>(out.data);
      const auto* src = static_cast<const From*>(in.data);
      const auto* targets = static_cast<const int64_t*>(target.data);
      const CastTargetElements<To, From> f{dst, out_row, out_class, src, targets, g, ignore_index};
      for_each_index(g.batch, f, "cast_target_elements kernel");
    });
  });
}

void nll_loss_backward(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                       const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                       const StridedView* weight) {
  const NllGeometry g = nll_geometry(grad_input, target, "cuda");
  const bool per_row = reduction == Reduction::none && grad_input.sizes.size() == 2;
  dispatch_floating(grad_input.dtype, "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    NllBackwardFunctor<T> f{static_cast<T*>(grad_input.data), static_cast<const T*>(grad_output.data),
                            per_row && !grad_output.strides.empty() ? grad_output.strides[0] : 0,
                            reduction == Reduction::mean ? static_cast<const T*>(total_weight.data) : nullptr,
                            nll_targets<T>(target, weight, g, ignore_index)};
    for_each_index(g.batch, f, "nll_loss backward kernel");
  });
}

void nll_loss_backward_rows(const StridedView& grad_input, const StridedView& grad_output, const StridedView& target,
                            const StridedView& total_weight, Reduction reduction, int64_t ignore_index,
                            const StridedView* weight) {
  const NllGeometry g = nll_geometry(grad_input, target, "cuda");
  const bool per_row = reduction == Reduction::none;
  dispatch_floating(grad_input.dtype, "nll_loss_backward_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* columns = static_cast<int64_t*>(grad_input.data);
    NllRowsFunctor<T> f{columns,
                        reinterpret_cast<T*>(columns + g.batch),
                        static_cast<const T*>(grad_output.data),
                        per_row && !grad_output.strides.empty() ? grad_output.strides[0] : 0,
                        reduction == Reduction::mean ? static_cast<const T*>(total_weight.data) : nullptr,
                        nll_targets<T>(target, weight, g, ignore_index)};
    for_each_index(g.batch, f, "nll_loss backward rows kernel");
  });
}

void cast_nll_rows(const StridedView& out, const StridedView& packed) {
  const int64_t rows = packed.sizes.at(0), classes = packed.sizes.at(1);
  BYTEGRAD_CUDA_CHECK(
      cudaMemsetAsync(out.data, 0, static_cast<size_t>(out.numel()) * element_size(out.dtype), launch_stream()));
  dispatch_floating(out.dtype, "cast_nll_rows", [&](auto out_tag) {
    using To = typename decltype(out_tag)::type;
    dispatch_floating(packed.dtype, "cast_nll_rows", [&](auto in_tag) {
      using From = typename decltype(in_tag)::type;
      const auto* columns = static_cast<const int64_t*>(packed.data);
      const CastNllRows<To, From> f{static_cast<To*>(out.data), classes, columns,
                                    reinterpret_cast<const From*>(columns + rows)};
      for_each_index(rows, f, "cast_nll_rows kernel");
    });
  });
}

}  // namespace bytegrad::cuda
