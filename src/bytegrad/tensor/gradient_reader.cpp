#include "bytegrad/tensor/gradient_reader.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "bytegrad/core/view_bytes.h"
#include "bytegrad/tensor/freed_bytes_readable.h"
#include "bytegrad/tensor/pending_scores.h"
#include "bytegrad/kernels/backend.h"
#include "bytegrad/memory/caching_allocator.h"

namespace bytegrad {

namespace {

// Per thread: a backward runs on one thread (the engine's), and so do the ops it calls.
thread_local std::optional<SoleReader> offer;

// The packed gradient a thread handed on and not yet taken. Guarded by hand_over_mutex, as another thread
// releasing memory writes out the deferred ones (write_out_deferred_gradients).
struct HandOver {
  const StorageImpl* storage = nullptr;
  PackedGradient form = PackedGradient::nll_rows;
  std::optional<DeferredGradient> deferred;
  std::thread::id owner;
};
std::mutex hand_over_mutex;
std::vector<HandOver*> deferred_hand_overs;  // every thread's HandOver holding a deferred gradient
thread_local HandOver hand_over;
std::array<std::atomic<uint64_t>, 3> handed{};

void unlist(HandOver& state) {
  std::erase(deferred_hand_overs, &state);
  state.deferred.reset();
}

bool on_device(const DeferredGradient& deferred, Device device) { return deferred.source.device == device; }

// The allocator's hook: before memory on `device` goes back to the driver, the deferred gradients whose
// source or steps may lie there are written out (eager's steps, replayed) and handed on as written ones.
void write_out_deferred_gradients(Device device) {
  write_out_pending_scores(device);  // the forward's pending scores too (pending_scores.h)
  std::lock_guard lock(hand_over_mutex);
  for (HandOver* state : std::vector<HandOver*>(deferred_hand_overs)) {
    if (!on_device(*state->deferred, device)) continue;
    // Another thread's kernels ran on its own stream: wait for them before reading what they wrote.
    if (state->owner != std::this_thread::get_id()) kernel_backend(device).wait_for_device();
    replay_deferred_gradient(*state->deferred);
    // The memory goes back once the hook returns (an unmap does not wait for kernels in flight).
    kernel_backend(device).wait_for_device();
    state->storage = nullptr;  // the reader finds a written gradient
    unlist(*state);
  }
}

[[maybe_unused]] const bool hook_set = [] {
  set_before_memory_returned(&write_out_deferred_gradients);
  return true;
}();

}  // namespace

SoleReaderScope::SoleReaderScope(std::optional<SoleReader> made) : previous_(std::exchange(offer, std::move(made))) {}

SoleReaderScope::~SoleReaderScope() { offer = std::move(previous_); }

std::optional<SoleReader> take_sole_reader() { return std::exchange(offer, std::nullopt); }

void hand_packed_gradient(const StorageImpl* storage, PackedGradient form) {
  std::lock_guard lock(hand_over_mutex);
  if (hand_over.deferred) unlist(hand_over);
  hand_over.storage = storage;
  hand_over.form = form;
  handed.at(static_cast<size_t>(form)).fetch_add(1, std::memory_order_relaxed);
}

bool defers_gradients_on(Device device) { return device.type != DeviceType::cpu; }

void hand_deferred_gradient(const StorageImpl* storage, DeferredGradient deferred) {
  hand_packed_gradient(storage, PackedGradient::deferred);
  std::lock_guard lock(hand_over_mutex);
  hand_over.deferred = std::move(deferred);
  hand_over.owner = std::this_thread::get_id();
  deferred_hand_overs.push_back(&hand_over);
}

uint64_t packed_gradients_handed(PackedGradient form) {
  return handed.at(static_cast<size_t>(form)).load(std::memory_order_relaxed);
}

std::optional<PackedGradient> take_packed_gradient(const StorageImpl* storage) {
  std::lock_guard lock(hand_over_mutex);
  if (hand_over.storage == nullptr || hand_over.storage != storage || hand_over.form == PackedGradient::deferred)
    return std::nullopt;
  hand_over.storage = nullptr;
  return hand_over.form;
}

std::optional<DeferredGradient> take_deferred_gradient(const StorageImpl* storage) {
  std::lock_guard lock(hand_over_mutex);
  if (hand_over.storage == nullptr || hand_over.storage != storage || !hand_over.deferred) return std::nullopt;
  hand_over.storage = nullptr;
  std::optional<DeferredGradient> taken = std::move(hand_over.deferred);
  unlist(hand_over);
  return taken;
}

bool packed_gradient_pending() {
  std::lock_guard lock(hand_over_mutex);
  return hand_over.storage != nullptr;
}

const StorageImpl* packed_gradient_storage() {
  std::lock_guard lock(hand_over_mutex);
  return hand_over.storage;
}

void forget_packed_gradient() {
  std::lock_guard lock(hand_over_mutex);
  hand_over.storage = nullptr;
  if (hand_over.deferred) unlist(hand_over);
}

namespace {

// Every view a deferred gradient reads or writes (FreedBytesReadable: their blocks may be free by then).
std::vector<StridedView> views_of(const DeferredGradient& deferred) {
  std::vector<StridedView> views{deferred.source};
  if (deferred.softmax) {
    views.push_back(deferred.softmax->grad_out);
    views.push_back(deferred.softmax->output);
    if (deferred.softmax->grad_out_source) views.push_back(*deferred.softmax->grad_out_source);
  }
  for (const DeferredStep& step : deferred.steps) {
    views.push_back(step.target);
    if (step.mask) views.push_back(*step.mask);
  }
  return views;
}

// A chain from softmax's gradient in one pass (KernelBackend::softmax_backward_then), where it can be: at
// most one mask, every masked step in out's dtype, the values converted at most once on the way (float32
// steps, then out's dtype), and out overlapping nothing the kernel reads but grad_out or output exactly.
// Notes the node's own launch (the steps before it were noted when they were deferred).
bool write_softmax_chain(const DeferredGradient& deferred, const StridedView& out,
                         const std::optional<StridedView>& mask, double value, std::optional<ScalarStep> then,
                         KernelBackend& kernels) {
  const SoftmaxGradientSource& softmax = *deferred.softmax;
  const StridedView& source = deferred.source;
  if (source.dtype != out.dtype && source.dtype != ScalarType::float32) return false;
  const StridedView* the_mask = mask ? &*mask : nullptr;
  double fill = value;
  int masks = mask ? 1 : 0;
  bool converted = false;  // a step in out's dtype came (the values left source's dtype there)
  for (const DeferredStep& step : deferred.steps) {
    if (step.target.dtype == out.dtype) converted = true;
    else if (converted || step.target.dtype != source.dtype) return false;
    if (!step.mask) continue;
    if (step.target.dtype != out.dtype) return false;
    ++masks;
    the_mask = &*step.mask;
    fill = step.value;
  }
  // out may be grad_out or output itself (their freed blocks, reused by the last node's output): each row is
  // read whole before it is written.
  const ByteRange written = bytes_spanned(out);
  const auto clashes = [&](const StridedView& read) {
    return ranges_overlap(written, bytes_spanned(read)) && !same_view(out, read);
  };
  if (masks > 1 || clashes(softmax.grad_out_read()) || clashes(softmax.output) ||
      (the_mask != nullptr && ranges_overlap(written, bytes_spanned(*the_mask))))
    return false;
  if (then) kernels.note_deferred_binary_scalar(out);
  else if (mask) kernels.note_deferred_masked_fill(out, deferred.steps.empty() ? source : deferred.steps.back().target);
  else kernels.note_deferred_copy(out, deferred.steps.empty() ? source : deferred.steps.back().target);
  const ScalarStep* step = then ? &*then : nullptr;
  kernels.softmax_backward_then(out, softmax.grad_out_read(), softmax.output, softmax.dim, the_mask, fill, step);
  return true;
}

}  // namespace

void write_deferred_gradient(const DeferredGradient& deferred, const StridedView& out,
                             const std::optional<StridedView>& mask, double value, std::optional<ScalarStep> then,
                             KernelBackend& kernels) {
  const FreedBytesReadable readable(views_of(deferred));
  if (deferred.softmax && write_softmax_chain(deferred, out, mask, value, then, kernels)) return;
  const StridedView& source = deferred.source;
  // One pass: at most one mask on the way, every step in out's dtype, nothing read overwritten early.
  const StridedView* the_mask = mask ? &*mask : nullptr;
  double fill = value;
  int masks = mask ? 1 : 0;
  bool one_pass = source.dtype == out.dtype;
  for (const DeferredStep& step : deferred.steps) {
    one_pass = one_pass && step.target.dtype == out.dtype;
    if (!step.mask) continue;
    ++masks;
    the_mask = &*step.mask;
    fill = step.value;
  }
  const ByteRange written = bytes_spanned(out);
  one_pass = one_pass && !deferred.softmax && masks <= 1 &&
             (same_view(out, source) || !ranges_overlap(written, bytes_spanned(source))) &&
             (the_mask == nullptr || !ranges_overlap(written, bytes_spanned(*the_mask)));
  if (one_pass) {
    if (the_mask != nullptr && then)
      kernels.masked_fill_then_scalar(then->op, out, source, *the_mask, fill, then->scalar);
    else if (the_mask != nullptr) kernels.masked_fill(out, source, *the_mask, fill);
    else if (then) kernels.binary_scalar(then->op, out, source, then->scalar);
    else kernels.copy(out, source);
    return;
  }
  replay_deferred_gradient(deferred);
  const StridedView& last = deferred.steps.empty() ? source : deferred.steps.back().target;
  if (mask) kernels.masked_fill(out, last, *mask, value);
  else if (then) kernels.binary_scalar(then->op, out, last, then->scalar);
  else kernels.copy(out, last);
}

void replay_deferred_gradient(const DeferredGradient& deferred) {
  const FreedBytesReadable readable(views_of(deferred));
  KernelBackend& kernels = kernel_backend(deferred.source.device);
  if (deferred.softmax) {
    const SoftmaxGradientSource& softmax = *deferred.softmax;
    if (softmax.grad_out_source) kernels.copy(softmax.grad_out, *softmax.grad_out_source);
    kernels.softmax_backward(deferred.source, softmax.grad_out, softmax.output, softmax.dim, false);
  }
  const StridedView* from = &deferred.source;
  for (const DeferredStep& step : deferred.steps) {
    if (step.mask) kernels.masked_fill(step.target, *from, *step.mask, step.value);
    else kernels.copy(step.target, *from);
    from = &step.target;
  }
}

}  // namespace bytegrad
