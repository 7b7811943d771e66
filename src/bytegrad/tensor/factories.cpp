// Tensor factories: every one allocates exactly one block of numel * element_size bytes.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <stdexcept>

#include "bytegrad/core/checked_convert.h"
#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/host_work.h"
#include "bytegrad/tensor/ops_support.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

namespace ops_detail {

RequiresGradSetter requires_grad_setter_for(const TensorOptions& options) {
  if (!options.requires_grad) return nullptr;
  const ScalarType dtype = options.resolved_dtype();
  if (!is_floating_point(dtype))
    throw std::invalid_argument(
        fmt::format("Only Tensors of floating point dtype can require gradients (asked for "
                    "a {} tensor with requires_grad)",
                    scalar_type_name(dtype)));
  RequiresGradSetter setter = requires_grad_setter();
  if (!setter) throw std::logic_error("TensorOptions::requires_grad needs the autograd layer: link bytegrad_autograd");
  return setter;
}

}  // namespace ops_detail

Tensor empty_strided(const Shape& sizes, const Shape& strides, TensorOptions options) {
  check_shape("empty", sizes);
  if (sizes.size() != strides.size())
    throw std::invalid_argument(fmt::format("empty_strided: {} sizes but {} strides", sizes.size(), strides.size()));
  // Every factory allocates through here, so this is where requires_grad is honoured (the values written
  // afterwards go straight to the kernels, which autograd does not see). Checked before allocating, so a
  // refused request changes no memory figure.
  const RequiresGradSetter set_requires_grad = ops_detail::requires_grad_setter_for(options);
  const ScalarType dtype = options.resolved_dtype();
  const size_t bytes = storage_bytes_for("empty_strided", sizes, strides, 0, element_size(dtype));
  std::optional<AllocationScope> scope;  // a user's own empty() is named so; inside an op, the op's tag stands
  if (current_allocation_tag().empty()) scope.emplace("empty");
  auto impl = make_shared_recycled<TensorImpl>();
  impl->storage = make_shared_recycled<StorageImpl>(bytes, options.resolved_device());
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  Tensor out(std::move(impl));
  if (set_requires_grad) set_requires_grad(out);
  return out;
}

Tensor empty(const Shape& sizes, TensorOptions options) {
  check_shape("empty", sizes);
  return empty_strided(sizes, contiguous_strides(sizes), options);
}

Tensor full(const Shape& sizes, double value, TensorOptions options) {
  const double element = checked_convert(value, options.resolved_dtype(), "full");  // -1 into uint8 is 255
  AllocationScope scope(value == 0.0 ? "zeros" : value == 1.0 ? "ones" : "full");
  Tensor out = empty(sizes, options);
  backend_for(out.device()).fill(out.view_for_kernels(), element);
  note_host_parallel_for(out.device(), out.numel(), kElementwiseGrain);
  return out;
}

namespace ops_detail {

// full(sizes, 0)'s steps but the fill.
Tensor zeros_unfilled(const Shape& sizes, TensorOptions options) {
  AllocationScope scope("zeros");
  Tensor out = empty(sizes, options);
  note_host_parallel_for(out.device(), out.numel(), kElementwiseGrain);
  return out;
}

}  // namespace ops_detail

Tensor zeros(const Shape& sizes, TensorOptions options) { return full(sizes, 0.0, options); }
Tensor ones(const Shape& sizes, TensorOptions options) { return full(sizes, 1.0, options); }

Tensor arange(ArangeBound end, TensorOptions options) { return arange(0, end, 1, options); }

Tensor arange(ArangeBound start_bound, ArangeBound end_bound, ArangeBound step_bound, TensorOptions options) {
  double start = start_bound.value(), end = end_bound.value(), step = step_bound.value();
  // torch.arange's rule: integers everywhere give int64, any floating bound the default float32.
  if (!options.dtype)
    options.dtype = start_bound.integral() && end_bound.integral() && step_bound.integral() ? ScalarType::int64
                                                                                            : ScalarType::float32;
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw std::invalid_argument(fmt::format("arange: unsupported range: {} -> {} with step {}", start, end, step));
  const ScalarType dtype = options.resolved_dtype();
  if (is_integral(dtype, /*include_bool=*/false)) {
    // PyTorch computes an integer arange in int64 (its accumulate type): start, end and step are truncated
    // first, so arange(0, 2.5, int64) is [0, 1], not three values. Bounds beyond int64 are refused.
    for (double bound : {start, end, step}) checked_convert(bound, ScalarType::int64, "arange");
    start = std::trunc(start), end = std::trunc(end), step = std::trunc(step);
  }
  if (step == 0.0) throw std::invalid_argument("arange: step must be nonzero");
  if ((end - start) / step < 0)
    throw std::invalid_argument(
        fmt::format("arange: the range [{}, {}) with step {} has the wrong sign", start, end, step));
  const double steps = std::ceil((end - start) / step);
  if (!(steps < 0x1p63))
    throw std::length_error(
        fmt::format("arange: the range [{}, {}) with step {} has {} elements, more than int64 can "
                    "count",
                    start, end, step, steps));
  const auto count = static_cast<int64_t>(steps);
  // Every value written must fit the dtype (the first and the last are the extremes), negative ones into
  // uint8 included: the kernel computes them itself, so none is wrapped; bytegrad refuses instead.
  if (count > 0)
    for (double value : {start, start + static_cast<double>(count - 1) * step})
      if (overflows(value, dtype) || (dtype == ScalarType::uint8 && value < 0.0))
        throw std::invalid_argument(fmt::format("arange: value {} cannot be converted to type {} without overflow",
                                                value, scalar_type_name(dtype)));
  AllocationScope scope("arange");
  Tensor out = empty({count}, options);
  backend_for(out.device()).arange(out.view_for_kernels(), start, step);
  return out;
}

Tensor empty_like(const Tensor& t) { return empty(t.sizes(), TensorOptions{t.dtype(), t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), TensorOptions{t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), TensorOptions{t.dtype(), t.device()}); }
Tensor full_like(const Tensor& t, double value) { return full(t.sizes(), value, TensorOptions{t.dtype(), t.device()}); }

Tensor from_vector(const std::vector<double>& values, const Shape& sizes, TensorOptions options) {
  if (static_cast<int64_t>(values.size()) != shape_numel(sizes))
    throw std::invalid_argument(
        fmt::format("from_vector: {} values do not fill shape {}", values.size(), shape_str(sizes)));
  // Values for integer dtypes must fit (torch.tensor's rule; floating dtypes round, to inf beyond their
  // range): checked before allocating, fill_from_host checks again.
  if (!is_floating_point(options.resolved_dtype()))
    for (double value : values) checked_convert(value, options.resolved_dtype(), "tensor");
  AllocationScope scope("tensor");
  Tensor out = empty(sizes, options);
  fill_from_host(out, values);
  return out;
}

Tensor from_blob(const void* data, const Shape& sizes, TensorOptions options) {
  const ScalarType dtype = options.resolved_dtype();
  const int64_t numel = shape_numel(sizes);
  if (numel < 0) throw std::invalid_argument(fmt::format("from_blob: invalid shape {}", shape_str(sizes)));
  if (!data && numel != 0) throw std::invalid_argument("from_blob: the data pointer is null");
  const size_t nbytes = static_cast<size_t>(numel) * element_size(dtype);
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(data), data ? nbytes : 0);
  if (dtype == ScalarType::bool_)
    for (size_t i = 0; i < bytes.size(); ++i)
      if (bytes[i] != std::byte{0} && bytes[i] != std::byte{1})
        throw std::invalid_argument(
            fmt::format("from_blob: bool element {} is the byte {}, not 0 or 1", i, static_cast<int>(bytes[i])));
  AllocationScope scope("from_blob");
  const RequiresGradSetter set_requires_grad = ops_detail::requires_grad_setter_for(options);
  options.requires_grad = false;
  options.dtype = dtype;
  Tensor out = empty(sizes, options);
  if (!out.is_meta() && nbytes != 0) backend_for(out.device()).copy_from_host(out.view_for_kernels(), bytes);
  if (set_requires_grad) set_requires_grad(out);
  return out;
}

Tensor tensor(std::initializer_list<double> values, TensorOptions options) {
  return from_vector(std::vector<double>(values), {static_cast<int64_t>(values.size())}, options);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions options) {
  std::vector<double> values;
  const int64_t columns = rows.size() ? static_cast<int64_t>(rows.begin()->size()) : 0;
  for (const auto& row : rows) {
    if (static_cast<int64_t>(row.size()) != columns)
      throw std::invalid_argument(fmt::format("tensor: rows have different lengths ({} and {})", columns, row.size()));
    values.insert(values.end(), row.begin(), row.end());
  }
  return from_vector(values, {static_cast<int64_t>(rows.size()), columns}, options);
}

Tensor scalar_tensor(double value, TensorOptions options) { return from_vector({value}, {}, options); }

}  // namespace bytegrad
