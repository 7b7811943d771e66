#include "bytegrad/tensor/autocast.h"

#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "bytegrad/tensor/autograd_hook.h"
#include "bytegrad/tensor/ops_support.h"

namespace bytegrad {

namespace {

struct CachedCast {
  std::weak_ptr<TensorImpl> source;  // tells a live source from a new tensor at a reused address
  Tensor cast;
};

// Per thread, as PyTorch's (its cache is process-wide behind a mutex, its settings thread-local; bytegrad
// keeps both per thread, so threads never share cached casts).
struct AutocastState {
  bool enabled = false;
  ScalarType dtype = ScalarType::float16;
  bool cache_enabled = true;
  int nesting = 0;
  bool inner_call = false;
  // The casts in the order they were made, and where each source's is. Emptied front to back, so the
  // casts it alone holds are freed in that order, not in an order set by the sources' addresses (which a
  // map keyed by them would give). A cast whose source died leaves an empty entry behind.
  std::vector<CachedCast> cache;
  std::unordered_map<const TensorImpl*, size_t> cache_index;

  void clear_cache() {
    for (CachedCast& entry : cache) entry.cast = Tensor();  // front to back
    cache.clear();
    cache_index.clear();
  }
};

AutocastState& state() {
  thread_local AutocastState s;
  return s;
}

bool gpu_like(DeviceType type) {
  return type == DeviceType::cuda || type == DeviceType::sim || type == DeviceType::meta;
}

}  // namespace

AutocastGuard::AutocastGuard(DeviceType device_type, ScalarType dtype, bool enabled, bool cache_enabled) {
  if (!gpu_like(device_type))
    throw std::invalid_argument(fmt::format(
        "AutocastGuard: autocast on {} is not supported; bytegrad follows PyTorch's CUDA policy on cuda, sim and meta",
        device_type_name(device_type)));
  if (enabled && dtype != ScalarType::float16 && dtype != ScalarType::bfloat16)
    throw std::invalid_argument(
        fmt::format("AutocastGuard: the autocast dtype must be float16 or bfloat16, not {}", scalar_type_name(dtype)));
  AutocastState& s = state();
  previous_enabled_ = s.enabled;
  previous_dtype_ = s.dtype;
  previous_cache_enabled_ = s.cache_enabled;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
  s.cache_enabled = cache_enabled;
  ++s.nesting;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& s = state();
  if (--s.nesting == 0) s.clear_cache();  // torch.autocast.__exit__: leaving the outermost region
  s.enabled = previous_enabled_;
  s.dtype = previous_dtype_;
  s.cache_enabled = previous_cache_enabled_;
}

bool is_autocast_enabled() { return state().enabled; }
ScalarType autocast_dtype() { return state().dtype; }
bool is_autocast_cache_enabled() { return state().cache_enabled; }
void clear_autocast_cache() { state().clear_cache(); }
size_t autocast_cache_size() { return state().cache_index.size(); }

namespace autocast {

bool active() {
  const AutocastState& s = state();
  return s.enabled && !s.inner_call;
}

InnerCall::InnerCall() : previous_(state().inner_call) { state().inner_call = true; }
InnerCall::~InnerCall() { state().inner_call = previous_; }

bool is_eligible(const Tensor& t) {
  return t.defined() && gpu_like(t.device().type) && is_floating_point(t.dtype()) && t.dtype() != ScalarType::float64;
}

Tensor cached_cast(ScalarType to, const Tensor& t) {
  if (!is_eligible(t) || t.dtype() == to) return t;
  AutocastState& s = state();
  AutogradHook* hook = autograd_hook();
  const bool cacheable = s.cache_enabled && to == s.dtype && t.dtype() == ScalarType::float32 && hook &&
                         hook->requires_grad(t) && hook->is_leaf(t) && !t.impl().is_view;
  if (!cacheable) return t.to(to);
  const TensorImpl* key = &t.impl();
  auto found = s.cache_index.find(key);
  if (found != s.cache_index.end()) {
    CachedCast& entry = s.cache[found->second];
    if (!entry.source.expired()) return entry.cast;
    entry = CachedCast{};  // the source died and its address was reused
    s.cache_index.erase(found);
  }
  Tensor cast = t.to(to);
  s.cache_index.emplace(key, s.cache.size());
  s.cache.push_back(CachedCast{t.impl_ptr(), cast});
  return cast;
}

}  // namespace autocast
}  // namespace bytegrad
