// Internal helpers shared by the ops_*.cpp files: operand checks with messages naming both operands,
// broadcasting, and PyTorch's rule for the memory layout of an elementwise result.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "bytegrad/tensor/device_backend.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/memory_overlap.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::ops_detail {

inline KernelBackend& backend_of(const Tensor& t) { return backend_for(t.device()); }
inline StridedView kv(const Tensor& t) { return t.view_for_kernels(); }

void check_defined(const char* op, const Tensor& t);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& t);
// The op table's dtype rule for an operand (core/op_table.h); `name` is the op as the user called it.
void check_dtype_rule(const char* name, DtypeRule rule, const Tensor& t);
inline void check_dtype_rule(const char* name, OpId op, const Tensor& t) {
  check_dtype_rule(name, op_info(op).dtypes, t);
}
// The rule for a two-operand op, checked on the type it computes in: `common`, the operands' result type.
// Operands of one dtype are checked (and named in the message) as above; operands of two dtypes are named
// with the type they promote to.
void check_dtype_rule(const char* name, DtypeRule rule, const Tensor& a, const Tensor& b, ScalarType common);
// An in-place (or out=) op's result of type `common` may be written into `self` (PyTorch's canCast: no
// floating into integral, nothing but bool into bool); else std::invalid_argument naming the op, both
// operands and both types. Called before anything is written.
void check_can_cast_to_self(const char* name, ScalarType common, const Tensor& self, const Tensor& other);

// PyTorch's Tensor.to(dtype) (_to_copy with memory_format=preserve) without autograd: a new tensor of
// `dtype` with t's strides when t is non-overlapping and dense, else contiguous, holding t's values
// converted. One allocation of numel * element_size(dtype), tagged "to". t itself when it has that dtype.
Tensor to_dtype_preserving_strides(const Tensor& t, ScalarType dtype);

// TensorOptions::requires_grad: the setter to call on the new tensor (null when not asked for). Throws,
// before anything is allocated, for a dtype that cannot require grad or when autograd is not linked.
RequiresGradSetter requires_grad_setter_for(const TensorOptions& options);

// The broadcast of two shapes; throws naming the op and both operands.
Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b);
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// PyTorch's is_non_overlapping_and_dense: some permutation of the tensor is contiguous.
bool is_non_overlapping_and_dense(const Tensor& t);

// Tensor::to(dtype): PyTorch's _to_copy output (allocated, recorded for autograd), its elements written by
// `write` (the whole conversion; nll_loss under autocast writes only the elements it reads).
Tensor to_dtype_written_by(const Tensor& self, ScalarType target, const std::function<void(const Tensor&)>& write);

// zeros()'s allocation (its scope name, its note of host work) without the fill: for an op that, in
// eager's place, writes the tensor another way (nll_loss_backward's packed rows, gradient_reader.h).
Tensor zeros_unfilled(const Shape& sizes, TensorOptions options);

// The strides TensorIterator gives a new elementwise output of `sizes` computed from `inputs`: contiguous
// when all inputs are; the inputs' strides when they all share one dense layout; otherwise the inputs'
// dimension order (sorted by stride, broadcast dimensions ignored) made contiguous.
Shape elementwise_output_strides(const Shape& sizes, std::initializer_list<const Tensor*> inputs);
Tensor empty_elementwise_output(const Shape& sizes, ScalarType dtype, Device device,
                                std::initializer_list<const Tensor*> inputs);

// A TensorIterator reduction (sum, mean, prod, max, min, amax, argmax, ...) as PyTorch's CUDA kernel runs
// it, on every device: `out` (and `indices`) have `in`'s rank with size 1 at each reduced dimension, and
// are already allocated, as PyTorch's outputs are. On cuda, sim and meta this then makes the allocations
// PyTorch's kernel makes (kernels/reduce_scratch.h): for a sum, prod or norm whose output dtype differs from
// the input's, the copy of the input that make_reduction(_from_out_ty) casts to (an integer or bool sum's
// int64 copy; none for a float16/bfloat16 input reduced into float32); when the launch splits outputs across
// blocks, a staging buffer and a semaphore block (tagged "scratch"). They are freed, semaphores first, before this
// returns. `dim` >= 0 selects reduce_with_indices (max/min along dim). var/std use `correction` (the divisor is n -
// correction) and run through the backend's reduce_variance.
void run_reduction(ReduceOp op, const Tensor& out, const Tensor& in, double correction = 1.0);
void run_reduction_with_indices(ReduceOp op, const Tensor& values, const Tensor& indices, const Tensor& in,
                                int64_t dim);

// index_select without its own AllocationScope (embedding tags its allocations itself); `op` names the
// caller in errors.
Tensor index_select_impl(const Tensor& x, int64_t dim, const Tensor& index, const char* op = "index_select");

// Every value of the (int64 or int32) index must lie in [0, size): PyTorch's "index out of range in self".
// The index is read back to the host (no device memory) before any kernel runs; meta has no values to
// check. Throws std::out_of_range naming the op, the first bad index and the valid range.
void check_indices_in_range(const char* op, const Tensor& index, int64_t dim, int64_t size);

}  // namespace bytegrad::ops_detail
