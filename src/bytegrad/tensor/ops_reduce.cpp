// Reductions: one contiguous output (a 0-d 512-byte block for whole-tensor reductions); max/min over a
// dimension allocate values then indices. After the outputs come the allocations PyTorch's CUDA reduction
// makes (run_reduction in ops_support.h): a copy of a sum's, prod's or norm's input in the output's dtype
// when they differ (an integer sum's int64 copy; none for a float16/bfloat16 input reduced into float32),
// and the kernel's staging buffer and semaphores when it splits a reduction across thread blocks
// (kernels/reduce_scratch.h).
//
// sum, prod and norm are in PyTorch's autocast fp32_set_opt_dtype list (tensor/autocast.h): under autocast
// they run with dtype=float32 when given no dtype.
// Whole-tensor max/min reduce self.contiguous() and whole-tensor argmax/argmin self.reshape(-1), as
// PyTorch's do: a copy (freed on return) when the input is not already laid out that way.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

struct ReductionShapes {
  Shape kernel;  // input's rank, 1 at every reduced dimension
  Shape result;  // kernel without the reduced dimensions unless keepdim
};

// dims empty means every dimension.
ReductionShapes reduction_shapes(const char* op, const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), dims.empty());
  for (int64_t d : dims) {
    const int64_t wrapped = wrap_dim(d, x.dim(), op);
    if (x.dim() == 0) continue;
    if (reduced[wrapped])
      throw std::invalid_argument(
          fmt::format("{}: dimension {} appears more than once in {}", op, wrapped, shape_str(dims)));
    reduced[wrapped] = true;
  }
  ReductionShapes shapes;
  for (int64_t d = 0; d < x.dim(); ++d) {
    shapes.kernel.push_back(reduced[d] ? 1 : x.sizes()[d]);
    if (!reduced[d]) shapes.result.push_back(x.sizes()[d]);
    else if (keepdim) shapes.result.push_back(1);
  }
  return shapes;
}

// What a whole-tensor reduction reads (PyTorch's max()/min() pass self.contiguous(), argmax()/argmin()
// self.reshape(-1)); a copy, if one is needed, is made after the output, as there.
enum class WholeInput { as_is, contiguous, flattened };

// `dtype` (sum and prod only): the output's dtype, as PyTorch's dtype argument (infer_dtype_from_optional:
// the given dtype, else int64 for integer and bool inputs, else the input's).
Tensor reduce_op(const char* name, ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim,
                 WholeInput whole = WholeInput::as_is, std::optional<ScalarType> dtype = std::nullopt) {
  AllocationScope scope(name);
  check_defined(name, x);
  const bool extreme = op == ReduceOp::max || op == ReduceOp::min || op == ReduceOp::argmax || op == ReduceOp::argmin;
  if (op == ReduceOp::mean) check_dtype_rule(name, OpId::mean, x);
  if (extreme && x.numel() == 0) {
    // As PyTorch: refused when a reduced dimension is empty (or everything is reduced); reducing an empty
    // tensor over dimensions of non-zero size gives an empty result (amax(zeros({0, 3}), {1}) is [0]).
    bool reduces_empty = dims.empty() || x.dim() == 0;
    for (int64_t d : dims) reduces_empty = reduces_empty || x.sizes()[wrap_dim(d, x.dim(), name)] == 0;
    if (reduces_empty) throw std::invalid_argument(fmt::format("{}: {} has no elements to reduce", name, describe(x)));
  }
  ScalarType out_dtype = x.dtype();
  if ((op == ReduceOp::sum || op == ReduceOp::prod) && !is_floating_point(x.dtype())) out_dtype = ScalarType::int64;
  if (op == ReduceOp::argmax || op == ReduceOp::argmin) out_dtype = ScalarType::int64;
  if (dtype) out_dtype = *dtype;
  const ReductionShapes shapes = reduction_shapes(name, x, dims, keepdim);
  Tensor out = empty(shapes.result, TensorOptions{out_dtype, x.device()});
  if (whole == WholeInput::as_is || x.device().type == DeviceType::cpu) {
    run_reduction(op, out.view(shapes.kernel), x);
  } else {
    const Tensor input = whole == WholeInput::contiguous ? x.contiguous() : x.reshape({x.numel()});
    run_reduction(op, out.view(Shape(static_cast<size_t>(input.dim()), 1)), input);
  }
  return out;
}

ValuesIndices reduce_dim_with_indices(const char* name, ReduceOp op, const Tensor& x, int64_t dim, bool keepdim) {
  AllocationScope scope(name);
  check_defined(name, x);
  dim = wrap_dim(dim, x.dim(), name);
  if (x.dim() > 0 && x.sizes()[dim] == 0)
    throw std::invalid_argument(fmt::format("{}: dimension {} of {} is empty", name, dim, describe(x)));
  const ReductionShapes shapes = reduction_shapes(name, x, {dim}, keepdim);
  ValuesIndices result;
  result.values = empty(shapes.result, TensorOptions{x.dtype(), x.device()});
  result.indices = empty(shapes.result, TensorOptions{ScalarType::int64, x.device()});
  if (x.dim() == 0) {  // one element: itself, at index 0
    backend_of(x).copy(kv(result.values), kv(x));
    backend_of(x).fill(kv(result.indices), 0.0);
    return result;
  }
  run_reduction_with_indices(op, result.values.view(shapes.kernel), result.indices.view(shapes.kernel), x, dim);
  return result;
}

}  // namespace

namespace {

// sum and mean have gradients: recorded as sum/mean over everything (whole), or sum_dims/mean_dims. The
// other reductions with floating results are recorded too (no_grad rows), so differentiating them is a
// clear error rather than a silently missing gradient. `op` is the row for a whole reduction, `dims_op`
// the one with dims.
template <OpId op, OpId dims_op>
Tensor reduce_recorded(ReduceOp kernel, const Tensor& x, const Shape& dims, bool keepdim, bool whole,
                       WholeInput input = WholeInput::as_is, std::optional<ScalarType> dtype = std::nullopt) {
  const char* name = op_name(op).data();
  Tensor out = without_recording([&] { return reduce_op(name, kernel, x, dims, keepdim, input, dtype); });
  if (!is_floating_point(out.dtype())) return out;
  record_for_autograd({x}, [&] {
    if constexpr (std::is_same_v<ArgsOf<dims_op>, op_args::None>) {
      return make_record<op>({x}, {out});
    } else {
      if constexpr (op != dims_op) {
        if (whole) return make_record<op>({x}, {out});
      }
      op_args::Dims args{{}, keepdim};
      if (dims.empty()) {
        for (int64_t d = 0; d < x.dim(); ++d) args.dims.push_back(d);
      } else {
        for (int64_t d : dims) args.dims.push_back(wrap_dim(d, x.dim(), name));
      }
      return make_record<dims_op>({x}, {out}, std::move(args));
    }
  });
  return out;
}

}  // namespace

// Under autocast: PyTorch's sum / sum.dim_IntList with dtype=float32 filled in (fp32_set_opt_dtype). A
// float16/bfloat16 input is read as it is (no cast) into a float32 output; SumBackward0/1 then hand back a
// float32 gradient that the engine converts to the input's dtype.
Tensor sum(const Tensor& x, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, sum, x, dtype);
  return reduce_recorded<OpId::sum, OpId::sum_dims>(ReduceOp::sum, x, {}, false, true, WholeInput::as_is, dtype);
}
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, sum, x, dims, keepdim, dtype);
  // no dims: all of them, as sum(x, dim=[])
  return reduce_recorded<OpId::sum, OpId::sum_dims>(ReduceOp::sum, x, dims, keepdim, false, WholeInput::as_is, dtype);
}
Tensor mean(const Tensor& x) {
  return reduce_recorded<OpId::mean, OpId::mean_dims>(ReduceOp::mean, x, {}, false, true);
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_recorded<OpId::mean, OpId::mean_dims>(ReduceOp::mean, x, dims, keepdim, false);
}
// Under autocast: PyTorch's prod with dtype=float32 filled in (fp32_set_opt_dtype), as sum.
Tensor prod(const Tensor& x, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, prod, x, dtype);
  return reduce_recorded<OpId::prod, OpId::prod>(ReduceOp::prod, x, {}, false, true, WholeInput::as_is, dtype);
}
Tensor max(const Tensor& x) {
  return reduce_recorded<OpId::max, OpId::max>(ReduceOp::max, x, {}, false, true, WholeInput::contiguous);
}
Tensor min(const Tensor& x) {
  return reduce_recorded<OpId::min, OpId::min>(ReduceOp::min, x, {}, false, true, WholeInput::contiguous);
}
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_recorded<OpId::amax, OpId::amax>(ReduceOp::max, x, dims, keepdim, false);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return reduce_recorded<OpId::amin, OpId::amin>(ReduceOp::min, x, dims, keepdim, false);
}
Tensor argmax(const Tensor& x) { return reduce_op("argmax", ReduceOp::argmax, x, {}, false, WholeInput::flattened); }
Tensor argmin(const Tensor& x) { return reduce_op("argmin", ReduceOp::argmin, x, {}, false, WholeInput::flattened); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_op("argmax", ReduceOp::argmax, x, {dim}, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_op("argmin", ReduceOp::argmin, x, {dim}, keepdim);
}
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim_with_indices("max", ReduceOp::max, x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim_with_indices("min", ReduceOp::min, x, dim, keepdim);
}

// ------------------------------------------------------------------------------- norm, var, std
namespace {

// The dims a norm/var/std reduces, wrapped; empty when `whole` (every dimension, dim=None).
std::vector<int64_t> wrapped_dims(const char* name, const Tensor& x, const Shape& dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(wrap_dim(d, x.dim(), name));
  return out;
}

// PyTorch's linalg_vector_norm (ord 2). The meta function allocates the output in `dtype` (default: x's),
// after check_linalg_norm_dtype's checks. Then, when every reduced dimension has size 1 (or x is 0-d), the
// result is abs(self_) written into the output, self_ being x.to(dtype) (a copy after the output, freed on
// return, when dtype is given and differs from x's); otherwise a reduction (NormTwoOps) through
// run_reduction, whose make_reduction reads x as it is when a float16/bfloat16 x is reduced into float32 on
// the GPU, and a copy in the output's dtype otherwise (run_reduction makes it).
// ord 1 (NormOneOps) and inf (AbsMaxOps) take the same path with their own reduction.
Tensor norm_impl(const Tensor& x, const Shape& dims, bool keepdim, std::optional<ScalarType> dtype,
                 ReduceOp kernel = ReduceOp::norm) {
  const char* name = "norm";
  AllocationScope scope(name);
  check_defined(name, x);
  if (!is_floating_point(x.dtype()))
    throw std::invalid_argument(fmt::format(
        "norm: linalg.vector_norm expects a floating-point tensor, got {} (convert with .to(float32))", describe(x)));
  if (dtype && !is_floating_point(*dtype))
    throw std::invalid_argument(
        fmt::format("norm: linalg.vector_norm: dtype should be floating point, but got {}", scalar_type_name(*dtype)));
  if (dtype && promote_types(x.dtype(), *dtype) != *dtype)
    throw std::invalid_argument(fmt::format(
        "norm: linalg.vector_norm: the dtype of the input ({}) should be convertible without narrowing to the "
        "specified dtype ({})",
        scalar_type_name(x.dtype()), scalar_type_name(*dtype)));
  const ReductionShapes shapes = reduction_shapes(name, x, dims, keepdim);
  Tensor out = empty(shapes.result, TensorOptions{dtype.value_or(x.dtype()), x.device()});
  bool over_size_one = true;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (shapes.kernel[d] == 1 && x.sizes()[d] != 1) over_size_one = false;
  if (over_size_one && x.numel() > 0) {
    const Tensor self = dtype ? to_dtype_preserving_strides(x, *dtype) : x;
    backend_of(x).unary(UnaryOp::abs, kv(out.view(x.sizes())), kv(self));
  } else {
    run_reduction(kernel, out.view(shapes.kernel), x);
  }
  return out;
}

// PyTorch's std_var_out for real dtypes: one output, then the Welford reduction (an empty reduction fills
// NaN without a kernel, hence without scratch).
Tensor var_impl(const char* name, ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim, double correction) {
  AllocationScope scope(name);
  check_defined(name, x);
  if (!is_floating_point(x.dtype()))
    throw std::invalid_argument(fmt::format(
        "{}: {} only supports floating-point tensors, got {} (convert with .to(float32))", name, name, describe(x)));
  const ReductionShapes shapes = reduction_shapes(name, x, dims, keepdim);
  Tensor out = empty(shapes.result, TensorOptions{x.dtype(), x.device()});
  run_reduction(op, out.view(shapes.kernel), x, correction);
  return out;
}

// Recorded as norm (dims wrapped; none for dim=None) and var/std (with correction); the nodes save self
// (before computing) and result for norm and std (after), as derivatives.yaml.
Tensor norm_recorded(const Tensor& x, const Shape& dims, bool keepdim, bool whole, std::optional<ScalarType> dtype) {
  Shape wrapped = whole ? Shape{} : Shape(wrapped_dims("norm", x, dims));
  OpRecording recording = begin_recording<OpId::norm>({x}, {std::move(wrapped), keepdim});
  Tensor out = without_recording([&] { return norm_impl(x, dims, keepdim, dtype); });
  recording.finish({out});
  return out;
}

template <OpId op>
Tensor var_recorded(ReduceOp kernel, const Tensor& x, const Shape& dims, bool keepdim, bool whole, double correction) {
  const char* name = op_name(op).data();
  Shape wrapped = whole ? Shape{} : Shape(wrapped_dims(name, x, dims));
  OpRecording recording = begin_recording<op>({x}, {std::move(wrapped), keepdim, whole, correction});
  Tensor out = without_recording([&] { return var_impl(name, kernel, x, dims, keepdim, correction); });
  recording.finish({out});
  return out;
}

}  // namespace

// Under autocast: PyTorch's linalg_vector_norm with dtype=float32 filled in (fp32_set_opt_dtype), which is
// where Tensor.norm() and torch.norm() go for the 2-norm.
Tensor norm(const Tensor& x, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, norm, x, dtype);
  return norm_recorded(x, {}, false, true, dtype);
}
Tensor norm(const Tensor& x, const Shape& dims, bool keepdim, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, norm, x, dims, keepdim, dtype);
  return norm_recorded(x, dims, keepdim, dims.empty(), dtype);
}
// ord 2 is norm; ord 1 and inf are computed but have no derivative in bytegrad, so they are refused where a
// graph would be recorded (PyTorch records LinalgVectorNormBackward0 for every ord).
Tensor vector_norm(const Tensor& x, double ord, const Shape& dims, bool keepdim, std::optional<ScalarType> dtype) {
  if (ord == 2.0) return norm(x, dims, keepdim, dtype);
  const bool inf = ord == std::numeric_limits<double>::infinity();
  if (!inf && ord != 1.0)
    throw std::invalid_argument(
        fmt::format("vector_norm: ord={} is not supported by bytegrad (ord 1, 2 and inf are)", ord));
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, vector_norm, x, ord, dims, keepdim, dtype);
  check_defined("vector_norm", x);
  if (AutogradHook* hook = autograd_hook(); hook && !autograd_recording_paused() && hook->needs_graph({x}))
    throw std::invalid_argument(fmt::format(
        "vector_norm: ord={} has no gradient in bytegrad (only ord 2 does); {} requires grad: compute it under "
        "a NoGradGuard or on x.detach()",
        ord, describe(x)));
  if (inf && x.numel() == 0)
    throw std::invalid_argument(
        fmt::format("vector_norm: cannot compute the inf norm of {}: the reduction has no identity", describe(x)));
  return norm_impl(x, dims, keepdim, dtype, inf ? ReduceOp::norm_inf : ReduceOp::norm_one);
}

Tensor var(const Tensor& x) { return var_recorded<OpId::var>(ReduceOp::var, x, {}, false, true, 1.0); }
Tensor var(const Tensor& x, const Shape& dims, bool keepdim, double correction) {
  return var_recorded<OpId::var>(ReduceOp::var, x, dims, keepdim, dims.empty(), correction);
}
Tensor std(const Tensor& x) { return var_recorded<OpId::std>(ReduceOp::std, x, {}, false, true, 1.0); }
Tensor std(const Tensor& x, const Shape& dims, bool keepdim, double correction) {
  return var_recorded<OpId::std>(ReduceOp::std, x, dims, keepdim, dims.empty(), correction);
}

Tensor Tensor::norm(std::optional<ScalarType> dtype) const { return bytegrad::norm(*this, dtype); }
Tensor Tensor::norm(const Shape& dims, bool keepdim, std::optional<ScalarType> dtype) const {
  return bytegrad::norm(*this, dims, keepdim, dtype);
}
Tensor Tensor::var() const { return bytegrad::var(*this); }
Tensor Tensor::var(const Shape& dims, bool keepdim, double correction) const {
  return bytegrad::var(*this, dims, keepdim, correction);
}
Tensor Tensor::std() const { return bytegrad::std(*this); }
Tensor Tensor::std(const Shape& dims, bool keepdim, double correction) const {
  return bytegrad::std(*this, dims, keepdim, correction);
}

Tensor Tensor::sum(std::optional<ScalarType> dtype) const { return bytegrad::sum(*this, dtype); }
Tensor Tensor::sum(const Shape& dims, bool keepdim, std::optional<ScalarType> dtype) const {
  return bytegrad::sum(*this, dims, keepdim, dtype);
}
Tensor Tensor::mean() const { return bytegrad::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return bytegrad::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return bytegrad::max(*this); }
Tensor Tensor::min() const { return bytegrad::min(*this); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const { return bytegrad::max(*this, dim, keepdim); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const { return bytegrad::min(*this, dim, keepdim); }
Tensor Tensor::argmax() const { return bytegrad::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return bytegrad::argmax(*this, dim, keepdim); }

}  // namespace bytegrad
