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
#pragma once

#include <cstdint>
#include <optional>

#include "bytegrad/core/scalar_type.h"
#include "bytegrad/core/strided_view.h"

namespace bytegrad {

class StorageImpl;

// The offer: the reader casts to cast_to, and expects a gradient of this dtype and shape.
struct SoleCastReader {
  ScalarType cast_to = ScalarType::float32;
  ScalarType dtype = ScalarType::float32;
  Shape sizes;
};

// Makes the offer for the scope of one node's apply (the engine); nullopt makes none.
class SoleCastReaderScope {
 public:
  explicit SoleCastReaderScope(std::optional<SoleCastReader> offer);
  ~SoleCastReaderScope();
  SoleCastReaderScope(const SoleCastReaderScope&) = delete;
  SoleCastReaderScope& operator=(const SoleCastReaderScope&) = delete;

 private:
  std::optional<SoleCastReader> previous_;
};

// Takes the offer, once: nullopt when none was made or it was taken.
std::optional<SoleCastReader> take_sole_cast_reader();

// What a packed gradient's first bytes hold: the forms its reader (the cast) knows.
enum class PackedGradient {
  nll_rows,     // nll_loss_backward's rows (layout below); the cast writes its output from them
  cast_values,  // every element already in the cast's dtype, contiguous; the cast copies them
};

// A backward op after writing its gradient packed; the cast takes the form back by the storage it reads
// (once, for that storage; sizes and dtypes are the tensors' own).
void hand_packed_gradient(const StorageImpl* storage, PackedGradient form);
std::optional<PackedGradient> take_packed_gradient(const StorageImpl* storage);
// Whether a packed gradient was handed and not yet taken (the engine's check), and dropping it (on error).
bool packed_gradient_pending();
void forget_packed_gradient();
// How many gradients of each form were handed on packed in this process (tests and profiles).
uint64_t packed_gradients_handed(PackedGradient form);

// The packed layout in the gradient's first bytes: `rows` int64 columns (-1: the row stays zero), then
// `rows` values of the gradient's dtype. It fits when rows * (8 + element size) <= rows * classes * element size.
inline bool packed_nll_rows_fit(int64_t classes, size_t element_size) {
  return classes * static_cast<int64_t>(element_size) >= 8 + static_cast<int64_t>(element_size);
}

}  // namespace bytegrad
