// Layer normalization, allocating what PyTorch 2.11's CUDA layer_norm allocates (aten/src/ATen/native/cuda/
// layer_norm_kernel.cu): forward output, mean, rstd; backward grad_input, grad_weight, grad_bias, and for
// tall inputs with short rows the partial-sum blocks its gamma/beta kernel reduces with sum(0).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/autograd_hook.h"
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
  // mean and rstd viewed as input.shape[:axis] + [1] * len(normalized_shape)
  const size_t axis = input.sizes().size() - normalized_shape.size();
  Shape stat_shape(input.sizes().begin(), input.sizes().begin() + static_cast<std::ptrdiff_t>(axis));
  stat_shape.resize(input.sizes().size(), 1);
  return {Y, mean.view(stat_shape), rstd.view(stat_shape)};
}

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
  const Tensor w = value_or_undefined(weight), b = value_or_undefined(bias);
  const auto [M, N] = check_inputs(op, input, normalized_shape, w, b);
  check_same_device(op, grad_output, input);
  check_same_dtype(op, grad_output, input);
  if (grad_output.sizes() != input.sizes())
    throw std::invalid_argument(fmt::format("{}: the gradient {} and the input {} differ in shape", op,
                                            describe(grad_output), describe(input)));
  for (const Tensor* stat : {&mean, &rstd}) {
    check_same_device(op, *stat, input);
    if (stat->numel() != M || stat->dtype() != stat_dtype(input.dtype()))
      throw std::invalid_argument(fmt::format("{}: mean and rstd must hold {} {} values (one per row), got {}", op, M,
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
  const Tensor mean_c = mean.contiguous(), rstd_c = rstd.contiguous();

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
  backend_of(input).layer_norm_backward(grads.grad_input.defined() ? &dx : nullptr, dw_target.defined() ? &dw : nullptr,
                                        db_target.defined() ? &db : nullptr, rows_view(dY, M, N), rows_view(X, M, N),
                                        flat_view(mean_c), flat_view(rstd_c), gamma.defined() ? &g : nullptr);
  if (partial) {
    // *dgamma = dgamma_blocks.sum(0): the reduction's result replaces (frees) the first allocation.
    if (dgamma_blocks.defined()) grads.grad_weight = sum(dgamma_blocks, {0}).view(gamma.sizes());
    if (dbeta_blocks.defined()) grads.grad_bias = sum(dbeta_blocks, {0}).view(beta.sizes());
  }
  return grads;
}

}  // namespace bytegrad
