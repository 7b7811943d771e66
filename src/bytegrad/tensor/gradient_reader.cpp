#include "bytegrad/tensor/gradient_reader.h"

#include <array>
#include <atomic>
#include <utility>

namespace bytegrad {

namespace {

// Per thread: a backward runs on one thread (the engine's), and so do the ops it calls.
thread_local std::optional<SoleCastReader> offer;
// The packed gradient handed on and not yet taken, and its form.
thread_local const StorageImpl* in_flight = nullptr;
thread_local PackedGradient in_flight_form = PackedGradient::nll_rows;
std::array<std::atomic<uint64_t>, 2> handed{};

}  // namespace

SoleCastReaderScope::SoleCastReaderScope(std::optional<SoleCastReader> made)
    : previous_(std::exchange(offer, std::move(made))) {}

SoleCastReaderScope::~SoleCastReaderScope() { offer = std::move(previous_); }

std::optional<SoleCastReader> take_sole_cast_reader() { return std::exchange(offer, std::nullopt); }

void hand_packed_gradient(const StorageImpl* storage, PackedGradient form) {
  in_flight = storage;
  in_flight_form = form;
  handed.at(static_cast<size_t>(form)).fetch_add(1, std::memory_order_relaxed);
}

uint64_t packed_gradients_handed(PackedGradient form) {
  return handed.at(static_cast<size_t>(form)).load(std::memory_order_relaxed);
}

std::optional<PackedGradient> take_packed_gradient(const StorageImpl* storage) {
  if (in_flight == nullptr || in_flight != storage) return std::nullopt;
  in_flight = nullptr;
  return in_flight_form;
}

bool packed_gradient_pending() { return in_flight != nullptr; }

void forget_packed_gradient() { in_flight = nullptr; }

}  // namespace bytegrad
