#include "bytegrad/tensor/pending_scores.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "bytegrad/core/view_bytes.h"
#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/freed_bytes_readable.h"

namespace bytegrad {

namespace {

struct Pending {
  PendingScores chain;
  std::thread::id owner;
};

// Every thread's chain (at most one each). Guarded by chains_mutex; `pending` mirrors its size for the
// backend calls' fast path.
std::mutex chains_mutex;
std::vector<Pending> chains;
std::atomic<size_t> pending{0};
std::atomic<bool> enabled{true};
std::atomic<uint64_t> started{0}, fused{0}, copies_fused{0};

std::vector<StridedView> views_of(const PendingScores& chain) {
  std::vector<StridedView> views{chain.source, chain.scaled};
  if (chain.mask) views.push_back(*chain.mask);
  if (chain.masked) views.push_back(*chain.masked);
  if (chain.softmax) views.push_back(chain.softmax->out);
  return views;
}

bool overlaps(const PendingScores& chain, const StridedView& view) {
  if (view.device != chain.source.device || view.numel() == 0) return false;
  const ByteRange touched = bytes_spanned(view);
  return std::ranges::any_of(views_of(chain),
                             [&](const StridedView& part) { return ranges_overlap(touched, bytes_spanned(part)); });
}

// Takes out (under the lock) the chains `pick` selects.
template <typename Pick>
std::vector<Pending> take_where(Pick&& pick) {
  std::lock_guard lock(chains_mutex);
  std::vector<Pending> taken;
  for (auto it = chains.begin(); it != chains.end();) {
    if (pick(*it)) {
      taken.push_back(std::move(*it));
      it = chains.erase(it);
    } else {
      ++it;
    }
  }
  pending.store(chains.size(), std::memory_order_release);
  return taken;
}

void write_taken(const std::vector<Pending>& taken) {
  for (const Pending& p : taken) {
    KernelBackend& kernels = kernel_backend(p.chain.source.device);
    // Another thread's chain: its source was written on that thread's stream; wait for it, and make the
    // writes here visible to that thread's later kernels.
    const bool other = p.owner != std::this_thread::get_id();
    if (other) kernels.wait_for_device();
    write_pending_scores(p.chain);
    if (other) kernels.wait_for_device();
  }
}

}  // namespace

bool defers_scores_on(Device device) {
  if (device.type != DeviceType::cuda && device.type != DeviceType::sim) return false;
  if (!enabled.load(std::memory_order_relaxed)) return false;
  const AutogradHook* hook = autograd_hook();
  return hook == nullptr || !hook->saved_tensors_hooked();
}

void set_defers_scores(bool on) {
  enabled.store(on, std::memory_order_relaxed);
  if (!on) write_out_own_pending_scores();
}

bool defers_scores() { return enabled.load(std::memory_order_relaxed); }

void defer_scaled_scores(const StridedView& out, const StridedView& source, ScalarStep step) {
  write_out_own_pending_scores();
  std::lock_guard lock(chains_mutex);
  chains.push_back({PendingScores{source, step, out}, std::this_thread::get_id()});
  pending.store(chains.size(), std::memory_order_release);
  started.fetch_add(1, std::memory_order_relaxed);
}

bool defer_masked_scores(const StridedView& out, const StridedView& src, const StridedView& mask, double value) {
  if (pending.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(chains_mutex);
  const auto own = std::ranges::find(chains, std::this_thread::get_id(), &Pending::owner);
  if (own == chains.end() || own->chain.masked || own->chain.softmax || !same_view(src, own->chain.scaled))
    return false;
  own->chain.mask = mask;
  own->chain.value = value;
  own->chain.masked = out;
  return true;
}

std::optional<PendingScores> take_pending_scores(const StridedView& input) {
  if (pending.load(std::memory_order_acquire) == 0) return std::nullopt;
  std::lock_guard lock(chains_mutex);
  const auto own = std::ranges::find(chains, std::this_thread::get_id(), &Pending::owner);
  if (own == chains.end() || own->chain.softmax || !same_view(input, own->chain.last())) return std::nullopt;
  PendingScores chain = std::move(own->chain);
  chains.erase(own);
  pending.store(chains.size(), std::memory_order_release);
  return chain;
}

bool writes_clear_of_reads(const PendingScores& chain, const StridedView& written) {
  const ByteRange bytes = bytes_spanned(written);
  return (same_view(written, chain.source) || !ranges_overlap(bytes, bytes_spanned(chain.source))) &&
         (!chain.mask || !ranges_overlap(bytes, bytes_spanned(*chain.mask)));
}

void defer_softmax_of_scores(PendingScores chain, const PendingSoftmax& softmax) {
  write_out_own_pending_scores();
  chain.softmax = softmax;
  std::lock_guard lock(chains_mutex);
  chains.push_back({std::move(chain), std::this_thread::get_id()});
  pending.store(chains.size(), std::memory_order_release);
}

namespace {

// softmax's step of a chain in one kernel, with `copy` beside it where given: whether the backend took it.
bool write_fused(const PendingScores& chain, const StridedView* copy) {
  const PendingSoftmax& s = *chain.softmax;
  const StridedView* mask = chain.mask ? &*chain.mask : nullptr;
  if (!kernel_backend(chain.source.device)
           .softmax_of_scaled(s.out, chain.source, chain.scale, mask, chain.value, s.dim, s.log, copy))
    return false;
  fused.fetch_add(1, std::memory_order_relaxed);
  if (copy != nullptr) copies_fused.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool write_pending_scores_with_copy(const StridedView& input, const StridedView& copy) {
  if (pending.load(std::memory_order_acquire) == 0) return false;
  std::optional<PendingScores> chain;
  {
    std::lock_guard lock(chains_mutex);
    const auto own = std::ranges::find(chains, std::this_thread::get_id(), &Pending::owner);
    if (own == chains.end() || !own->chain.softmax || !same_view(input, own->chain.softmax->out)) return false;
    chain = std::move(own->chain);
    chains.erase(own);
    pending.store(chains.size(), std::memory_order_release);
  }
  // Eager's copy mostly takes the scores' freed block: the source itself.
  {
    const FreedBytesReadable readable(views_of(*chain));
    if (writes_clear_of_reads(*chain, copy) && write_fused(*chain, &copy)) return true;
  }
  write_pending_scores(*chain);
  return false;
}

void write_pending_scores(const PendingScores& chain) {
  const FreedBytesReadable readable(views_of(chain));
  if (chain.softmax && write_fused(chain, nullptr)) return;
  KernelBackend& kernels = kernel_backend(chain.source.device);
  kernels.binary_scalar(chain.scale.op, chain.scaled, chain.source, chain.scale.scalar, false);
  if (chain.masked) kernels.masked_fill(*chain.masked, chain.scaled, *chain.mask, chain.value);
  if (chain.softmax) kernels.softmax(chain.softmax->out, chain.scores(), chain.softmax->dim, chain.softmax->log);
}

bool pending_scores_exist() { return pending.load(std::memory_order_acquire) != 0; }

void settle_pending_scores(std::span<const StridedView* const> views) {
  if (!pending_scores_exist()) return;
  write_taken(take_where([&](const Pending& p) {
    return std::ranges::any_of(views, [&](const StridedView* view) { return overlaps(p.chain, *view); });
  }));
}

void write_out_pending_scores(Device device) {
  if (!pending_scores_exist()) return;
  write_taken(take_where([&](const Pending& p) { return p.chain.source.device == device; }));
}

void write_out_own_pending_scores() {
  if (!pending_scores_exist()) return;
  const std::thread::id self = std::this_thread::get_id();
  write_taken(take_where([&](const Pending& p) { return p.owner == self; }));
}

uint64_t pending_scores_started() { return started.load(std::memory_order_relaxed); }
uint64_t pending_scores_fused() { return fused.load(std::memory_order_relaxed); }
uint64_t pending_scores_copies_fused() { return copies_fused.load(std::memory_order_relaxed); }

}  // namespace bytegrad
