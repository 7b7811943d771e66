// Losses with PyTorch's allocations: nll_loss (two outputs, output then total_weight; optional class
// weights), its backward (one zeroed gradient), cross_entropy (composite: log_softmax then nll_loss), mse_loss (a 0-d
// output holding an input-sized block, then an input-sized squared-difference temporary reduced into it) and its
// backward (one input-sized gradient).
#include <fmt/format.h>

#include <iostream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "bytegrad/core/enum_name.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

const char* reduction_name(Reduction r) {
  static constexpr const char* kNames[] = {"none", "mean", "sum"};
  return enum_name(r, kNames, "?");
}

// a on b's device and of b's dtype.
void check_device_and_dtype(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, b);
  check_same_dtype(op, a, b);
}

void check_reduction(const char* op, Reduction r) {
  if (r != Reduction::none && r != Reduction::mean && r != Reduction::sum)
    throw std::invalid_argument(fmt::format("{}: unknown reduction {}", op, static_cast<int>(r)));
}

// PyTorch's nll_loss_forward meta checks (plus bytegrad's: int64 targets, one device).
void check_nll_operands(const char* op, const Tensor& log_probs, const Tensor& target) {
  check_same_device(op, log_probs, target);
  check_dtype_rule(op, OpId::nll_loss, log_probs);
  if (target.dtype() != ScalarType::int64)
    throw std::invalid_argument(fmt::format("{}: the target {} must be int64 class indices", op, describe(target)));
  if (log_probs.dim() < 1 || log_probs.dim() > 2)
    throw std::invalid_argument(
        fmt::format("{}: the input {} should be 1-d (C) or 2-d (N, C)", op, describe(log_probs)));
  if (target.dim() > 1)
    throw std::invalid_argument(
        fmt::format("{}: 0-d or 1-d target expected (multi-target not supported), got {}", op, describe(target)));
  const bool no_batch_dim = log_probs.dim() == 1 && target.dim() == 0;
  if (!no_batch_dim && (target.dim() == 0 || log_probs.sizes()[0] != target.sizes()[0]))
    throw std::invalid_argument(fmt::format("{}: size mismatch (got input: {}, target: {})", op,
                                            shape_str(log_probs.sizes()), shape_str(target.sizes())));
}

// PyTorch's weight checks (nll_loss_forward's meta function and the autograd wrapper's check_no_requires_grad),
// plus bytegrad's: the weight of log_probs' dtype and device. An undefined weight passes.
void check_nll_weight(const char* op, const Tensor& weight, const Tensor& log_probs) {
  if (!weight.defined()) return;
  const int64_t classes = log_probs.sizes().back();
  if (weight.dim() != 1 || weight.numel() != classes)
    throw std::invalid_argument(fmt::format(
        "{}: weight tensor should be defined either for all {} classes or no classes but got weight tensor of "
        "shape: {}",
        op, classes, shape_str(weight.sizes())));
  check_device_and_dtype(op, weight, log_probs);
  if (tensor_requires_grad(weight))
    throw std::invalid_argument(fmt::format(
        "{}: the function 'nll_loss_forward' is not differentiable with respect to argument 'weight'. This input "
        "cannot have requires_grad True.",
        op));
}

Tensor defined_or_empty(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }

struct NllResult {
  Tensor output;
  Tensor total_weight;
};

NllResult nll_loss_compute(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index,
                           const Tensor& weight) {
  AllocationScope scope("nll_loss");
  check_reduction("nll_loss", reduction);
  check_nll_operands("nll_loss", log_probs, target);
  check_nll_weight("nll_loss", weight, log_probs);
  const TensorOptions options{log_probs.dtype(), log_probs.device()};
  const bool per_row = reduction == Reduction::none && log_probs.dim() == 2;
  // The structured kernel's outputs, in order: output, then total_weight.
  NllResult result;
  result.output = empty(per_row ? Shape{log_probs.sizes()[0]} : Shape{}, options);
  result.total_weight = empty({}, options);
  // Then the kernel reads contiguous operands (copies only when they are not: expect_contiguous).
  const Tensor input = log_probs.contiguous();
  const Tensor targets = target.contiguous();
  const Tensor weights = weight.defined() ? weight.contiguous() : Tensor();
  const StridedView weight_view = weights.defined() ? kv(weights) : StridedView{};
  backend_of(log_probs).nll_loss(kv(result.output), kv(result.total_weight), kv(input), kv(targets), reduction,
                                 ignore_index, weights.defined() ? &weight_view : nullptr);
  return result;
}

// Under autocast nll_loss runs in float32, so PyTorch first casts the 16-bit log-probabilities whole
// (_to_copy: 1.6 GB for GPT-2's logits at 8 x 1024 tokens). nll_loss's forward reads one element of each
// row, the target's, and its backward none (it saves the cast for its shape): the cast is allocated and
// recorded as PyTorch's, and only those elements are written (backend cast_target_elements), unless
// saved-tensor hooks could hand the saved cast to someone else. Unweighted, 2-d, contiguous targets (the
// language-model loss); every other call casts whole.
bool casts_only_target_elements(const Tensor& log_probs, const Tensor& target, const std::optional<Tensor>& weight) {
  if (!autocast::active() || (weight && weight->defined()) || !autocast::is_eligible(log_probs)) return false;
  if (log_probs.dtype() == ScalarType::float32 || log_probs.dim() != 2) return false;
  if (target.dtype() != ScalarType::int64 || target.dim() != 1 || target.device() != log_probs.device() ||
      !target.is_contiguous() || target.sizes()[0] != log_probs.sizes()[0])
    return false;
  const AutogradHook* hook = autograd_hook();
  return hook == nullptr || !hook->saved_tensors_hooked();
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index,
                const std::optional<Tensor>& weight) {
  if (casts_only_target_elements(log_probs, target, weight)) {
    const Tensor cast = ops_detail::to_dtype_written_by(log_probs, ScalarType::float32, [&](const Tensor& out) {
      backend_of(log_probs).cast_target_elements(kv(out), kv(log_probs), kv(target), ignore_index);
    });
    autocast::InnerCall inner;
    return nll_loss(cast, target, reduction, ignore_index, weight);
  }
  BYTEGRAD_AUTOCAST(fp32, nll_loss, log_probs, target, reduction, ignore_index, weight);
  const Tensor w = defined_or_empty(weight);
  // The autograd wrapper's check comes before the node is made (nothing is allocated yet).
  if (w.defined()) check_nll_weight("nll_loss", w, log_probs);
  OpRecording recording = begin_recording<OpId::nll_loss>({log_probs, target, w}, {reduction, ignore_index});
  NllResult r = without_recording([&] { return nll_loss_compute(log_probs, target, reduction, ignore_index, w); });
  recording.finish({r.output, r.total_weight});
  return r.output;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  return nll_loss(log_probs, target, options.reduction, options.ignore_index, options.weight);
}

Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         const Tensor& total_weight, Reduction reduction, int64_t ignore_index,
                         const std::optional<Tensor>& weight) {
  const char* name = "nll_loss_backward";
  AllocationScope scope(name);
  check_reduction(name, reduction);
  check_nll_operands(name, self, target);
  const Tensor w = defined_or_empty(weight);
  if (w.defined()) {
    check_defined(name, self);
    if (w.dim() != 1 || w.numel() != self.sizes().back())
      throw std::invalid_argument(fmt::format("{}: weight {} should hold one value per class of the input {}", name,
                                              describe(w), describe(self)));
    check_device_and_dtype(name, w, self);
  }
  check_device_and_dtype(name, grad_output, self);
  check_device_and_dtype(name, total_weight, self);
  const bool per_row = reduction == Reduction::none && self.dim() == 2;
  if (per_row ? (grad_output.dim() != 1 || grad_output.sizes()[0] != self.sizes()[0]) : grad_output.numel() != 1)
    throw std::invalid_argument(fmt::format("{}: the gradient {} does not fit reduction '{}' of the input {}", name,
                                            describe(grad_output), reduction_name(reduction), describe(self)));
  if (total_weight.numel() != 1)
    throw std::invalid_argument(fmt::format("{}: total_weight {} must have one element", name, describe(total_weight)));
  // Where the gradient's one reader is a cast run right after (tensor/gradient_reader.h), its rows go to
  // the cast packed: the same allocations, no fill and no whole write.
  const std::optional<SoleReader> reader = take_sole_reader();
  const bool packed = reader && reader->cast_to && self.dim() == 2 && reader->dtype == self.dtype() &&
                      reader->sizes == self.sizes() && backend_of(self).packs_nll_rows() &&
                      packed_nll_rows_fit(self.sizes()[1], element_size(self.dtype()));
  // The structured output (contiguous, self's shape), zeroed; then the CUDA template's expect_contiguous
  // copies in its order: target, self, grad_output.
  Tensor grad_input = packed ? ops_detail::zeros_unfilled(self.sizes(), TensorOptions{self.dtype(), self.device()})
                             : zeros(self.sizes(), TensorOptions{self.dtype(), self.device()});
  const Tensor targets = target.contiguous();
  const Tensor input = self.contiguous();
  const Tensor grad = grad_output.contiguous();
  (void)input;  // only its contiguity is PyTorch's business: the kernel needs nothing from its values
  const Tensor weights = w.defined() ? w.contiguous() : Tensor();
  const StridedView weight_view = weights.defined() ? kv(weights) : StridedView{};
  if (packed) {
    backend_of(self).nll_loss_backward_rows(kv(grad_input), kv(grad), kv(targets), kv(total_weight), reduction,
                                            ignore_index, weights.defined() ? &weight_view : nullptr);
    hand_packed_gradient(grad_input.storage().get(), PackedGradient::nll_rows);
    return grad_input;
  }
  backend_of(self).nll_loss_backward(kv(grad_input), kv(grad), kv(targets), kv(total_weight), reduction, ignore_index,
                                     weights.defined() ? &weight_view : nullptr);
  return grad_input;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  return cross_entropy(logits, target,
                       CrossEntropyOptions{.weight = std::nullopt,
                                           .ignore_index = ignore_index,
                                           .reduction = reduction,
                                           .label_smoothing = label_smoothing});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  const Reduction reduction = options.reduction;
  const int64_t ignore_index = options.ignore_index;
  const double label_smoothing = options.label_smoothing;
  const bool weighted = options.weight && options.weight->defined();
  check_defined("cross_entropy", logits);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw std::invalid_argument(
        fmt::format("cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: {}", label_smoothing));
  if (logits.dim() < 1 || logits.dim() > 2)
    throw std::invalid_argument(
        fmt::format("cross_entropy: logits {} should be 1-d (C) or 2-d (N, C)", describe(logits)));
  // PyTorch's cross_entropy_loss calls log_softmax with dtype = the logits' dtype, which autocast leaves alone
  // (fp32_set_opt_dtype only fills in a missing dtype) and which converts nothing: under autocast the
  // log-probabilities stay in the logits' dtype and nll_loss (float32 policy) casts them.
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  const Tensor log_probs = log_softmax(logits, class_dim, logits.dtype());
  Tensor nll = nll_loss(log_probs, target, reduction, ignore_index, options.weight);
  if (label_smoothing == 0.0) return nll;
  // PyTorch's cross_entropy_loss_label_smoothing, in its order: each temporary lives as long as it does there
  // (the statements and their operands are PyTorch's).
  check_reduction("cross_entropy", reduction);
  Tensor smooth_loss;
  if (weighted) {
    // The weight viewed to broadcast along the class dim: (C) for 1-d logits, (1, C) for 2-d.
    Shape weight_shape(static_cast<size_t>(log_probs.dim()), 1);
    weight_shape[static_cast<size_t>(class_dim)] = options.weight->size(0);
    const Tensor weight_view = options.weight->view(weight_shape);
    smooth_loss = -(log_probs * weight_view).sum(Shape{class_dim});
  } else {
    smooth_loss = -log_probs.sum(Shape{class_dim});
  }
  const Tensor ignore_mask = eq(target, static_cast<double>(ignore_index));  // after the sum (recorded order)
  smooth_loss.masked_fill_(ignore_mask, 0.0);
  Tensor reduced;
  switch (reduction) {
    case Reduction::mean: {
      if (weighted) {
        // smooth_loss.sum() / weight.gather(0, target.masked_select(~ignore_mask).flatten()).sum(): GCC (which
        // builds PyTorch) evaluates the divisor first, and every temporary lives to the end of the statement,
        // freed last made first; the locals of this block do the same, in that order.
        const Tensor kept = logical_not(ignore_mask);
        const Tensor kept_targets = masked_select(target, kept);
        const Tensor kept_weights = gather(*options.weight, 0, kept_targets.flatten());
        const Tensor weight_sum = kept_weights.sum();
        const Tensor loss_sum = smooth_loss.sum();
        reduced = loss_sum / weight_sum;
        break;
      }
      // smooth_loss.sum() / (~ignore_mask).sum(), in GCC's order as above (the divisor first), whatever
      // order this compiler would give the operands.
      const Tensor true_mask = logical_not(ignore_mask);  // ~ignore_mask: one bool tensor, as bitwise_not
      const Tensor kept_count = true_mask.sum();
      const Tensor loss_sum = smooth_loss.sum();
      reduced = loss_sum / kept_count;
      break;
    }
    case Reduction::sum: reduced = smooth_loss.sum(); break;
    case Reduction::none: reduced = smooth_loss; break;
  }
  const auto classes = static_cast<double>(logits.size(class_dim));
  return (1 - label_smoothing) * nll + reduced * (label_smoothing / classes);
}

// ------------------------------------------------------------------- binary_cross_entropy_with_logits

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* name = "binary_cross_entropy_with_logits";
  check_defined(name, input);
  check_defined(name, target);
  check_reduction(name, reduction);
  check_device_and_dtype(name, target, input);
  check_dtype_rule(name, OpId::binary_cross_entropy_with_logits, input);
  if (input.sizes() != target.sizes())
    throw std::invalid_argument(fmt::format("{}: Target size ({}) must be the same as input size ({})", name,
                                            describe(target), describe(input)));
  return compute_recorded<OpId::binary_cross_entropy_with_logits>({input, target}, {reduction}, [&] {
    AllocationScope scope(name);
    // Loss.cpp's order: log_sigmoid first, then (1 - target) made into the loss in place; both locals are
    // freed (loss first) after the reduction's output exists.
    const Tensor log_sigmoid_input = log_sigmoid(input);
    Tensor loss = 1.0 - target;
    loss.mul_(input).sub_(log_sigmoid_input);
    if (reduction == Reduction::mean) return loss.mean();
    if (reduction == Reduction::sum) return loss.sum();
    return loss;
  });
}

// ------------------------------------------------------------------------------------------- mse

namespace {

void check_mse_operands(const char* op, const Tensor& input, const Tensor& target) {
  check_device_and_dtype(op, input, target);
  check_dtype_rule(op, OpId::mse_loss, input);
  if (input.sizes() != target.sizes())
    throw std::invalid_argument(fmt::format("{}: the input {} and the target {} must have the same shape", op,
                                            describe(input), describe(target)));
}

Tensor mse_loss_compute(const Tensor& input, const Tensor& target, Reduction reduction) {
  AllocationScope scope("mse_loss");
  check_reduction("mse_loss", reduction);
  check_mse_operands("mse_loss", input, target);
  KernelBackend& backend = backend_of(input);
  if (reduction == Reduction::none) {
    Tensor out = empty_elementwise_output(input.sizes(), input.dtype(), input.device(), {&input, &target});
    backend.binary(BinaryOp::sub, kv(out), kv(input), kv(target), 1.0);
    backend.binary(BinaryOp::mul, kv(out), kv(out), kv(out), 1.0);
    return out;
  }
  // PyTorch's structured mse_loss: its meta function builds a binary op over (input, target) whatever the
  // reduction, so the result is first allocated input-sized (TensorIterator's layout); mse_loss_out then
  // computes TensorIterator's (input - target)^2 output (a second input-sized block, freed when this
  // returns) and mean_out / sum_out resize the result to 0-d, which keeps its storage. So the 0-d loss
  // holds an input-sized block for as long as it lives. Measured on the H100 (events.jsonl, "mse_loss
  // mean [64, 10]": alloc 2560, alloc 2560, free 2560; no 4-byte block), and x_mlp_sgd_momentum_mse's
  // loss marks: a (200, 5) loss holds 4000 requested bytes (block 4096), not 4 (block 512).
  Tensor out;
  if (input.numel() == 0) {
    // An empty input's block holds no element, so resize_({}) grows the storage: a fresh 0-d tensor.
    out = empty({}, TensorOptions{input.dtype(), input.device()});
  } else {
    Tensor full = empty_elementwise_output(input.sizes(), input.dtype(), input.device(), {&input, &target});
    auto impl = std::make_shared<TensorImpl>();  // full.resize_({}): the same storage, a 0-d shape
    impl->storage = full.storage();
    impl->dtype = full.dtype();
    out = Tensor(std::move(impl));
  }
  Tensor squared = empty_elementwise_output(input.sizes(), input.dtype(), input.device(), {&input, &target});
  backend.binary(BinaryOp::sub, kv(squared), kv(input), kv(target), 1.0);
  backend.binary(BinaryOp::mul, kv(squared), kv(squared), kv(squared), 1.0);
  run_reduction(reduction == Reduction::mean ? ReduceOp::mean : ReduceOp::sum,
                out.view(Shape(static_cast<size_t>(input.dim()), 1)), squared);
  return out;
}

}  // namespace

namespace {

// torch.Size's repr, as PyTorch's warning prints it: "torch.Size([4, 1])".
std::string torch_size(const Shape& sizes) {
  std::string out = "torch.Size([";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "])";
}

// torch.nn.functional.mse_loss's UserWarning, printed once per message as Python's default warning filter
// prints it once per call site (a second call with the same shapes is silent; other shapes warn again).
void warn_mse_sizes_differ(const Tensor& input, const Tensor& target) {
  const std::string message = fmt::format(
      "Using a target size ({}) that is different to the input size ({}). This will likely lead to incorrect "
      "results due to broadcasting. Please ensure they have the same size.",
      torch_size(target.sizes()), torch_size(input.sizes()));
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard lock(mutex);
  if (warned.insert(message).second) std::cerr << "UserWarning: " << message << std::endl;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  BYTEGRAD_AUTOCAST(fp32, mse_loss, input, target, reduction);
  check_defined("mse_loss", input);
  check_defined("mse_loss", target);
  if (input.sizes() != target.sizes()) {
    // As torch.nn.functional.mse_loss: warn, then torch.broadcast_tensors (an expand of each operand whose
    // shape differs from the broadcast, so views: no memory, and ExpandBackward0 nodes that sum the
    // gradient back), then the same loss on equal shapes. Its output and saved tensors are the broadcast's.
    warn_mse_sizes_differ(input, target);
    const Shape shape = broadcast_shapes("mse_loss", input, target);
    const Tensor expanded_input = input.sizes() == shape ? input : input.expand(shape);
    const Tensor expanded_target = target.sizes() == shape ? target : target.expand(shape);
    return mse_loss(expanded_input, expanded_target, reduction);
  }
  return compute_recorded<OpId::mse_loss>({input, target}, {reduction},
                                          [&] { return mse_loss_compute(input, target, reduction); });
}

Tensor mse_loss_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* name = "mse_loss_backward";
  AllocationScope scope(name);
  check_reduction(name, reduction);
  check_mse_operands(name, input, target);
  check_device_and_dtype(name, grad_output, input);
  const Shape shape = broadcast_shapes(name, grad_output, input);
  if (shape != input.sizes())
    throw std::invalid_argument(fmt::format("{}: the gradient {} does not broadcast to the input {}", name,
                                            describe(grad_output), describe(input)));
  const double norm = reduction == Reduction::mean ? 2.0 / static_cast<double>(input.numel()) : 2.0;
  // PyTorch: zeros_like(input) (contiguous), then one kernel norm * (input - target) * grad_output. Every
  // element is overwritten, so an uninitialised block of the same size stands for the zeros.
  Tensor grad_input = empty(input.sizes(), TensorOptions{input.dtype(), input.device()});
  KernelBackend& backend = backend_of(input);
  backend.binary(BinaryOp::sub, kv(grad_input), kv(input), kv(target), 1.0);
  backend.binary_scalar(BinaryOp::mul, kv(grad_input), kv(grad_input), norm, false);
  backend.binary(BinaryOp::mul, kv(grad_input), kv(grad_input), kv(grad_output.expand(shape)), 1.0);
  return grad_input;
}

}  // namespace bytegrad
