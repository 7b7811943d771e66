// Where a device's time goes, per kernel-backend call: with BYTEGRAD_PROFILE_KERNELS=1 in the environment
// (read once, at the first backend call), every KernelBackend call on cuda, cuBLAS products included, is
// bracketed by two CUDA events on the stream it runs on, and the time between them is summed per key
// ("binary add float32", "gemm float32 TN m768 n1024 k3072") and per label (the autograd node being
// applied, "AdamW.step", or in forward the op's allocation tag). Off, each backend call costs one branch.
//
// The time between a call's two events is what the GPU spent on that call's work, plus any time the GPU
// sat idle between them waiting for the host to launch it (so a host-bound stretch shows up as slower
// kernels, not as a separate row). Events are resolved in batches: every few thousand calls the profiler
// waits for the last recorded event, which slows the profiled run a little; time steps with the profiler
// off and read the table for the split.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/core/scoped_value.h"

namespace bytegrad {

namespace kernel_profile_detail {
bool read_enabled();
}

// BYTEGRAD_PROFILE_KERNELS=1 (or any value but "" and "0"), read once.
inline bool kernel_profiling_enabled() {
  static const bool enabled = kernel_profile_detail::read_enabled();
  return enabled;
}

// Names what the calls made during its lifetime belong to (an autograd node, an optimizer step);
// nested labels: the innermost wins. Does nothing when profiling is off.
class KernelProfileLabel {
 public:
  explicit KernelProfileLabel(std::string_view label);

 private:
  std::optional<ScopedValue<std::string>> scope_;  // set only when profiling
};

struct KernelProfileRow {
  std::string key;
  int64_t calls = 0;
  double total_ms = 0;
};

struct KernelProfile {
  std::vector<KernelProfileRow> by_key;    // "method op dtype": largest total first
  std::vector<KernelProfileRow> by_label;  // "label | method op": largest total first
  double total_ms = 0;
};

// Everything recorded since the last reset (waits for the outstanding events first).
KernelProfile kernel_profile();
// Forgets everything recorded so far (after warm-up steps, say).
void kernel_profile_reset();
// The two tables as text: calls, total ms, ms per step, % of total; `steps` divides the totals (1: as
// recorded); `top` limits each table's rows (0: all).
std::string kernel_profile_report(int steps = 1, size_t top = 0);

// For the backends: the label calls are attributed to now ("" when none is set).
const std::string& kernel_profile_label();
// For the backends: adds one timed call. `label` is the attribution (kernel_profile_label() or, when that
// is empty, the caller's choice).
void kernel_profile_add(const std::string& key, const std::string& label, double ms);
// For the backends: a function that resolves the backend's outstanding events into kernel_profile_add
// calls; kernel_profile() and the report call every registered one first.
void kernel_profile_register_flush(void (*flush)());

}  // namespace bytegrad
