#include "bytegrad/tensor/gradient_reader.h"

#include <atomic>
#include <utility>

namespace bytegrad {

namespace {

// Per thread: a backward runs on one thread (the engine's), and so do the ops it calls.
thread_local std::optional<SoleCastReader> offer;
thread_local const StorageImpl* in_flight = nullptr;  // packed rows handed, not yet taken
std::atomic<uint64_t> handed{0};

}  // namespace

SoleCastReaderScope::SoleCastReaderScope(std::optional<SoleCastReader> made)
    : previous_(std::exchange(offer, std::move(made))) {}

SoleCastReaderScope::~SoleCastReaderScope() { offer = std::move(previous_); }

std::optional<SoleCastReader> take_sole_cast_reader() { return std::exchange(offer, std::nullopt); }

void hand_packed_nll_rows(const StorageImpl* storage) {
  in_flight = storage;
  handed.fetch_add(1, std::memory_order_relaxed);
}

uint64_t packed_nll_rows_handed() { return handed.load(std::memory_order_relaxed); }

bool take_packed_nll_rows(const StorageImpl* storage) {
  if (in_flight == nullptr || in_flight != storage) return false;
  in_flight = nullptr;
  return true;
}

bool packed_nll_rows_pending() { return in_flight != nullptr; }

void forget_packed_nll_rows() { in_flight = nullptr; }

}  // namespace bytegrad
