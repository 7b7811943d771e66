// A gradient handed to its one reader in a form only that reader understands (issue 30: a fused engine's
// speed with eager's exact allocations).
//
// Before a backward node runs, the autograd engine knows whether the gradient it returns first (next edge 0)
// goes to exactly one node, run right after it with no hook between, that only casts it to another dtype
// (ToCopyBackward0: autocast's float32 loss cast on its way back). It offers that here for the node's apply.
// nll_loss_backward takes the offer: it allocates its zeroed gradient as eager does but, instead of zeroing a
// (rows x classes) tensor and writing one element a row, writes each row's column and value into the
// gradient's first bytes (KernelBackend::nll_loss_backward_rows); the cast (Tensor::to) then writes its whole
// output from them (KernelBackend::cast_nll_rows). Every allocation, its order and every value are eager's;
// the float32 gradient is never filled or read whole. The engine checks the cast took it before anything
// else ran.
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

// nll_loss_backward after writing packed rows into the gradient whose storage this is; the cast takes them
// back by the storage it reads (true once, for that storage; the rows and classes are the tensors' own).
void hand_packed_nll_rows(const StorageImpl* storage);
bool take_packed_nll_rows(const StorageImpl* storage);
// Whether packed rows were handed and not yet taken (the engine's check), and dropping them (on error).
bool packed_nll_rows_pending();
void forget_packed_nll_rows();
// How many gradients were handed on as packed rows in this process (tests and profiles).
uint64_t packed_nll_rows_handed();

// The packed layout in the gradient's first bytes: `rows` int64 columns (-1: the row stays zero), then
// `rows` values of the gradient's dtype. It fits when rows * (8 + element size) <= rows * classes * element size.
inline bool packed_nll_rows_fit(int64_t classes, size_t element_size) {
  return classes * static_cast<int64_t>(element_size) >= 8 + static_cast<int64_t>(element_size);
}

}  // namespace bytegrad
