// Layer normalization, allocating what PyTorch 2.11's CUDA layer_norm allocates (aten/src/ATen/native/cuda/
// layer_norm_kernel.cu): forward output, mean, rstd; backward grad_input, grad_weight, grad_bias, and for
// tall inputs with short rows the partial-sum blocks its gamma/beta kernel reduces with sum(0). RMS
// normalization (_fused_rms_norm) runs the same kernels without a mean, as PyTorch's does, and allocates
// the same way less the mean and the bias gradient.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

// The accumulation dtype of mean and rstd (PyTorch's toAccumulateType(dtype, is_cuda=true)).
ScalarType stat_dtype(ScalarType input) {
  return input == ScalarType::float64 ? ScalarType::float64 : ScalarType::float32;
}

struct RowsCols {
  int64_t M, N;
};

// PyTorch's _check_layer_norm_inputs, with its wording, plus bytegrad's dtype/device rules.
RowsCols check_inputs(const char* op, const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias) {
  check_defined(op, input);
  check_dtype_rule(op, OpId::native_layer_norm, input);
  if (normalized_shape.empty())
    throw std::invalid_argument(
        fmt::format("{}: expected normalized_shape to be at least 1-dimensional, i.e., "
                    "containing at least one element, but got normalized_shape = []",
                    op));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"weight", &weight}, {"bias", &bias}}) {
    if (!t->defined()) continue;
    if (t->sizes() != normalized_shape)
      throw std::invalid_argument(
          fmt::format("{}: expected {} to be of same shape as normalized_shape, but got {} "
                      "of shape {} and normalized_shape = {}",
                      op, name, name, shape_str(t->sizes()), shape_str(normalized_shape)));
    check_same_device(op, input, *t);
    check_same_dtype(op, input, *t);
  }
  const int64_t ndim = input.dim(), nd = static_cast<int64_t>(normalized_shape.size());
  bool matches = ndim >= nd;
  for (int64_t i = 0; matches && i < nd; ++i) matches = input.sizes()[ndim - nd + i] == normalized_shape[i];
  if (!matches) {
    std::string expected = "[*";
    for (int64_t s : normalized_shape) expected += fmt::format(", {}", s);
    expected += "]";
    throw std::invalid_argument(
        fmt::format("{}: given normalized_shape={}, expected input with shape {}, but got "
                    "input of size {}",
                    op, shape_str(normalized_shape), expected, shape_str(input.sizes())));
  }
  const int64_t axis = ndim - nd;
  int64_t M = 1, N = 1;
  for (int64_t i = 0; i < ndim; ++i) (i < axis ? M : N) *= input.sizes()[i];
  return {M, N};
}

Tensor value_or_undefined(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }

// The (M, N) / (N) / (M) views the kernels take.
StridedView rows_view(const Tensor& t, int64_t M, int64_t N) { return kv(t.view({M, N})); }
StridedView flat_view(const Tensor& t) { return kv(t.view({t.numel()})); }

Shape stat_shape_of(const Tensor& input, const Shape& normalized_shape);

LayerNormResult layer_norm_compute(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                                   const Tensor& bias, double eps) {
  AllocationScope scope("native_layer_norm");
  const auto [M, N] = check_inputs("native_layer_norm", input, normalized_shape, weight, bias);
  // expect_contiguous: copies (freed on return) only where an operand is not contiguous.
  const Tensor X = input.contiguous();
  const Tensor gamma = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor beta = bias.defined() ? bias.contiguous() : Tensor();
  const TensorOptions stats{stat_dtype(input.dtype()), input.device()};
  Tensor Y = empty(X.sizes(), TensorOptions{X.dtype(), X.device()});
  Tensor mean = empty({M}, stats);
  Tensor rstd = empty({M}, stats);
  if (M > 0) {
    const StridedView w = gamma.defined() ? flat_view(gamma) : StridedView{};
    const StridedView b = beta.defined() ? flat_view(beta) : StridedView{};
    backend_of(input).layer_norm(rows_view(Y, M, N), kv(mean), kv(rstd), rows_view(X, M, N),
                                 gamma.defined() ? &w : nullptr, beta.defined() ? &b : nullptr, eps);
  }
  const Shape stat_shape = stat_shape_of(input, normalized_shape);
  return {Y, mean.view(stat_shape), rstd.view(stat_shape)};
}

// mean and rstd viewed as input.shape[:axis] + [1] * len(normalized_shape).
Shape stat_shape_of(const Tensor& input, const Shape& normalized_shape) {
  const size_t axis = input.sizes().size() - normalized_shape.size();
  Shape stat_shape(input.sizes().begin(), input.sizes().begin() + static_cast<std::ptrdiff_t>(axis));
  stat_shape.resize(input.sizes().size(), 1);
  return stat_shape;
}

RmsNormResult rms_norm_compute(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, double eps) {
  AllocationScope scope("fused_rms_norm");
  const auto [M, N] = check_inputs("rms_norm", input, normalized_shape, weight, Tensor());
  const Tensor X = input.contiguous();
  const Tensor gamma = weight.defined() ? weight.contiguous() : Tensor();
  Tensor Y = empty(X.sizes(), TensorOptions{X.dtype(), X.device()});
  Tensor rstd = empty({M}, TensorOptions{stat_dtype(input.dtype()), input.device()});
  if (M > 0) {
    const StridedView w = gamma.defined() ? flat_view(gamma) : StridedView{};
    StridedView no_mean = kv(rstd);  // the kernels' RMS mode: a mean without data
    no_mean.data = nullptr;
    backend_of(input).layer_norm(rows_view(Y, M, N), no_mean, kv(rstd), rows_view(X, M, N),
                                 gamma.defined() ? &w : nullptr, nullptr, eps);
  }
  return {Y, rstd.view(stat_shape_of(input, normalized_shape))};
}

// The backward both norms share: PyTorch's layer_norm_backward_cuda, and _fused_rms_norm_backward_cuda when
// mean is undefined (then no bias and no bias gradient).
LayerNormGrads norm_backward(const char* op, const Tensor& grad_output, const Tensor& input,
                             const Shape& normalized_shape, const Tensor& mean, const Tensor& rstd, const Tensor& w,
                             const Tensor& b, std::array<bool, 3> output_mask);

}  // namespace

LayerNormResult native_layer_norm(const Tensor& input, const Shape& normalized_shape,
                                  const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, double eps) {
  BYTEGRAD_AUTOCAST(fp32, native_layer_norm, input, normalized_shape, weight, bias, eps);
  const Tensor w = value_or_undefined(weight), b = value_or_undefined(bias);
  OpRecording recording = begin_recording<OpId::native_layer_norm>({input, w, b}, {normalized_shape, eps});
  LayerNormResult result = without_recording([&] { return layer_norm_compute(input, normalized_shape, w, b, eps); });
  recording.finish({result.output, result.mean, result.rstd});
  return result;
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                  const std::optional<Tensor>& bias, double eps) {
  BYTEGRAD_AUTOCAST(fp32, layer_norm, input, normalized_shape, weight, bias, eps);
  return native_layer_norm(input, normalized_shape, weight, bias, eps).output;
}

LayerNormGrads native_layer_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                          const Tensor& mean, const Tensor& rstd, const std::optional<Tensor>& weight,
                                          const std::optional<Tensor>& bias, std::array<bool, 3> output_mask) {
  const char* op = "native_layer_norm_backward";
  AllocationScope scope(op);
  check_defined(op, mean);
  return norm_backward(op, grad_output, input, normalized_shape, mean, rstd, value_or_undefined(weight),
                       value_or_undefined(bias), output_mask);
}

RmsNormResult fused_rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                             std::optional<double> eps) {
  check_defined("rms_norm", input);
  const Tensor w = value_or_undefined(weight);
  // _fused_rms_norm_cuda's default: the accumulation dtype's machine epsilon.
  const double resolved_eps = eps.value_or(stat_dtype(input.dtype()) == ScalarType::float64
                                               ? std::numeric_limits<double>::epsilon()
                                               : static_cast<double>(std::numeric_limits<float>::epsilon()));
  OpRecording recording = begin_recording<OpId::fused_rms_norm>({input, w}, {normalized_shape, resolved_eps});
  RmsNormResult result = without_recording([&] { return rms_norm_compute(input, normalized_shape, w, resolved_eps); });
  recording.finish({result.output, result.rstd});
  return result;
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  BYTEGRAD_AUTOCAST(fp32, rms_norm, input, normalized_shape, weight, eps);
  check_defined("rms_norm", input);
  if (weight && weight->defined() && weight->dtype() != input.dtype())
    throw std::invalid_argument(fmt::format(
        "rms_norm: the weight {} and the input {} differ in dtype; PyTorch then leaves its fused kernel for a "
        "composite of upcasts and pointwise ops whose memory bytegrad does not model: give both one dtype",
        describe(*weight), describe(input)));
  return fused_rms_norm(input, normalized_shape, weight, eps).output;
}

RmsNormGrads fused_rms_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                     const Tensor& rstd, const std::optional<Tensor>& weight,
                                     std::array<bool, 2> output_mask) {
  const char* op = "fused_rms_norm_backward";
  AllocationScope scope(op);
  LayerNormGrads grads = norm_backward(op, grad_output, input, normalized_shape, Tensor(), rstd,
                                       value_or_undefined(weight), Tensor(), {output_mask[0], output_mask[1], false});
  return {std::move(grads.grad_input), std::move(grads.grad_weight)};
}

namespace {

LayerNormGrads norm_backward(const char* op, const Tensor& grad_output, const Tensor& input,
                             const Shape& normalized_shape, const Tensor& mean, const Tensor& rstd, const Tensor& w,
                             const Tensor& b, std::array<bool, 3> output_mask) {
  const bool rms = !mean.defined();
  check_defined(op, grad_output);
  check_defined(op, rstd);
  const auto [M, N] = check_inputs(op, input, normalized_shape, w, b);
  check_same_device(op, grad_output, input);
  check_same_dtype(op, grad_output, input);
  if (grad_output.sizes() != input.sizes())
    throw std::invalid_argument(fmt::format("{}: the gradient {} and the input {} differ in shape", op,
                                            describe(grad_output), describe(input)));
  for (const Tensor* stat : {&mean, &rstd}) {
    if (!stat->defined()) continue;  // RMS: no mean
    check_same_device(op, *stat, input);
    if (stat->numel() != M || stat->dtype() != stat_dtype(input.dtype()))
      throw std::invalid_argument(fmt::format("{}: {} must hold {} {} values (one per row), got {}", op,
                                              rms ? "rstd" : "mean and rstd", M,
                                              scalar_type_name(stat_dtype(input.dtype())), describe(*stat)));
  }
  if (output_mask[1] && !w.defined())
    throw std::invalid_argument(fmt::format("{}: a weight gradient was asked for without a weight", op));
  if (output_mask[2] && !b.defined())
    throw std::invalid_argument(fmt::format("{}: a bias gradient was asked for without a bias", op));

  const Tensor X = input.contiguous();
  const Tensor gamma = w.defined() ? w.contiguous() : Tensor();
  const Tensor beta = b.defined() ? b.contiguous() : Tensor();
  LayerNormGrads grads;
  if (output_mask[0]) grads.grad_input = empty(X.sizes(), TensorOptions{X.dtype(), X.device()});
  if (output_mask[1]) grads.grad_weight = M > 0 ? empty_like(gamma) : zeros_like(gamma);
  if (output_mask[2]) grads.grad_bias = M > 0 ? empty_like(beta) : zeros_like(beta);
  if (M == 0 || N == 0) return grads;
  const Tensor dY = grad_output.contiguous();
  const Tensor mean_c = rms ? Tensor() : mean.contiguous(), rstd_c = rstd.contiguous();
  StridedView mean_view = flat_view(rstd_c);
  if (rms) mean_view.data = nullptr;  // the kernels' RMS mode
  else mean_view = flat_view(mean_c);

  const StridedView dx = grads.grad_input.defined() ? rows_view(grads.grad_input, M, N) : StridedView{};
  const StridedView g = gamma.defined() ? flat_view(gamma) : StridedView{};
  const bool want_gamma_beta = grads.grad_weight.defined() || grads.grad_bias.defined();
  // PyTorch's gamma/beta kernel: for M > 64 * 1024 rows with N / 32 < SMs / 2 it sums blocks of 32 rows
  // into R partial rows (blocks.y of a 32-wide grid, at most 32768 blocks), then reduces them with sum(0);
  // otherwise it writes the gradients directly.
  const int64_t blocks_x = (N + 31) / 32;
  // The device's SM count, as PyTorch reads the current device's (sim and meta: the H100's 132).
  const int64_t sm_count =
      input.device().type == DeviceType::cpu ? 0 : device_launch_limits(input.device()).multiprocessor_count;
  const bool partial = want_gamma_beta && M > int64_t{64} * 1024 && N / 32 < sm_count / 2;
  const int64_t R = partial ? std::min((M + 31) / 32, (int64_t{64} * 1024 / 2) / blocks_x) : 1;
  Tensor dgamma_blocks, dbeta_blocks;
  if (partial) {
    const TensorOptions opts{X.dtype(), X.device()};
    if (grads.grad_weight.defined()) dgamma_blocks = empty({R, N}, opts);
    if (grads.grad_bias.defined()) dbeta_blocks = empty({R, N}, opts);
  }
  const Tensor& dw_target = partial ? dgamma_blocks : grads.grad_weight;
  const Tensor& db_target = partial ? dbeta_blocks : grads.grad_bias;
  const StridedView dw = dw_target.defined() ? kv(dw_target.view({R, N})) : StridedView{};
  const StridedView db = db_target.defined() ? kv(db_target.view({R, N})) : StridedView{};
  // This thread's cuBLAS workspace, which its forward's products parked on this stream, lent for the weight
  // and bias gradients' partial sums: PyTorch allocates nothing for them here.
  const BlasWorkspace parked = parked_blas_workspace(input.device());
  const DeviceScratch scratch{parked.data, static_cast<int64_t>(parked.bytes)};
  backend_of(input).layer_norm_backward(grads.grad_input.defined() ? &dx : nullptr, dw_target.defined() ? &dw : nullptr,
                                        db_target.defined() ? &db : nullptr, rows_view(dY, M, N), rows_view(X, M, N),
                                        mean_view, flat_view(rstd_c), gamma.defined() ? &g : nullptr, scratch);
  if (partial) {
    // *dgamma = dgamma_blocks.sum(0): the reduction's result replaces (frees) the first allocation.
    if (dgamma_blocks.defined()) grads.grad_weight = sum(dgamma_blocks, {0}).view(gamma.sizes());
    if (dbeta_blocks.defined()) grads.grad_bias = sum(dbeta_blocks, {0}).view(beta.sizes());
  }
  return grads;
}

}  // namespace

}  // namespace bytegrad
