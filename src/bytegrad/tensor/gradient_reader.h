// A gradient handed to its one reader in a form only that reader understands (issue 30: a fused engine's
// speed with eager's exact allocations).
//
// Before a backward node runs, the autograd engine knows whether the gradient it returns first (next edge 0)
// goes to exactly one node, run right after it with no hook between, that only casts it to another dtype
// (ToCopyBackward0: autocast's float32 loss cast on its way back). It offers that here for the node's apply.
// nll_loss_backward takes the offer: it allocates its zeroed gradient as eager does but, instead of zeroing a
// (rows x classes) tensor and writing one element a row, writes each row's column and value into the
// gradient's first bytes (KernelBackend::nll_loss_backward_rows); the cast (Tensor::to) then writes its whole
// output from them (KernelBackend::cast_nll_rows). softmax_backward takes it too (autocast's float32 copy of a
// 16-bit softmax input, on its way back): it writes its gradient's values already in the cast's dtype into
// the gradient's first bytes, and the cast copies them. Every allocation, its order and every value are
// eager's; the float32 gradient is never written or read whole. The engine checks the cast took it before
// anything else ran.
//
// Deferred gradients: where the reader only casts, masks or scales its gradient (ToCopyBackward0,
// MaskedFillBackward0, MulBackward0 or DivBackward1 by a number: slow attention on its way back), or is
// SoftmaxBackward0, a node that would write its gradient with one kernel (softmax's gradient, a masked_fill,
// a cast, or the cast copying packed values) may leave it unwritten and hand on how to write it: the source (elements,
// or softmax_backward's operands) and each step eager runs from it. Nothing is written in between, so the source is
// intact though its block may be free; the last node of the chain writes its own output from the source in one pass
// (KernelBackend::softmax_backward_then or masked_fill_then_scalar), or, where its output overlaps what it
// reads, replays eager's steps into their own blocks first. Before the allocator gives memory back to the
// driver (empty_cache, an OOM retry), every pending chain on that device is written out (replayed).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bytegrad/core/op_table.h"
#include "bytegrad/core/scalar_type.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/kernels/backend.h"

namespace bytegrad {

class StorageImpl;

// The offer: the reader casts to cast_to (when set), or takes a deferred gradient (takes_deferred), and
// expects a gradient of this dtype and shape.
struct SoleReader {
  std::optional<ScalarType> cast_to;
  bool takes_deferred = false;
  ScalarType dtype = ScalarType::float32;
  Shape sizes;
};

// Makes the offer for the scope of one node's apply (the engine); nullopt makes none.
class SoleReaderScope {
 public:
  explicit SoleReaderScope(std::optional<SoleReader> offer);
  ~SoleReaderScope();
  SoleReaderScope(const SoleReaderScope&) = delete;
  SoleReaderScope& operator=(const SoleReaderScope&) = delete;

 private:
  std::optional<SoleReader> previous_;
};

// Takes the offer, once: nullopt when none was made or it was taken.
std::optional<SoleReader> take_sole_reader();

// What a packed gradient's first bytes hold: the forms its reader knows.
enum class PackedGradient {
  nll_rows,     // nll_loss_backward's rows (layout below); the cast writes its output from them
  cast_values,  // every element already in the cast's dtype, contiguous; the cast copies them
  deferred,     // nothing: the gradient is the DeferredGradient handed with it
};

// A backward op after writing its gradient packed; the reader takes the form back by the storage it reads
// (once, for that storage; sizes and dtypes are the tensors' own).
void hand_packed_gradient(const StorageImpl* storage, PackedGradient form);
std::optional<PackedGradient> take_packed_gradient(const StorageImpl* storage);
// Whether a packed gradient was handed and not yet taken (the engine's check), its storage, and dropping it
// (on error; a deferred one is written out first).
bool packed_gradient_pending();
const StorageImpl* packed_gradient_storage();
void forget_packed_gradient();

// One step eager runs on a deferred gradient's way: it writes `target` from the step before (or the
// source): a copy, or with `mask` an out-of-place masked_fill of `value`.
struct DeferredStep {
  StridedView target;
  std::optional<StridedView> mask;
  double value = 0.0;
};
// Where a chain starts from softmax's gradient (SoftmaxBackward0 deferred its own): what it is computed from.
// With grad_out_source set, grad_out is itself unwritten: eager's float32 cast of those 16-bit elements
// (ToCopyBackward0 deferred it to softmax's gradient: autocast's copy of softmax's output for a product).
struct SoftmaxGradientSource {
  StridedView grad_out, output;
  int64_t dim = -1;
  std::optional<StridedView> grad_out_source;
  // What a kernel reads for grad_out: the cast's source where it was deferred.
  const StridedView& grad_out_read() const { return grad_out_source ? *grad_out_source : grad_out; }
};
struct DeferredGradient {
  StridedView source;  // its elements, unwritten since (their block may be free)
  std::vector<DeferredStep> steps;
  // Set: `source` is softmax's gradient, itself unwritten, computed from these (whose blocks may be free).
  std::optional<SoftmaxGradientSource> softmax;
};
// Whether gradients on `device` may be deferred: where a caching allocator keeps freed blocks until it gives
// them back (cuda, sim, meta), not cpu, whose frees return memory to the host at once.
bool defers_gradients_on(Device device);
// Hands `storage` (the last step's target, unwritten) on as deferred.
void hand_deferred_gradient(const StorageImpl* storage, DeferredGradient deferred);
// The deferred gradient handed as `storage`, taken (once); nullopt when there is none (or it was written out).
std::optional<DeferredGradient> take_deferred_gradient(const StorageImpl* storage);
// Writes every step of `deferred` into its target in order, as eager did (the kernels only: their launches
// were noted when they were deferred).
void replay_deferred_gradient(const DeferredGradient& deferred);
// The last node of a chain: writes `out` from `deferred` and the node's own step (a masked_fill of `value`
// where `mask` is set, else binary_scalar's `then`: a mul or div by a number) with `kernels`, the node's
// backend, which notes the launch as its op's. One pass from the source where out does not overlap what
// that reads (or is the source itself); else eager's steps replayed, then the node's own.
void write_deferred_gradient(const DeferredGradient& deferred, const StridedView& out,
                             const std::optional<StridedView>& mask, double value, std::optional<ScalarStep> then,
                             KernelBackend& kernels);
// How many gradients of each form were handed on packed in this process (tests and profiles).
uint64_t packed_gradients_handed(PackedGradient form);

// The packed layout in the gradient's first bytes: `rows` int64 columns (-1: the row stays zero), then
// `rows` values of the gradient's dtype. It fits when rows * (8 + element size) <= rows * classes * element size.
inline bool packed_nll_rows_fit(int64_t classes, size_t element_size) {
  return classes * static_cast<int64_t>(element_size) >= 8 + static_cast<int64_t>(element_size);
}

}  // namespace bytegrad
