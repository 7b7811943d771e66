#include "bytegrad/kernels/cuda/cuda_launch_stream.h"
#include "bytegrad/kernels/cuda/cuda_profile.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "bytegrad/kernels/cuda/cuda_check.h"
#include "bytegrad/memory/allocation_context.h"

namespace bytegrad::cuda {

namespace {

// One timed call: its key and label, and its two events (on the device that was current).
struct Pending {
  std::string key, label;
  int device = 0;
  cudaEvent_t begin = nullptr, end = nullptr;
};

constexpr size_t kBatch = 4096;  // calls between waits for the GPU

struct Timers {
  std::mutex mutex;
  std::vector<Pending> pending;
  std::vector<std::pair<int, cudaEvent_t>> free_events;  // (device, event)
  long generation = 0;  // bumped at each resolve: a call started before it is not ended into a new batch
};

Timers& timers() {
  static Timers* t = new Timers;  // never destroyed (the exit report flushes)
  return *t;
}

cudaEvent_t take_event(Timers& t, int device) {
  for (size_t i = t.free_events.size(); i-- > 0;) {
    if (t.free_events[i].first != device) continue;
    cudaEvent_t e = t.free_events[i].second;
    t.free_events.erase(t.free_events.begin() + static_cast<std::ptrdiff_t>(i));
    return e;
  }
  cudaEvent_t e = nullptr;
  BYTEGRAD_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

// Resolves every pending call (waits for the last end event of each); the lock must be held.
void resolve_locked(Timers& t) {
  if (t.pending.empty()) return;
  int current = 0;
  (void)cudaGetDevice(&current);
  for (const Pending& p : t.pending)
    if (p.end) (void)cudaEventSynchronize(p.end);  // in stream order: cheap after the first
  for (Pending& p : t.pending) {
    float ms = 0;
    if (p.begin && p.end && cudaEventElapsedTime(&ms, p.begin, p.end) == cudaSuccess)
      kernel_profile_add(p.key, p.label, ms);
    if (p.begin) t.free_events.emplace_back(p.device, p.begin);
    if (p.end) t.free_events.emplace_back(p.device, p.end);
  }
  t.pending.clear();
  ++t.generation;
  (void)cudaGetLastError();  // a failed elapsed-time query must not surface at the next launch check
}

void flush() {
  Timers& t = timers();
  std::lock_guard<std::mutex> lock(t.mutex);
  resolve_locked(t);
}

}  // namespace

void CudaCallTimer::start(const char* method, std::string_view op, ScalarType dtype) {
  std::string key = method;
  if (!op.empty()) {
    key += ' ';
    key += op;
  }
  key += ' ';
  key += scalar_type_name(dtype);
  start(std::move(key));
}

void CudaCallTimer::start(std::string key) {
  static const bool registered = (kernel_profile_register_flush(&flush), true);
  (void)registered;
  Timers& t = timers();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.pending.size() >= kBatch) resolve_locked(t);
  Pending p;
  p.key = std::move(key);
  const std::string& label = kernel_profile_label();
  p.label = label.empty() ? current_allocation_tag() : label;
  if (p.label.empty()) p.label = "(untagged)";
  BYTEGRAD_CUDA_CHECK(cudaGetDevice(&p.device));
  p.begin = take_event(t, p.device);
  p.end = take_event(t, p.device);
  BYTEGRAD_CUDA_CHECK(cudaEventRecord(p.begin, launch_stream()));
  slot_ = static_cast<long>(t.pending.size());
  generation_ = t.generation;
  t.pending.push_back(std::move(p));
}

void CudaCallTimer::stop() noexcept {
  Timers& t = timers();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (generation_ == t.generation && slot_ < static_cast<long>(t.pending.size()))
    (void)cudaEventRecord(t.pending[slot_].end, launch_stream());
}

}  // namespace bytegrad::cuda
