// Automatic mixed precision: torch.autocast for the GPU-like devices (cuda, sim, meta), with PyTorch 2.11's
// CUDA op policy and its cast cache.
//
//   {
//     AutocastGuard autocast(DeviceType::cuda, ScalarType::bfloat16);  // with torch.autocast("cuda", bf16):
//     auto [logits, loss] = model.forward(x, y);
//   }                                                                    // the cache is cleared here
//   loss.backward();
//
// Inside a region each op listed below runs as PyTorch's autocast wrapper runs it: its floating operands
// on a GPU-like device (float64 excepted) are cast first, with the autograd-visible to(dtype) (a
// ToCopyBackward0 node; the cast's output is a new allocation), then the op runs with autocast off for
// everything it calls inside:
//   lower precision (the region's dtype): linear, matmul, mm, bmm, mv, addmm, scaled_dot_product_attention
//   float32: exp, expm1, log, pow, layer_norm, native_layer_norm, nll_loss, mse_loss
//   float32 unless given a dtype (fp32_set_opt_dtype): softmax, log_softmax (PyTorch's softmax(x, dim,
//     dtype=float): the input converted, then the op; a float16 softmax reads float16 and writes float32
//     itself, with no converted copy: half_to_float)
//   promote (the widest floating operand's dtype): dot
// Every other op runs in its operands' dtypes (gelu, masked_fill, add, ... ; mixed dtypes promote), and
// composite ops that are not listed reach the listed ops they are made of, as in PyTorch: cross_entropy's
// log_softmax is given the logits' dtype explicitly (so it runs in bfloat16), and its nll_loss casts the
// log-probabilities to float32. sum, prod and norm, which PyTorch runs in float32, are not wrapped yet.
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

bool is_autocast_enabled();                 // inside an enabled region on this thread
ScalarType autocast_dtype();                // the region's lower-precision dtype
bool is_autocast_cache_enabled();
void clear_autocast_cache();                // torch.clear_autocast_cache()
size_t autocast_cache_size();               // number of cached casts (for tests and explanations)

namespace autocast {

enum class CastPolicy { lower_precision_fp, fp32, fp32_set_opt_dtype, promote };

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

// Runs op(operands...) under `policy`: the operands cast (last first), then op inside an InnerCall.
// fp32_set_opt_dtype is the caller's business (the op takes a dtype); here it casts as fp32 does.
template <typename Op, typename... Operands>
auto run(CastPolicy policy, Op&& op, const Operands&... operands) {
  ScalarType to = autocast_dtype();
  if (policy == CastPolicy::fp32 || policy == CastPolicy::fp32_set_opt_dtype) to = ScalarType::float32;
  if (policy == CastPolicy::promote) ((to = widen(to, operands)), ...);
  using Tuple = std::tuple<std::decay_t<Operands>...>;
  Tuple cast = detail::cast_last_to_first(to, Tuple(operands...), std::index_sequence_for<Operands...>{});
  InnerCall inner;
  return std::apply(std::forward<Op>(op), cast);
}

// The op table's unary rows that PyTorch's CUDA policy runs in float32.
constexpr bool runs_in_float32(UnaryOp op) { return op == UnaryOp::exp || op == UnaryOp::expm1 || op == UnaryOp::log; }

}  // namespace autocast
}  // namespace bytegrad

// First line of a wrapped public op: when autocast applies, returns `op(operands...)` run under `policy`
// (autocast::CastPolicy's name); otherwise falls through to the op's own body.
#define BYTEGRAD_AUTOCAST(policy, op, ...)                                                              \
  if (::bytegrad::autocast::active())                                                                   \
  return ::bytegrad::autocast::run(                                                                     \
      ::bytegrad::autocast::CastPolicy::policy, [](const auto&... operands) { return op(operands...); }, \
      __VA_ARGS__)
