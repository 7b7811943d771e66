// Attention scores left unwritten until their reader is known (issue 30: a fused engine's speed with eager's
// exact allocations).
//
// nanoGPT's slow attention writes three T x T tensors before softmax reads the last: the scaled scores
// (`(q @ k^T) * scale`), the masked ones (`masked_fill(mask, -inf)`), and softmax's output; the first two are
// read by nobody else and freed soon after. A mul or div by a number whose output autograd records (the
// forward of training) allocates its output as eager does and leaves it pending: unwritten, with what it
// would be written from. An out-of-place masked_fill of exactly that output extends the chain the same way.
// softmax of exactly the chain's last output, where what it reads does not overlap its output, takes the
// last step: its output too is left unwritten (its launch noted), and is written with the rest by one kernel
// (KernelBackend::softmax_of_scaled) where the backend takes it (else eager's kernels, in order). A cast of
// exactly that output to a 16-bit float (autocast's copy of the probabilities for `att @ v`) is written by
// the same kernel, beside it: the float32 probabilities are written once and never read back for the copy.
//
// Nothing may read or write the chain's bytes (its source, whose block may be free by then, its outputs, its
// mask) in between: every backend call through backend_for (tensor/device_backend.h) settles the chains its
// views overlap first (writes them out: eager's kernels, in order); a gemm, an attention call, the autograd
// engine's backward, a collective and memory going back to the driver write out every chain on their device.
// One chain per thread; cuda and sim only (cpu frees return memory at once; meta runs no kernels).
#pragma once

#include <optional>
#include <span>

#include "bytegrad/core/strided_view.h"
#include "bytegrad/kernels/backend.h"

namespace bytegrad {

// softmax (log_softmax with `log`) along dim of the chain's masked (or scaled) output into `out`.
struct PendingSoftmax {
  StridedView out;
  int64_t dim = -1;
  bool log = false;
};

struct PendingScores {
  StridedView source;                     // the elements the chain starts from
  ScalarStep scale;                       // scaled = source op scalar (binary_scalar's bits, in source's dtype)
  StridedView scaled;                     // the mul's (or div's) output, unwritten
  std::optional<StridedView> mask;        // the masked_fill's mask, broadcast to scaled's sizes
  double value = 0.0;                     // and its fill value
  std::optional<StridedView> masked;      // the masked_fill's output, unwritten
  std::optional<PendingSoftmax> softmax;  // softmax's output, unwritten
  const StridedView& scores() const { return masked ? *masked : scaled; }
  const StridedView& last() const { return softmax ? softmax->out : scores(); }
};

// Whether a chain may start on `device` now: cuda or sim, the switch on, and no saved-tensor hooks on this
// thread (a hook may read what an op saves or makes outside any kernel call).
bool defers_scores_on(Device device);
// Tests and benchmarks: every chain written at once (false) or deferred where it may be (true, the default).
void set_defers_scores(bool on);
bool defers_scores();

// A mul or div by a number (binary_scalar's `step`) into `out` from `source`, both contiguous, one floating
// dtype: left pending (the caller notes its launch). This thread's earlier chain is written out first.
void defer_scaled_scores(const StridedView& out, const StridedView& source, ScalarStep step);
// An out-of-place masked_fill into `out` (contiguous) from `src`: where src is exactly this thread's pending
// chain's last output and that is a scaled one, the chain takes the step (the caller notes its launch) and
// true; else false and nothing changes.
bool defer_masked_scores(const StridedView& out, const StridedView& src, const StridedView& mask, double value);
// This thread's chain whose last output is `input` exactly and has no softmax step yet, taken (its launches
// were noted); nullopt when none.
std::optional<PendingScores> take_pending_scores(const StridedView& input);
// Whether the one-pass kernel may write `written` while it reads the chain: written is the source itself
// (each row is read whole before it is written) or overlaps neither the source nor the mask (a block
// allocated after the source was freed may sit over it). The unwritten steps' outputs it never reads.
bool writes_clear_of_reads(const PendingScores& chain, const StridedView& written);
// Puts a taken chain back as this thread's with softmax's step into `out` (the caller notes its launch).
void defer_softmax_of_scores(PendingScores chain, const PendingSoftmax& softmax);
// A cast of `input` into `copy` (16-bit float, contiguous, input's sizes) where `input` is exactly this
// thread's pending softmax output (float32): the chain taken and written, with the copy beside softmax's
// output where the backend's kernel takes it (true: `copy` written; the caller notes the cast's launch).
// false: no such chain, or the copy was not written (the chain written out then; the caller copies).
bool write_pending_scores_with_copy(const StridedView& input, const StridedView& copy);
// Writes a taken chain into its outputs: softmax's step by one kernel where the backend takes it, else
// eager's kernels in order.
void write_pending_scores(const PendingScores& chain);

// Whether any thread has a chain pending (one atomic load: the backend calls' fast path).
bool pending_scores_exist();
// Before a backend call that reads or writes `views`: the chains their bytes overlap are written out.
void settle_pending_scores(std::span<const StridedView* const> views);
// Every chain on `device` written out (a gemm, attention, backward, a collective, memory going back).
void write_out_pending_scores(Device device);
// Every chain of this thread written out.
void write_out_own_pending_scores();
// How many chains were started, how many were read by softmax in one kernel, and how many of those wrote
// a cast's copy too (tests, profiles).
uint64_t pending_scores_started();
uint64_t pending_scores_fused();
uint64_t pending_scores_copies_fused();

}  // namespace bytegrad
