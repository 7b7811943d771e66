#include "bytegrad/tensor/ops_support.h"

#include "bytegrad/kernels/dimension_order.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>
#include <numeric>
#include <stdexcept>

#include "bytegrad/kernels/reduce_scratch.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/storage.h"

namespace bytegrad::ops_detail {

void check_defined(const char* op, const Tensor& t) {
  if (!t.defined()) throw std::invalid_argument(fmt::format("{}: an operand is an undefined tensor", op));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  if (a.device() != b.device())
    throw std::invalid_argument(
        fmt::format("{}: expected both operands on the same device, got {} and {}", op, describe(a), describe(b)));
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(fmt::format(
        "{}: dtype mismatch between {} and {} ({} takes operands of one dtype; convert one with .to(dtype))", op,
        describe(a), describe(b), op));
}

void check_floating(const char* op, const Tensor& t) {
  if (!is_floating_point(t.dtype()))
    throw std::invalid_argument(
        fmt::format("{}: {} is not a floating-point tensor (bytegrad does not promote integers to float; convert with "
                    ".to(float32))",
                    op, describe(t)));
}

void check_dtype_rule(const char* name, DtypeRule rule, const Tensor& t) {
  if (rule == DtypeRule::floating) check_floating(name, t);
  if (rule == DtypeRule::not_bool && t.dtype() == ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("{}: {} is a bool tensor, which {} does not take", name, describe(t), name));
}

void check_dtype_rule(const char* name, DtypeRule rule, const Tensor& a, const Tensor& b, ScalarType common) {
  if (a.dtype() == b.dtype()) return check_dtype_rule(name, rule, a);
  if (rule == DtypeRule::floating && !is_floating_point(common))
    throw std::invalid_argument(fmt::format(
        "{}: {} and {} promote to {}, which is not a floating-point type (bytegrad does not promote integers to "
        "float; convert with .to(float32))",
        name, describe(a), describe(b), scalar_type_name(common)));
  if (rule == DtypeRule::not_bool && common == ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("{}: {} and {} promote to bool, which {} does not take", name, describe(a), describe(b), name));
}

void check_can_cast_to_self(const char* name, ScalarType common, const Tensor& self, const Tensor& other) {
  if (!can_cast(common, self.dtype()))
    throw std::invalid_argument(fmt::format(
        "{}: result type {} (of {} and {}) can't be cast to the desired output type {} of the in-place target", name,
        scalar_type_name(common), describe(self), describe(other), scalar_type_name(self.dtype())));
}

Tensor to_dtype_preserving_strides(const Tensor& t, ScalarType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out;
  {
    AllocationScope scope("to");
    const TensorOptions options{dtype, t.device()};
    out = is_non_overlapping_and_dense(t) ? empty_strided(t.sizes(), t.strides(), options) : empty(t.sizes(), options);
  }
  backend_of(t).copy(kv(out), kv(t));
  return out;
}

void check_indices_in_range(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  if (index.is_meta() || index.numel() == 0) return;
  std::vector<char> host(index.nbytes());
  backend_of(index).copy_to_host(std::as_writable_bytes(std::span(host)), kv(index));
  for (int64_t i = 0; i < index.numel(); ++i) {
    int64_t value = 0;
    if (index.dtype() == ScalarType::int64) {
      std::memcpy(&value, host.data() + i * 8, 8);
    } else {
      int32_t narrow = 0;
      std::memcpy(&narrow, host.data() + i * 4, 4);
      value = narrow;
    }
    if (value < 0 || value >= size)
      throw std::out_of_range(fmt::format(
          "{}: index {} is out of range for dimension {} with size {} (valid indices are 0 to {}; negative indices are "
          "not wrapped): index out of range in self",
          op, value, dim, size, size - 1));
  }
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    if (sa != sb && sa != 1 && sb != 1)
      throw std::invalid_argument(
          fmt::format("{}: shapes {} and {} cannot be broadcast together (size {} vs {} at "
                      "dimension {})",
                      op, shape_str(a), shape_str(b), sa, sb, i));
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b) {
  try {
    return broadcast_shapes(op, a.sizes(), b.sizes());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(
        fmt::format("{}: the shapes of {} and {} cannot be broadcast together", op, describe(a), describe(b)));
  }
}

bool is_non_overlapping_and_dense(const Tensor& t) {
  return bytegrad::is_non_overlapping_and_dense(t.sizes(), t.strides());
}

Shape elementwise_output_strides(const Shape& sizes, std::initializer_list<const Tensor*> inputs) {
  const size_t ndim = sizes.size();
  bool same_shape = true, all_contiguous = true, all_dense_alike = true;
  const Tensor& first = **inputs.begin();
  for (const Tensor* t : inputs) {
    same_shape = same_shape && t->sizes() == sizes;
    all_contiguous = all_contiguous && t->is_contiguous();
    all_dense_alike = all_dense_alike && is_non_overlapping_and_dense(*t) && t->strides() == first.strides();
  }
  if (same_shape && all_contiguous) return contiguous_strides(sizes);
  if (same_shape && all_dense_alike) return first.strides();
  if (ndim <= 1) return contiguous_strides(sizes);

  // Each input's strides over the broadcast shape (0 where it is broadcast).
  std::vector<Shape> strides;
  for (const Tensor* t : inputs) {
    Shape s(ndim, 0);
    const size_t offset = ndim - static_cast<size_t>(t->dim());
    for (size_t i = 0; i < static_cast<size_t>(t->dim()); ++i)
      s[offset + i] = (t->sizes()[i] == 1 && sizes[offset + i] != 1) ? 0 : t->strides()[i];
    strides.push_back(std::move(s));
  }
  // TensorIterator::reorder_dimensions: perm[0] is the fastest-moving dimension.
  auto should_swap = [&](size_t dim0, size_t dim1) {
    for (const Shape& s : strides) {
      const int64_t stride0 = s[dim0], stride1 = s[dim1];
      if (stride0 == 0 || stride1 == 0) continue;  // broadcast: this operand has no opinion
      if (stride0 < stride1) return -1;
      if (stride0 > stride1) return 1;
      if (sizes[dim0] > sizes[dim1]) return 1;  // equal strides: the smaller dimension goes first
    }
    return 0;
  };
  const std::vector<size_t> perm = iterator_dimension_order(ndim, should_swap);
  Shape out(ndim);
  int64_t stride = 1;
  for (size_t i = 0; i < ndim; ++i) {
    out[perm[i]] = stride;
    stride *= sizes[perm[i]];
  }
  return out;
}

Tensor empty_elementwise_output(const Shape& sizes, ScalarType dtype, Device device,
                                std::initializer_list<const Tensor*> inputs) {
  return empty_strided(sizes, elementwise_output_strides(sizes, inputs), TensorOptions{dtype, device});
}

namespace {

// The instantiation of gpu_reduce_kernel PyTorch 2.11 picks for the op and the (cast) input dtype:
//  - sum, mean, prod: the accumulator is float for half, bfloat16 and float (reduce_dispatch,
//    opmath_type), double for double, int64 for the int64 an integer input was cast to. A 16-bit sum loads
//    8 inputs per vector (sum_functor: vt0 4, input_vec_size 8); the rest use vt0 = input_vec_size = 4.
//  - max, min without indices (max_all, amax): the accumulator is the element type (max_values_kernel).
//  - argmax, argmin, max/min along a dim: thrust::pair<value, int64_t>, 16 bytes for every bytegrad dtype.
//  - norm (linalg_vector_norm, ord 2: NormTwoOps; ord 1: NormOneOps; ord inf: AbsMaxOps): accumulates in
//    float for half, bfloat16 and float, double for double; vt0 = input_vec_size = 4, as sum.
//  - var, std (std_var_kernel_impl: WelfordOps): WelfordData<acc, int32> {mean, m2, n, nf}, 16 bytes for
//    a float accumulator and 32 (padded) for double; unrolled by 2 (vt0 = input_vec_size = 2, "to lower
//    register usage").
ReduceKernelTraits kernel_traits(ReduceOp op, ScalarType in, bool with_indices) {
  ReduceKernelTraits traits;
  const int element = static_cast<int>(element_size(in));
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
    case ReduceOp::prod:
      traits.accumulator_size = element == 8 ? 8 : 4;
      if (op == ReduceOp::sum && element == 2) traits.input_vec_size = 8;
      break;
    case ReduceOp::max:
    case ReduceOp::min: traits.accumulator_size = with_indices ? 16 : element; break;
    case ReduceOp::argmax:
    case ReduceOp::argmin: traits.accumulator_size = 16; break;
    case ReduceOp::norm:
    case ReduceOp::norm_one:
    case ReduceOp::norm_inf: traits.accumulator_size = element == 8 ? 8 : 4; break;
    case ReduceOp::var:
    case ReduceOp::std:
      traits.accumulator_size = element == 8 ? 32 : 16;
      traits.vt0 = 2;
      traits.input_vec_size = 2;
      break;
  }
  return traits;
}

// make_reduction_from_out_ty (sum, prod) and make_reduction (linalg_vector_norm): the kernel reads
// self.to(in_dtype), in_dtype being the output's dtype except for a float16/bfloat16 input reduced into
// float32 on the GPU (gpu_lowp_to_f32), which the kernel reads as it is (sum_functor<BFloat16, float, float>:
// the cast happens in registers). So an integer or bool sum/prod reduces an int64 copy of its input, and
// sum(x, dtype=...) / norm(x, dtype=...) a copy in that dtype unless it is gpu_lowp_to_f32 (autocast's
// float32 sums of bfloat16 inputs copy nothing). The copy is Tensor.to's (x's strides when x is
// non-overlapping and dense, else contiguous), allocated after the output and freed when the op returns.
// Measured for sum (8000 bytes for 1000 int32 elements); prod and norm take the same path in PyTorch's
// source. On cpu the kernel converts as it reads, except into an integral output from a floating input,
// which needs the per-element conversion the copy makes.
Tensor reduction_input(ReduceOp op, const Tensor& in, const Tensor& out) {
  if (op != ReduceOp::sum && op != ReduceOp::prod && op != ReduceOp::norm && op != ReduceOp::norm_one &&
      op != ReduceOp::norm_inf)
    return in;
  if (in.dtype() == out.dtype()) return in;
  if (in.device().type == DeviceType::cpu) {
    if (!is_floating_point(in.dtype()) || is_floating_point(out.dtype())) return in;
  } else {
    const bool gpu_lowp_to_f32 =
        (in.dtype() == ScalarType::float16 || in.dtype() == ScalarType::bfloat16) && out.dtype() == ScalarType::float32;
    if (gpu_lowp_to_f32) return in;
  }
  const TensorOptions options{out.dtype(), in.device()};
  Tensor cast =
      is_non_overlapping_and_dense(in) ? empty_strided(in.sizes(), in.strides(), options) : empty(in.sizes(), options);
  backend_of(in).copy(kv(cast), kv(in));
  return cast;
}

struct ScratchBlocks {
  Storage buffer;
  Storage semaphores;
  ~ScratchBlocks() {  // PyTorch's DataPtrs die in reverse order: the semaphores first
    semaphores.reset();
    buffer.reset();
  }
};

void allocate_scratch(ScratchBlocks& blocks, ReduceOp op, const Tensor& out, const Tensor& in, bool with_indices) {
  if (in.device().type == DeviceType::cpu) return;
  ReduceIterGeometry geometry;
  geometry.input_sizes = in.sizes();
  geometry.input_strides = in.strides();
  geometry.input_element_size = static_cast<int>(element_size(in.dtype()));
  geometry.input_offset = in.storage_offset();
  geometry.output_sizes = out.sizes();
  geometry.output_strides = out.strides();
  geometry.output_element_size = static_cast<int>(element_size(out.dtype()));
  const DeviceLaunchLimits limits = device_launch_limits(in.device());
  const ReduceScratch scratch = reduce_scratch(geometry, kernel_traits(op, in.dtype(), with_indices),
                                               {limits.multiprocessor_count, limits.max_threads_per_multiprocessor});
  if (!scratch.global()) return;
  AllocationScope scope("scratch");
  blocks.buffer = std::make_shared<StorageImpl>(static_cast<size_t>(scratch.buffer_bytes), in.device());
  blocks.semaphores = std::make_shared<StorageImpl>(static_cast<size_t>(scratch.semaphore_bytes), in.device());
}

}  // namespace

void run_reduction(ReduceOp op, const Tensor& out, const Tensor& in, double correction) {
  const Tensor input = reduction_input(op, in, out);
  ScratchBlocks scratch;
  allocate_scratch(scratch, op, out, input, false);
  if (op == ReduceOp::var || op == ReduceOp::std)
    backend_of(input).reduce_variance(kv(out), kv(input), correction, op == ReduceOp::std);
  else backend_of(input).reduce(op, kv(out), kv(input));
}

void run_reduction_with_indices(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in,
                                int64_t dim) {
  ScratchBlocks scratch;
  allocate_scratch(scratch, op, values, in, true);
  backend_of(in).reduce_with_indices(op, kv(values), kv(indices), kv(in), dim);
}

}  // namespace bytegrad::ops_detail
