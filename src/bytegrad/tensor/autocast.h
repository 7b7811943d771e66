// Automatic mixed precision: torch.autocast for the GPU-like devices (cuda, sim, meta), with PyTorch 2.11's
// CUDA op policy and its cast cache.
//
//   {
//     AutocastGuard autocast(DeviceType::cuda, ScalarType::bfloat16);  // with torch.autocast("cuda", bf16):
//     auto [logits, loss] = model.forward(x, y);
//   }                                                                    // the cache is cleared here
//   loss.backward();
//
// The policy is PyTorch's CUDA one as its source states it: aten/src/ATen/autocast_mode.h's op lists
// (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE,
// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE) and its WrapFunction_ policies, registered for CUDA by
// autocast_mode.cpp's TORCH_LIBRARY_IMPL(aten, Autocast, m). Read on pytorch/pytorch's main branch (header at
// d70fe7f, .cpp at 008ec6b: the lists in the header, std::optional arguments, the MPS policy beside CUDA's),
// taken as 2.11's; the recorded 2.11 traces in tests/data agree where they reach (softmax, linear). Of
// the listed ops, bytegrad has those below; the others (cumsum, cumprod, logsumexp, log2, softplus,
// the other losses, ...) it does not implement. Inside a region each op listed below runs as PyTorch's
// autocast wrapper runs it, with autocast off for everything it calls inside:
//   lower precision (the region's dtype): linear, matmul, mm, bmm, mv, addmm, scaled_dot_product_attention
//   float32: the op table's pointwise rows whose autocast column says fp32 (core/op_table.h), layer_norm, rms_norm,
//     native_layer_norm, nll_loss, mse_loss
//     Each floating operand on a GPU-like device (float64 excepted) is cast first, with the autograd-visible
//     to(dtype) (a ToCopyBackward0 node; the cast's output is a new allocation).
//   float32 unless given a dtype (fp32_set_opt_dtype): sum (whole and over dims), prod, norm (Tensor.norm and
//     torch.norm reach linalg_vector_norm from Python, which is in this list; aten::norm's overloads, in
//     fp32_append_dtype, are C++-only), vector_norm (linalg_vector_norm itself, any ord), softmax, log_softmax
//     Nothing is cast: when the first operand is eligible (a GPU-like floating tensor, not float64) and the
//     op's dtype argument is unset, the op runs with dtype=float32; otherwise it runs unchanged. What that
//     allocates is the op's business, as in PyTorch: a sum, prod or norm of a float16/bfloat16 input reads
//     the input as it is and accumulates and writes float32 (make_reduction_from_out_ty's gpu_lowp_to_f32:
//     one float32 output, no copy of the input); softmax and log_softmax with a dtype first convert their
//     input (PyTorch's softmax(x, dim, dtype): input.toType(dtype), a copy with its own node), except that a
//     float16 softmax or log_softmax on a GPU-like device reads float16 and writes float32 itself
//     (half_to_float, no copy, its gradient straight in float16; bfloat16 is copied).
//   promote (the widest floating operand's dtype): dot
// Every other op runs in its operands' dtypes (the activations, masked_fill, add, mean, var, ... ; mixed dtypes
// promote), and composite ops that are not listed reach the listed ops they are made of, as in PyTorch:
// cross_entropy gives log_softmax the logits' dtype explicitly (so it runs in bfloat16 and is left alone), and
// its nll_loss casts the log-probabilities to float32. Gradients need nothing of autocast: the engine
// converts each gradient to its input's dtype (validate_outputs), e.g. a float32 sum's gradient of a
// bfloat16 input becomes a bfloat16 copy of the expanded gradient.
//
// Operands are cast from the last to the first (the order in which GCC evaluates the arguments of
// PyTorch's wrapper, measured: linear casts its bias, then its weight, then its input).
//
// The cast cache (PyTorch's, as Apex's): a cast to the region's dtype of a float32 leaf that requires grad
// (a parameter), not a view, is made once per region and kept until the outermost region ends (the
// regions' nesting is counted per thread, as torch.autocast counts it); other casts are made at each use.
// The cached casts that a graph saved stay allocated until backward frees them.
#pragma once

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "bytegrad/core/device.h"
#include "bytegrad/core/op_table.h"
#include "bytegrad/core/scalar_type.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

// Enters an autocast region for GPU-like tensors (device_type cuda, sim or meta: the three share the CUDA
// policy); dtype float16 (PyTorch's default for cuda) or bfloat16. enabled=false opens a region in which
// autocast is off (still counted for the cache); cache_enabled=false makes every cast afresh. Regions nest;
// leaving one restores the previous settings. cpu autocast (PyTorch's other policy) is refused.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device_type = DeviceType::cuda, ScalarType dtype = ScalarType::float16,
                         bool enabled = true, bool cache_enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool previous_enabled_;
  ScalarType previous_dtype_;
  bool previous_cache_enabled_;
};

bool is_autocast_enabled();   // inside an enabled region on this thread
ScalarType autocast_dtype();  // the region's lower-precision dtype
bool is_autocast_cache_enabled();
void clear_autocast_cache();   // torch.clear_autocast_cache()
size_t autocast_cache_size();  // number of cached casts (for tests and explanations)

namespace autocast {

// The op table's AutocastPolicy (core/op_table.h: a pointwise row's autocast column is one of these).
using CastPolicy = AutocastPolicy;

// Whether an op called now should apply its policy: autocast is on and no wrapped op is running.
bool active();

// While alive, wrapped ops run as plain ops (the wrapper's inner call; PyTorch excludes its Autocast
// dispatch key the same way).
class InnerCall {
 public:
  InnerCall();
  ~InnerCall();
  InnerCall(const InnerCall&) = delete;
  InnerCall& operator=(const InnerCall&) = delete;

 private:
  bool previous_;
};

// A GPU-like floating tensor other than float64: what autocast casts.
bool is_eligible(const Tensor& t);
// t cast to `to` (through the cache where it applies); t itself when not eligible or already `to`.
Tensor cached_cast(ScalarType to, const Tensor& t);

// The cast of one operand of a wrapped op; non-tensor operands pass through.
template <typename T>
T cast_operand(ScalarType, const T& value) {
  return value;
}
inline Tensor cast_operand(ScalarType to, const Tensor& t) { return cached_cast(to, t); }
inline std::optional<Tensor> cast_operand(ScalarType to, const std::optional<Tensor>& t) {
  return t ? std::optional<Tensor>(cached_cast(to, *t)) : std::nullopt;
}

// The dtype a promote-policy op runs in: float32 if any eligible operand is float32, else the region's.
inline ScalarType widen(ScalarType current, const Tensor& t) {
  return is_eligible(t) && t.dtype() == ScalarType::float32 ? ScalarType::float32 : current;
}
inline ScalarType widen(ScalarType current, const std::optional<Tensor>& t) { return t ? widen(current, *t) : current; }
template <typename T>
ScalarType widen(ScalarType current, const T&) {
  return current;
}

namespace detail {
template <typename Tuple, size_t... I>
Tuple cast_last_to_first(ScalarType to, const Tuple& in, std::index_sequence<I...>) {
  constexpr size_t n = sizeof...(I);
  Tuple out;
  // A comma fold runs left to right; the indices are reversed, so the last operand is cast first.
  ((std::get<n - 1 - I>(out) = cast_operand(to, std::get<n - 1 - I>(in))), ...);
  return out;
}
}  // namespace detail

// fp32_set_opt_dtype's treatment of one operand (PyTorch's set_opt_dtype): an unset dtype argument becomes
// float32; everything else passes through.
template <typename T>
T set_opt_dtype(const T& value) {
  return value;
}
inline std::optional<ScalarType> set_opt_dtype(const std::optional<ScalarType>& dtype) {
  return dtype ? dtype : std::optional<ScalarType>(ScalarType::float32);
}

// PyTorch's firstarg_is_eligible: whether the first operand (a tensor) is one autocast would cast.
template <typename First, typename... Rest>
bool first_is_eligible(const First& first, const Rest&...) {
  return is_eligible(first);
}

// Runs op(operands...) under `policy`, inside an InnerCall: lower_precision_fp, fp32 and promote cast the
// operands (last first); fp32_set_opt_dtype casts nothing and fills in the op's unset dtype argument (a
// std::optional<ScalarType> operand, which the op must have) with float32 when the first operand is eligible.
template <CastPolicy policy, typename Op, typename... Operands>
auto run(Op&& op, const Operands&... operands) {
  static_assert(policy != CastPolicy::none, "an op without an autocast policy is not wrapped");
  if constexpr (policy == CastPolicy::fp32_set_opt_dtype) {
    static_assert((std::is_same_v<Operands, std::optional<ScalarType>> || ...),
                  "an fp32_set_opt_dtype op takes its dtype as a std::optional<ScalarType> operand");
    InnerCall inner;
    if (first_is_eligible(operands...)) return op(set_opt_dtype(operands)...);
    return op(operands...);
  } else {
    ScalarType to = autocast_dtype();
    if constexpr (policy == CastPolicy::fp32) to = ScalarType::float32;
    if constexpr (policy == CastPolicy::promote) ((to = widen(to, operands)), ...);
    using Tuple = std::tuple<std::decay_t<Operands>...>;
    Tuple cast = detail::cast_last_to_first(to, Tuple(operands...), std::index_sequence_for<Operands...>{});
    InnerCall inner;
    return std::apply(std::forward<Op>(op), cast);
  }
}

}  // namespace autocast
}  // namespace bytegrad

// First line of a wrapped public op: when autocast applies, returns `op(operands...)` run under `policy`
// (autocast::CastPolicy's name); otherwise falls through to the op's own body.
#define BYTEGRAD_AUTOCAST(policy, op, ...)                                    \
  if (::bytegrad::autocast::active())                                         \
  return ::bytegrad::autocast::run<::bytegrad::autocast::CastPolicy::policy>( \
      [](const auto&... operands) { return op(operands...); }, __VA_ARGS__)
