// Matrix products, following PyTorch 2.11's CUDA implementation allocation for allocation:
//  - the output is allocated first (contiguous);
//  - an operand cuBLAS cannot read in place is copied to a contiguous temporary by the plan (blas_plan.h:
//    PyTorch's prepare_matrix_for_cublas / prepare_batch_matrix_for_cublas), freed when the op returns;
//  - then the BLAS workspace is obtained (allocated on this thread's first product on the device; none on
//    cpu), plus the cuBLASLt block for addmm with a fusable bias;
//  - empty products return (or zero-fill) before any of that, as PyTorch does.
// matmul is at::native::_matmul_impl: the unsqueeze/squeeze rules, folding a batched operand into one mm
// when its batch dimensions can be viewed as rows, and otherwise expand + reshape (a copy exactly when
// reshape must copy) + bmm, whose output is viewed back to the batch shape.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/blas_plan.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, b);
  check_same_dtype(op, a, b);
  if (a.dtype() == ScalarType::bool_)
    throw std::invalid_argument(
        fmt::format("{}: bool operands are not supported: {} and {}", op, describe(a), describe(b)));
  check_blas_settings(a.device());  // before the result (or a workspace) is allocated
}

void check_inner_sizes(const char* op, const Tensor& a, const Tensor& b, int64_t a_inner, int64_t b_inner) {
  if (a_inner != b_inner)
    throw std::invalid_argument(fmt::format("{}: the shapes of {} and {} cannot be multiplied ({} vs {})", op,
                                            describe(a), describe(b), a_inner, b_inner));
}

// The product as planned (copies, then the workspace), computed.
void run_product(GemmPlan plan) {
  plan.attach_workspace();
  plan.run();
}

// Computes the product into `out` (the plan made by plan_for(out)): nothing for no elements, zeros for an empty
// inner dimension (no BLAS call).
template <typename PlanFor>
Tensor product_into(Tensor out, int64_t inner, PlanFor&& plan_for) {
  if (out.numel() == 0) return out;
  if (inner == 0) {
    out.zero_();
    return out;
  }
  run_product(plan_for(out));
  return out;
}

Tensor mm_compute(const Tensor& a, const Tensor& b) {
  check_operands("mm", a, b);
  if (a.dim() != 2 || b.dim() != 2)
    throw std::invalid_argument(fmt::format("mm: expected 2-d operands, got {} and {}", describe(a), describe(b)));
  check_inner_sizes("mm", a, b, a.sizes()[1], b.sizes()[0]);
  return product_into(empty({a.sizes()[0], b.sizes()[1]}, TensorOptions{a.dtype(), a.device()}), a.sizes()[1],
                      [&](const Tensor& out) { return GemmPlan::matrix(out, a, b, 1.0, 0.0); });
}

Tensor bmm_compute(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, b);
  if (a.dim() != 3 || b.dim() != 3)
    throw std::invalid_argument(fmt::format("bmm: expected 3-d operands, got {} and {}", describe(a), describe(b)));
  if (a.sizes()[0] != b.sizes()[0])
    throw std::invalid_argument(fmt::format("bmm: batch sizes differ: {} and {}", describe(a), describe(b)));
  check_inner_sizes("bmm", a, b, a.sizes()[2], b.sizes()[1]);
  const int64_t batch = a.sizes()[0], rows = a.sizes()[1], cols = b.sizes()[2];
  return product_into(empty({batch, rows, cols}, TensorOptions{a.dtype(), a.device()}), a.sizes()[2],
                      [&](const Tensor& out) { return GemmPlan::batched(out, a, b, 1.0, 0.0); });
}

Tensor dot_compute(const Tensor& a, const Tensor& b) {
  check_operands("dot", a, b);
  if (a.dim() != 1 || b.dim() != 1)
    throw std::invalid_argument(fmt::format("dot: expected 1-d operands, got {} and {}", describe(a), describe(b)));
  check_inner_sizes("dot", a, b, a.sizes()[0], b.sizes()[0]);
  const int64_t n = a.sizes()[0];
  // A row times a column, which the matrix rule reads in place for any nonzero stride (as PyTorch's
  // cublasSdot); a broadcast vector (stride 0) is copied, as no leading dimension can be 0.
  return product_into(empty({}, TensorOptions{a.dtype(), a.device()}), n, [&](const Tensor& out) {
    return GemmPlan::matrix(out.as_strided({1, 1}, {1, 1}, out.storage_offset()),
                            a.as_strided({1, n}, {1, a.strides()[0]}, a.storage_offset()),
                            b.as_strided({n, 1}, {b.strides()[0], 1}, b.storage_offset()), 1.0, 0.0);
  });
}

Tensor mv_compute(const Tensor& m, const Tensor& v) {
  check_operands("mv", m, v);
  if (m.dim() != 2 || v.dim() != 1)
    throw std::invalid_argument(
        fmt::format("mv: expected a 2-d and a 1-d operand, got {} and {}", describe(m), describe(v)));
  check_inner_sizes("mv", m, v, m.sizes()[1], v.sizes()[0]);
  // addmv_out_cuda_impl copies a vector with stride 0, then a matrix with neither layout: what the matrix
  // rule does with (M, 1) = m @ v (K, 1), the vector first as the result is transposed for cuBLAS.
  return product_into(
      empty({m.sizes()[0]}, TensorOptions{m.dtype(), m.device()}), m.sizes()[1],
      [&](const Tensor& out) { return GemmPlan::matrix(out.unsqueeze(1), m, v.unsqueeze(1), 1.0, 0.0); });
}

// The primitives record themselves around their computation (OpRecording: the operands they save are saved
// before the output is allocated); their internal copies and views are not part of the graph.
Tensor mm_impl(const Tensor& a, const Tensor& b) {
  return compute_recorded<OpId::mm>({a, b}, {}, [&] { return mm_compute(a, b); });
}

Tensor bmm_impl(const Tensor& a, const Tensor& b) {
  return compute_recorded<OpId::bmm>({a, b}, {}, [&] { return bmm_compute(a, b); });
}

Tensor dot_impl(const Tensor& a, const Tensor& b) {
  return compute_recorded<OpId::dot>({a, b}, {}, [&] { return dot_compute(a, b); });
}

Tensor mv_impl(const Tensor& m, const Tensor& v) {
  return compute_recorded<OpId::mv>({m, v}, {}, [&] { return mv_compute(m, v); });
}

// should_fold: a >= 3-d operand times a <= 2-d one becomes one mm when the big operand's batch dimensions
// can be viewed as rows without copying.
bool should_fold(const Tensor& tensor1, const Tensor& tensor2) {
  const bool tensor1_larger = tensor1.dim() >= tensor2.dim();
  const Tensor t1 = tensor1_larger ? tensor1 : tensor2.transpose(-1, -2);
  const int64_t dim_t1 = t1.dim();
  const int64_t dim_t2 = tensor1_larger ? tensor2.dim() : tensor1.dim();
  if (!(dim_t1 >= 3 && dim_t2 <= 2)) return false;
  if (tensor_requires_grad(tensor1_larger ? tensor2 : tensor1)) return true;  // PyTorch asks even under no_grad
  if (tensor1.dim() == 2) return false;  // folding would need a transposed copy of the result
  if (t1.numel() == 0) return true;
  for (int64_t i = 0; i < dim_t1 - 2; ++i)
    if (t1.strides()[i] != t1.strides()[i + 1] * t1.sizes()[i + 1]) return false;
  return true;
}

Tensor matmul_impl(const Tensor& tensor1, const Tensor& tensor2) {
  check_operands("matmul", tensor1, tensor2);
  const int64_t dim1 = tensor1.dim(), dim2 = tensor2.dim();
  if (dim1 == 0 || dim2 == 0)
    throw std::invalid_argument(fmt::format("matmul: both operands need at least one dimension, got {} and {}",
                                            describe(tensor1), describe(tensor2)));
  if (dim1 == 1 && dim2 == 1) return dot_impl(tensor1, tensor2);
  if (dim1 == 2 && dim2 == 1) return mv_impl(tensor1, tensor2);
  if (dim1 == 1 && dim2 == 2) return mm_impl(tensor1.unsqueeze(0), tensor2).squeeze(0);
  if (dim1 == 2 && dim2 == 2) return mm_impl(tensor1, tensor2);

  if (should_fold(tensor1, tensor2)) {
    const bool transpose = dim2 > dim1;
    const Tensor t1 = transpose ? tensor2.transpose(-1, -2) : tensor1;
    const Tensor t2 = !transpose ? tensor2 : (dim1 == 2 ? tensor1.t() : tensor1);
    Shape output_shape(t1.sizes().begin(), t1.sizes().end() - 1);
    const int64_t folded_rows = shape_numel(output_shape);
    const bool t2_is_matrix = t2.dim() == 2;
    if (t2_is_matrix) output_shape.push_back(t2.sizes()[1]);
    const Tensor t1_folded = t1.reshape({folded_rows, t1.sizes().back()});
    if (t2_is_matrix) {
      Tensor output = mm_impl(t1_folded, t2).view(output_shape);
      return transpose ? output.transpose(-1, -2).contiguous() : output;
    }
    return mv_impl(t1_folded, t2).view(output_shape);
  }

  // Batched: broadcast the batch dimensions, flatten them, one bmm, view the result back.
  const int64_t n = dim1 > 1 ? tensor1.sizes()[dim1 - 2] : 1;
  const int64_t m1 = tensor1.sizes().back();
  const Shape batch1(tensor1.sizes().begin(), tensor1.sizes().begin() + std::max<int64_t>(dim1 - 2, 0));
  const int64_t m2 = dim2 > 1 ? tensor2.sizes()[dim2 - 2] : tensor2.sizes()[0];
  const int64_t p = dim2 > 1 ? tensor2.sizes().back() : 1;
  const Shape batch2(tensor2.sizes().begin(), tensor2.sizes().begin() + std::max<int64_t>(dim2 - 2, 0));
  check_inner_sizes("matmul", tensor1, tensor2, m1, m2);
  Shape output_shape;
  try {
    output_shape = broadcast_shapes("matmul", batch1, batch2);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(fmt::format("matmul: the batch dimensions of {} and {} cannot be broadcast",
                                            describe(tensor1), describe(tensor2)));
  }
  const int64_t batch_product = shape_numel(output_shape);

  Shape tensor1_expand_size = output_shape;
  tensor1_expand_size.insert(tensor1_expand_size.end(), {n, m1});
  const Tensor tensor1_expanded = tensor1.expand(tensor1_expand_size).reshape({batch_product, n, m1});
  const bool vector_rhs = dim2 == 1;
  Shape tensor2_expand_size = output_shape;
  if (vector_rhs) tensor2_expand_size.push_back(m2);
  else tensor2_expand_size.insert(tensor2_expand_size.end(), {m2, p});
  Tensor tensor2_expanded = tensor2.expand(tensor2_expand_size);
  tensor2_expanded = vector_rhs ? tensor2_expanded.reshape({batch_product, m2}).unsqueeze(2)
                                : tensor2_expanded.reshape({batch_product, m2, p});
  if (dim1 > 1) output_shape.push_back(n);
  if (dim2 > 1) output_shape.push_back(p);
  Tensor product = bmm_impl(tensor1_expanded, tensor2_expanded);
  if (vector_rhs) product = product.squeeze(-1);
  return product.view(output_shape);
}

// isInputCompliesAddmmCudaLt: the bias is fused in cuBLASLt's epilogue (and the Lt workspace used) for a
// contiguous 1-d bias of the output's width, beta 1, floating types, and no dimension of 1.
bool uses_lt_bias_epilogue(const Tensor& bias, const Tensor& a, const Tensor& b, double beta) {
  return beta == 1.0 && bias.dim() == 1 && bias.sizes()[0] == b.sizes()[1] && bias.is_contiguous() &&
         is_floating_point(a.dtype()) && a.sizes()[0] > 1 && a.sizes()[1] > 1 && b.sizes()[0] > 1 && b.sizes()[1] > 1;
}

Tensor addmm_compute(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  check_operands("addmm", a, b);
  check_same_device("addmm", bias, a);
  check_same_dtype("addmm", bias, a);
  if (a.dim() != 2 || b.dim() != 2)
    throw std::invalid_argument(fmt::format("addmm: expected 2-d matrices, got {} and {}", describe(a), describe(b)));
  check_inner_sizes("addmm", a, b, a.sizes()[1], b.sizes()[0]);
  const Shape out_shape{a.sizes()[0], b.sizes()[1]};
  if (broadcast_shapes("addmm", bias.sizes(), out_shape) != out_shape)
    throw std::invalid_argument(fmt::format("addmm: the bias {} cannot be broadcast to the product's shape {}",
                                            describe(bias), shape_str(out_shape)));
  const bool lt = uses_lt_bias_epilogue(bias, a, b, beta);
  Tensor out = empty(out_shape, TensorOptions{a.dtype(), a.device()});
  const Tensor bias_expanded = bias.expand(out_shape);
  // Without the Lt epilogue PyTorch copies the bias into the result first and lets GEMM scale it by beta.
  if (!lt && beta != 0.0) backend_of(out).copy(kv(out), kv(bias_expanded));
  if (out.numel() == 0) return out;
  if (a.sizes()[1] == 0) {
    if (beta == 0.0) out.zero_();
    else backend_of(out).binary_scalar(BinaryOp::mul, kv(out), kv(bias_expanded), beta, false);
    return out;
  }
  GemmPlan plan = GemmPlan::matrix(out, a, b, alpha, beta == 0.0 ? 0.0 : beta);
  plan.attach_workspace();
  if (lt) {
    // The epilogue adds the bias: out = alpha * a @ b + bias (where the plan cannot take it, the bias is
    // copied into the output and added with beta 1, which computes the same).
    const BlasWorkspace lt_workspace = blas_lt_workspace(out.device());
    if (!plan.fuse_bias(bias, lt_workspace.data, lt_workspace.bytes)) backend_of(out).copy(kv(out), kv(bias_expanded));
  }
  plan.run();
  return out;
}

Tensor addmm_impl(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  return compute_recorded<OpId::addmm>({bias, a, b}, {beta, alpha},
                                       [&] { return addmm_compute(bias, a, b, beta, alpha); });
}

}  // namespace

// A matrix product's public function: autocast's cast for the op (policy), the allocation scope named after
// it, then its recorded computation (op##_impl).
#define BYTEGRAD_MATRIX_PRODUCT(policy, op, ...) \
  BYTEGRAD_AUTOCAST(policy, op, __VA_ARGS__);    \
  AllocationScope scope(#op);                    \
  return op##_impl(__VA_ARGS__)

Tensor mm(const Tensor& a, const Tensor& b) { BYTEGRAD_MATRIX_PRODUCT(lower_precision_fp, mm, a, b); }

Tensor bmm(const Tensor& a, const Tensor& b) { BYTEGRAD_MATRIX_PRODUCT(lower_precision_fp, bmm, a, b); }

Tensor mv(const Tensor& m, const Tensor& v) { BYTEGRAD_MATRIX_PRODUCT(lower_precision_fp, mv, m, v); }

Tensor dot(const Tensor& a, const Tensor& b) { BYTEGRAD_MATRIX_PRODUCT(promote, dot, a, b); }

Tensor matmul(const Tensor& a, const Tensor& b) { BYTEGRAD_MATRIX_PRODUCT(lower_precision_fp, matmul, a, b); }

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  BYTEGRAD_MATRIX_PRODUCT(lower_precision_fp, addmm, bias, a, b, beta, alpha);
}
#undef BYTEGRAD_MATRIX_PRODUCT

// at::native::linear: both operands at least 1-d; addmm for 2-d input with a bias; a contiguous input with a 1-d bias
// (or any 3-d contiguous input) is flattened to rows, fed to addmm and viewed back; otherwise matmul(x, w.t()) and the
// bias added in place.
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  BYTEGRAD_AUTOCAST(lower_precision_fp, linear, x, weight, bias);
  AllocationScope scope("linear");
  check_same_device("linear", x, weight);
  if (x.dim() == 0 || weight.dim() == 0)
    throw std::invalid_argument(fmt::format(
        "linear: both arguments to linear need to be at least 1D, but they are {}D and {}D (input {}, weight {})",
        x.dim(), weight.dim(), describe(x), describe(weight)));
  // A 1-d weight (in_features) is its own transpose: matmul reduces x's last dimension against it, as
  // PyTorch's; with a bias, the addmm paths below refuse it as PyTorch's do.
  if (weight.dim() > 2)
    throw std::invalid_argument(fmt::format("linear: the weight {} must be 1-d or 2-d", describe(weight)));
  if (bias && x.dim() == 2) return addmm_impl(*bias, x, weight.t(), 1.0, 1.0);
  if (bias && x.dim() >= 1 && x.is_contiguous() && (x.dim() == 3 || bias->dim() == 1)) {
    Shape rows_shape(x.sizes().begin(), x.sizes().end() - 1);
    const Tensor flat = x.reshape({shape_numel(rows_shape), x.sizes().back()});
    const Tensor result = addmm_impl(*bias, flat, weight.t(), 1.0, 1.0);
    rows_shape.push_back(result.sizes()[1]);
    return result.view(rows_shape);
  }
  Tensor output = matmul_impl(x, weight.t());
  if (bias) output.add_(*bias);
  return output;
}

// PyTorch: a.reshape({-1, 1}) * b, one elementwise output and no BLAS.
Tensor outer(const Tensor& a, const Tensor& b) {
  AllocationScope scope("outer");
  if (a.dim() != 1 || b.dim() != 1)
    throw std::invalid_argument(fmt::format("outer: expected 1-d operands, got {} and {}", describe(a), describe(b)));
  return mul(a.reshape({-1, 1}), b);
}

Tensor Tensor::matmul(const Tensor& other) const { return bytegrad::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return bytegrad::mm(*this, other); }
Tensor Tensor::bmm(const Tensor& other) const { return bytegrad::bmm(*this, other); }

}  // namespace bytegrad
