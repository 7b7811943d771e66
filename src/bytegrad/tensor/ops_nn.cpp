// Neural-network ops: (log_)softmax and its gradient, dropout, embedding lookup.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bytegrad/core/view_bytes.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/autocast.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"
#include "bytegrad/tensor/pending_scores.h"
#include "bytegrad/tensor/random.h"

namespace bytegrad {

using namespace ops_detail;

namespace {

// PyTorch's CUDA softmax (host_softmax) allocates the contiguous output, then reads a contiguous input:
// a non-contiguous input is first copied to a temporary (freed when the op returns). half_to_float: a
// float16 input, a float32 output, read and written by one kernel. `values`: where x's values are read
// from instead, a contiguous 16-bit tensor that x (float32, contiguous) is the exact conversion of, left
// unwritten (below).
Tensor softmax_op(const char* name, const Tensor& x, int64_t dim, bool log, bool half_to_float, const Tensor* values) {
  AllocationScope scope(name);
  check_defined(name, x);
  check_dtype_rule(name, OpId::softmax, x);
  dim = wrap_dim(dim, x.dim(), name);
  Tensor out = empty(x.sizes(), TensorOptions{half_to_float ? ScalarType::float32 : x.dtype(), x.device()});
  const Tensor input = x.contiguous();
  const StridedView read = kv(values != nullptr ? *values : input);
  // Scores a scale and a mask left pending (tensor/pending_scores.h) take softmax as their chain's last step
  // where out overlaps nothing it reads (or is the source itself): out is left unwritten too, and written
  // with the rest in one kernel where the backend takes it (beside a cast's copy, where one comes next).
  // Else the chain is written out.
  if (std::optional<PendingScores> chain = take_pending_scores(read)) {
    const StridedView written = kv(out);
    if (writes_clear_of_reads(*chain, written)) {
      backend_of(x).note_deferred_softmax(written);
      defer_softmax_of_scores(std::move(*chain), PendingSoftmax{written, dim, log});
      return out;
    }
    write_pending_scores(*chain);
  }
  backend_of(x).softmax(kv(out), read, dim, log);
  return out;
}

template <OpId op>
Tensor softmax_recorded(const Tensor& x, int64_t dim, bool log, bool half_to_float, const Tensor* values = nullptr) {
  const char* name = op_name(op).data();
  OpRecording recording = begin_recording<op>({x}, [&] { return op_args::Dim{wrap_dim(dim, x.dim(), name)}; });
  Tensor out = without_recording([&] { return softmax_op(name, x, dim, log, half_to_float, values); });
  recording.finish({out});
  return out;
}

}  // namespace

// PyTorch's softmax.int / log_softmax.int (composite): with a dtype, converted = input.toType(dtype) (an
// autograd-visible copy, ToCopyBackward0, when the dtype differs), then _softmax / _log_softmax on it. On
// CUDA a float16 input with dtype=float32 goes to _softmax / _log_softmax(input, dim, half_to_float=true)
// instead, which reads the float16 input without the copy and writes the float32 output; its gradient comes
// back in float16 (bfloat16 has no such path: it is copied). Under autocast (fp32_set_opt_dtype) an unset
// dtype becomes float32 for an eligible input, so float16 autocast reaches half_to_float and bfloat16
// autocast the copy (PyTorch's trace: _to_copy, then _softmax); an explicit dtype is kept, as
// cross_entropy's.
namespace {
bool takes_half_to_float(const Tensor& x, std::optional<ScalarType> dtype) {
  return dtype == ScalarType::float32 && x.defined() && x.dtype() == ScalarType::float16 &&
         x.device().type != DeviceType::cpu;
}

// The converted copy of a 16-bit input is PyTorch's block and ToCopyBackward0 node, but nothing reads it
// except this softmax, so it is allocated and recorded, left unwritten, and the kernel reads the input
// itself (each element converted exactly: the same values, one pass over half the bytes; issue 30). A
// non-contiguous input is converted as before: softmax_op reads the contiguous copy.
template <OpId op>
Tensor softmax_with_dtype(const Tensor& x, int64_t dim, bool log, std::optional<ScalarType> dtype) {
  if (takes_half_to_float(x, dtype)) return softmax_recorded<op>(x, dim, log, true);
  if (!dtype || *dtype == x.dtype()) return softmax_recorded<op>(x, dim, log, false);
  const bool widens_16_bit = *dtype == ScalarType::float32 && x.defined() &&
                             (x.dtype() == ScalarType::float16 || x.dtype() == ScalarType::bfloat16);
  if (!widens_16_bit || !x.is_contiguous()) return softmax_recorded<op>(x.to(*dtype), dim, log, false);
  const Tensor converted = ops_detail::to_dtype_written_by(x, *dtype, [](const Tensor&) {});
  return softmax_recorded<op>(converted, dim, log, false, &x);
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, softmax, x, dim, dtype);
  return softmax_with_dtype<OpId::softmax>(x, dim, false, dtype);
}
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  BYTEGRAD_AUTOCAST(fp32_set_opt_dtype, log_softmax, x, dim, dtype);
  return softmax_with_dtype<OpId::log_softmax>(x, dim, true, dtype);
}

Tensor softmax_backward(const Tensor& grad_output, const Tensor& output, int64_t dim, bool log,
                        std::optional<ScalarType> input_dtype) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  AllocationScope scope(name);
  check_same_device(name, grad_output, output);
  check_same_dtype(name, grad_output, output);
  if (grad_output.sizes() != output.sizes())
    throw std::invalid_argument(fmt::format("{}: the gradient {} and the output {} differ in shape", name,
                                            describe(grad_output), describe(output)));
  dim = wrap_dim(dim, output.dim(), name);
  const ScalarType grad_dtype = input_dtype.value_or(output.dtype());
  const bool half_to_float = grad_dtype != output.dtype();
  if (half_to_float && (grad_dtype != ScalarType::float16 || output.dtype() != ScalarType::float32))
    throw std::invalid_argument(
        fmt::format("{}: a {} gradient for a {} output: only float16 from float32 (half_to_float)", name,
                    scalar_type_name(grad_dtype), scalar_type_name(output.dtype())));
  Tensor grad_input = empty(output.sizes(), TensorOptions{grad_dtype, output.device()});
  // PyTorch's softmax_backward_cuda_out first computes tmp = grad * output into a new tensor (an elementwise
  // result, freed on return) and hands tmp to its kernel; ours fuses that product, so the block is only
  // allocated, where and as long as PyTorch's is (events.jsonl "softmax [64,10]": alloc, alloc, free).
  // log_softmax_backward_cuda_out has no such temporary: grad_input is its only block, half_to_float or not.
  Tensor product_block;
  if (!log)
    product_block = empty_elementwise_output(output.sizes(), output.dtype(), output.device(), {&grad_output, &output});
  // The float32 cast eager ran on the gradient just before (ToCopyBackward0: autocast's bfloat16 copy of
  // softmax's output for a product, on its way back) may have been left to this op (tensor/gradient_reader.h):
  // then grad_output is unwritten, and where softmax's gradient is handed on deferred too its 16-bit elements
  // are read where they are, converted exactly as the cast would. Any other deferred form is written out first.
  std::optional<StridedView> grad_source;
  if (std::optional<DeferredGradient> deferred = take_deferred_gradient(grad_output.storage().get())) {
    const bool plain_cast = !deferred->softmax && deferred->steps.size() == 1 && !deferred->steps[0].mask &&
                            same_view(deferred->steps[0].target, kv(grad_output));
    if (plain_cast && !log && !half_to_float && grad_output.is_contiguous()) grad_source = deferred->source;
    else replay_deferred_gradient(*deferred);
  }
  // As the forward: contiguous operands (copies only when they are not).
  const Tensor grad = grad_output.contiguous();
  const Tensor out = output.contiguous();
  // Where grad_input's one reader is a cast to a 16-bit float run right after (tensor/gradient_reader.h:
  // autocast's float32 copy of a bfloat16 softmax input, on its way back), the kernel writes the cast's
  // values into grad_input's first bytes and the cast copies them: the same allocations and bits, half the
  // bytes written and read.
  const std::optional<SoleReader> reader = take_sole_reader();
  // Where the one reader takes a deferred gradient (MaskedFillBackward0, or the cast before it: slow
  // attention), grad_input is left unwritten and handed on with what it is computed from; the chain's last
  // node writes its own output from grad and out in one pass (tensor/gradient_reader.h).
  if (reader && reader->takes_deferred && !half_to_float && !log && reader->dtype == grad_dtype &&
      reader->sizes == output.sizes() && grad_input.is_contiguous() && defers_gradients_on(output.device())) {
    backend_of(output).note_deferred_softmax_backward(kv(grad_input));
    hand_deferred_gradient(
        grad_input.storage().get(),
        DeferredGradient{kv(grad_input), {}, SoftmaxGradientSource{kv(grad), kv(out), dim, grad_source}});
    return grad_input;
  }
  // Written here, softmax's gradient reads the cast written first, as eager did: grad_input may have been
  // allocated over the source's freed block.
  if (grad_source) replay_deferred_gradient(DeferredGradient{*grad_source, {{kv(grad_output)}}, std::nullopt});
  if (reader && !half_to_float && reader->dtype == grad_dtype && reader->sizes == output.sizes() &&
      grad_dtype == ScalarType::float32 &&
      (reader->cast_to == ScalarType::bfloat16 || reader->cast_to == ScalarType::float16)) {
    StridedView cast_values = kv(grad_input);
    cast_values.dtype = *reader->cast_to;
    backend_of(output).softmax_backward(cast_values, kv(grad), kv(out), dim, log);
    hand_packed_gradient(grad_input.storage().get(), PackedGradient::cast_values);
    return grad_input;
  }
  if (half_to_float && !log) {
    // The gradient is computed in PyTorch's float32 product block, then converted into grad_input.
    backend_of(output).softmax_backward(kv(product_block), kv(grad), kv(out), dim, log);
    backend_of(output).copy(kv(grad_input), kv(product_block));
    return grad_input;
  }
  // log_softmax's half_to_float gradient: the kernel reads the float32 operands and writes float16 itself.
  backend_of(output).softmax_backward(kv(grad_input), kv(grad), kv(out), dim, log);
  return grad_input;
}

Tensor Tensor::softmax(int64_t dim, std::optional<ScalarType> dtype) const {
  return bytegrad::softmax(*this, dim, dtype);
}
Tensor Tensor::log_softmax(int64_t dim, std::optional<ScalarType> dtype) const {
  return bytegrad::log_softmax(*this, dim, dtype);
}

// ---------------------------------------------------------------------------------------- dropout

namespace {

DropoutResult dropout_compute(const Tensor& x, double p, bool train) {
  AllocationScope scope("dropout");
  check_defined("dropout", x);
  if (!(p >= 0.0 && p <= 1.0))  // NaN is refused too, as PyTorch refuses it
    throw std::invalid_argument(fmt::format("dropout: probability has to be between 0 and 1, but got {}", p));
  if (!train || p == 0.0 || x.numel() == 0) return {x, Tensor()};
  if (p == 1.0) {
    // PyTorch's _dropout: input * zeros({}) — a 0-d zero (freed on return) and the output. Any dtype: only
    // a real draw (0 < p < 1, the fused kernel) needs a floating tensor.
    const Tensor zero = zeros({}, TensorOptions{x.dtype(), x.device()});
    Tensor out = empty_elementwise_output(x.sizes(), x.dtype(), x.device(), {&x});
    backend_of(x).binary(BinaryOp::mul, kv(out), kv(x), kv(zero.expand(x.sizes())), 1.0);
    return {out, Tensor()};
  }
  check_dtype_rule("dropout", OpId::dropout, x);
  // native_dropout (CUDA): the bool mask, then the output (laid out like x). Measured on the H100
  // (events.jsonl "dropout [1024, 1024]": alloc 1048576, then alloc 4194304).
  Tensor mask = empty_elementwise_output(x.sizes(), ScalarType::bool_, x.device(), {&x});
  Tensor out = empty_elementwise_output(x.sizes(), x.dtype(), x.device(), {&x});
  // One fused kernel that draws with curand (device_backend.h).
  if (x.numel() != 0) note_driver_allocations(x.device(), kModuleGlobals | kLaunchHeap);
  if (x.is_meta()) return {out, mask};
  // The keep/drop draws come from the process generator on the host (bernoulli_fill_), in the mask's memory
  // order: an elementwise output is always dense, so its storage is one flat run.
  const double keep = 1.0 - p;
  bernoulli_fill_(mask.as_strided({mask.numel()}, {1}, mask.storage_offset()), keep);
  // out = x * mask / (1 - p), computed in place in out.
  backend_of(x).copy(kv(out), kv(mask));
  backend_of(x).binary(BinaryOp::mul, kv(out), kv(out), kv(x), 1.0);
  backend_of(x).binary_scalar(BinaryOp::mul, kv(out), kv(out), 1.0 / keep, false);
  return {out, mask};
}

}  // namespace

// Recorded as native_dropout (saving the mask, an output: after computing) when a mask was drawn; p == 1
// records as a product.
DropoutResult dropout_with_mask(const Tensor& x, double p, bool train) {
  DropoutResult result = without_recording([&] { return dropout_compute(x, p, train); });
  if (result.mask.defined())
    record_for_autograd({x}, [&] { return make_record<OpId::dropout>({x}, {result.output, result.mask}, {p}); });
  else if (result.output.impl_ptr() != x.impl_ptr())
    record_for_autograd({x}, [&] { return make_record<OpId::mul_scalar>({x}, {result.output}, {0.0}); });
  return result;
}

Tensor dropout(const Tensor& x, double p, bool train) { return dropout_with_mask(x, p, train).output; }

Tensor native_dropout_backward(const Tensor& grad, const Tensor& mask, double scale) {
  AllocationScope scope("dropout_backward");
  check_same_device("native_dropout_backward", grad, mask);
  if (mask.dtype() != ScalarType::bool_ || mask.sizes() != grad.sizes())
    throw std::invalid_argument(
        fmt::format("native_dropout_backward: the mask {} must be bool and shaped like the gradient {}", describe(mask),
                    describe(grad)));
  Tensor out = empty(grad.sizes(), TensorOptions{grad.dtype(), grad.device()});
  // Three passes over the one block (zeros, kept gradients, scale): the allocation is what PyTorch's fused
  // kernel makes.
  KernelBackend& backend = backend_of(out);
  backend.fill(kv(out), 0.0);
  backend.where(kv(out), kv(mask), kv(grad), kv(out));
  backend.binary_scalar(BinaryOp::mul, kv(out), kv(out), scale, false);
  return out;
}

// -------------------------------------------------------------------------------------- embedding

// at::embedding: index_select on dim 0 (indices flattened with reshape, which copies only when it must),
// viewed as indices.shape + [embedding_dim].
namespace {

Tensor embedding_compute(const Tensor& weight, const Tensor& indices) {
  AllocationScope scope("embedding");
  check_same_device("embedding", weight, indices);
  if (weight.dim() != 2)
    throw std::invalid_argument(fmt::format("embedding: the weight {} must be 2-d", describe(weight)));
  if (indices.dtype() != ScalarType::int64 && indices.dtype() != ScalarType::int32)
    throw std::invalid_argument(fmt::format("embedding: indices {} must be int64 or int32", describe(indices)));
  if (indices.dim() == 1) return index_select_impl(weight, 0, indices, "embedding");
  Shape shape = indices.sizes();
  shape.push_back(weight.sizes()[1]);
  return index_select_impl(weight, 0, indices.reshape({-1}), "embedding").view(shape);
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  OpRecording recording = begin_recording<OpId::embedding>({weight, indices});
  Tensor out = without_recording([&] { return embedding_compute(weight, indices); });
  recording.finish({out});
  return out;
}

// --------------------------------------------------------------------------- embedding backward

// PyTorch's embedding_dense_backward_cuda (Embedding.cu, EmbeddingBackwardKernel.cu) and the temporary
// storage of the CUB calls it makes, measured on the H100 with PyTorch 2.11
// (tests/data/pytorch_probes/gpt2/embedding.events, tools/probes/gpt2_memory_events.py).
namespace {

constexpr int64_t kEmbeddingSortThreshold = 3072;  // num_indices above it: the sort-based path
constexpr int64_t kRowsPerPartialSegment = 10;     // NROWS_PER_THREAD

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// CUB's temporary storage: its parts, each aligned to 256 bytes, plus 255 bytes of slack to align the start
// (AliasTemporaries). Fitted to the recorded sizes (N = 3073 ... 65536, int64 keys and values):
// DeviceRadixSort::SortPairs (onesweep, 8 passes of 8 bits over 64-bit keys): the alternate keys and
// values (N each), the pass histograms (8 x 256 x 8 bytes), a counter block and one 256-digit x 4-byte
// lookback row per tile of 4608 items (the recorded sizes place the tile in [4370, 4681)). Measured with
// int64 indices only: int32 indices (fewer passes, other tiles) would need their own recording.
int64_t radix_sort_pairs_temp_bytes(int64_t n, int64_t key_bytes, int64_t value_bytes) {
  const int64_t tiles = (n + 4607) / 4608;
  return 255 + align256(n * key_bytes) + align256(n * value_bytes) + int64_t{8} * 256 * 8 + 256 +
         align256(tiles * 1024);
}
// DeviceScan::ExclusiveSum over int64 (tiles of 896 items; [786, 1024) fits the records) and
// DeviceSelect::UniqueByKey (recorded constant up to 65536 items; tiles of 4096 assumed above): a 256-byte
// part and the tile states, 16 bytes for each tile and 32 of padding.
int64_t scan_temp_bytes(int64_t n, int64_t tile_items) {
  const int64_t tiles = (n + tile_items - 1) / tile_items;
  return 255 + 256 + align256((tiles + 32) * 16);
}

Tensor bytes_on(Device device, int64_t n) { return empty({n}, TensorOptions{ScalarType::uint8, device}); }

}  // namespace

Tensor embedding_dense_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights) {
  AllocationScope scope("embedding_backward");
  check_same_device("embedding_dense_backward", grad, indices);
  const int64_t num_indices = indices.numel();
  const int64_t dim = grad.size(-1);
  Tensor flat_grad = grad.contiguous().view({num_indices, dim});
  Tensor flat_indices = indices.reshape({-1});
  const TensorOptions index_options{indices.dtype(), indices.device()};
  const int64_t index_bytes = static_cast<int64_t>(element_size(indices.dtype()));
  auto accumulate = [&](const Tensor& grad_weight) {
    backend_for(grad_weight.device())
        .index_add(grad_weight.view_for_kernels(), 0, flat_indices.contiguous().view_for_kernels(),
                   flat_grad.view_for_kernels());
  };
  if (num_indices <= kEmbeddingSortThreshold) {
    // embedding_backward_feature_kernel straight into a zeroed gradient.
    Tensor grad_weight = zeros({num_weights, dim}, TensorOptions{grad.dtype(), grad.device()});
    accumulate(grad_weight);
    return grad_weight;
  }
  // Sort the indices (with their positions), then sum each run of equal indices in partial segments of
  // 10 rows into a per-partial-segment buffer and scatter those sums into the gradient.
  Tensor sorted_indices = empty({num_indices}, index_options);
  Tensor orig_indices = empty({num_indices}, index_options);
  {
    Tensor range = empty({num_indices}, index_options);  // arange(num_indices): the values sorted along
    bytes_on(grad.device(), radix_sort_pairs_temp_bytes(num_indices, index_bytes, index_bytes));
  }
  Tensor grad_weight = zeros({num_weights, dim}, TensorOptions{grad.dtype(), grad.device()});
  // embedding_backward_cuda_kernel's locals, freed in reverse order when it returns.
  const int64_t max_segments = std::min(num_indices, num_weights);
  const TensorOptions long_options{ScalarType::int64, grad.device()};
  Tensor segment_offsets = empty({num_indices}, index_options);
  Tensor num_of_segments = empty({}, long_options);
  {
    Tensor unique_keys = empty({num_indices}, index_options);  // unique_by_key's keys_out
    bytes_on(grad.device(), scan_temp_bytes(num_indices, 4096));
  }
  Tensor partials_per_segment = empty({max_segments}, index_options);
  Tensor partials_per_segment_offset = empty({max_segments}, index_options);
  bytes_on(grad.device(), scan_temp_bytes(max_segments, 896));  // exclusive_sum
  Tensor num_of_partial_segments = empty({}, long_options);
  const int64_t max_partial_segments = num_indices / kRowsPerPartialSegment + max_segments;
  Tensor partial_segment_offset = empty({max_partial_segments}, index_options);
  // Summed in the accumulation type: float for the 16- and 32-bit floats, double for float64.
  const ScalarType accumulation = grad.dtype() == ScalarType::float64 ? ScalarType::float64 : ScalarType::float32;
  Tensor grad_weight_per_segment = empty({max_partial_segments, dim}, TensorOptions{accumulation, grad.device()});
  accumulate(grad_weight);
  return grad_weight;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_defined("leaky_relu", x);
  check_dtype_rule("leaky_relu", OpId::leaky_relu, x);
  return compute_recorded<OpId::leaky_relu>({x}, {negative_slope}, [&] {
    AllocationScope scope("leaky_relu");
    Tensor out = empty_elementwise_output(x.sizes(), x.dtype(), x.device(), {&x});
    // leaky_relu_backward's kernel with the input as both gradient and self: x > 0 ? x : x * slope.
    backend_of(x).binary(BinaryOp::leaky_relu_backward, kv(out), kv(x), kv(x), negative_slope);
    return out;
  });
}

}  // namespace bytegrad
