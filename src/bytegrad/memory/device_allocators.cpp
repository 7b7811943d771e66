#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bytegrad/memory/host_work.h"
#include "bytegrad/memory/streams.h"

namespace bytegrad {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<Device, std::unique_ptr<CachingAllocator>> allocators;
  // Bumped (under `mutex`) whenever a device's allocator is replaced or removed: caching_allocator's
  // per-thread memory of its last answer holds while this is unchanged.
  std::atomic<uint64_t> allocators_generation{0};
  std::map<Device, SimulatedCapacity> capacities;
  std::optional<Device> default_device;
  std::vector<std::unique_ptr<CachingAllocator>> retired;  // allocators whose blocks outlived their scope
  // The settings set_allocator_settings made (every allocator's, and new ones'); unset: BYTEGRAD_ALLOC_CONF.
  std::optional<AllocatorConfig> settings;
  std::vector<OutOfMemoryObserver> oom_observers;  // attached to every allocator, present and future
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: tensors may outlive static destructors
  return *instance;
}

SimulatedCapacity capacity_of(const Registry& r, Device device) {
  if (auto it = r.capacities.find(device); it != r.capacities.end()) return it->second;
  return {};
}

// The settings a new allocator starts with: those set at run time, else BYTEGRAD_ALLOC_CONF's. Under r.mutex.
AllocatorConfig current_settings(const Registry& r) {
  return r.settings ? *r.settings : AllocatorConfig::from_environment();
}

// A new allocator for `device` with the current settings, the observers attached so far and (sim, meta)
// `capacity`. Under r.mutex. Throws, leaving the registry untouched, on a bad setting or a cuda device that
// is not present.
std::unique_ptr<CachingAllocator> make_allocator(const Registry& r, Device device, SimulatedCapacity capacity) {
  AllocatorConfig config = current_settings(r);  // first: a bad setting throws before any mapping
  std::unique_ptr<RawMemory> raw;
  switch (device.type) {
    case DeviceType::sim: raw = make_host_backed_raw_memory(capacity); break;
    case DeviceType::meta: raw = make_address_only_raw_memory(capacity); break;
    case DeviceType::cuda:
      if (device.index >= cuda_device_count())
        throw std::runtime_error(device.str() + " is not available: " + std::to_string(cuda_device_count()) +
                                 " CUDA device(s) visible");
      raw = make_cuda_raw_memory(device.index);
      break;
    case DeviceType::cpu: throw std::invalid_argument("cpu memory is not cached: use host_allocator()");
  }
  auto allocator = std::make_unique<CachingAllocator>(std::move(raw), std::move(config), device.index,
                                                      shared_stream_timeline(device));
  allocator->set_device(device);
  for (const OutOfMemoryObserver& observer : r.oom_observers) allocator->attach_out_of_memory_observer(observer);
  return allocator;
}

// Replaces the device's allocator (and, for a simulated device, its capacity) with a fresh one. The new
// allocator is built before anything changes: when BYTEGRAD_ALLOC_CONF or the capacity is bad this throws
// and the device keeps its previous allocator, statistics and capacity. A cuda device's allocator is made
// on first use (resetting needs no GPU); its configuration is still checked here.
void replace_allocator(Registry& r, Device device, SimulatedCapacity capacity) {
  const Device key = device;
  auto it = r.allocators.find(key);
  if (it != r.allocators.end() && it->second->memory_allocated() != 0)
    throw std::logic_error("cannot reset " + device.str() + " while " + std::to_string(it->second->memory_allocated()) +
                           " bytes are still allocated on it");
  std::unique_ptr<CachingAllocator> fresh;
  if (device.type == DeviceType::cuda) current_settings(r);
  else fresh = make_allocator(r, device, capacity);
  if (device.type != DeviceType::cuda) r.capacities.insert_or_assign(key, capacity);
  if (fresh) r.allocators.insert_or_assign(key, std::move(fresh));
  else if (it != r.allocators.end()) r.allocators.erase(it);
  r.allocators_generation.fetch_add(1, std::memory_order_release);
}

void require_simulated(Device device, const char* what) {
  if (device.type != DeviceType::sim && device.type != DeviceType::meta)
    throw std::invalid_argument(std::string(what) + ": " + device.str() + " is not a simulated device (sim or meta)");
}

}  // namespace

CachingAllocator& caching_allocator(Device device) {
  // Every op asks; most ask for the device the thread asked for last. That answer is kept while no
  // allocator has been replaced since, so the lookup takes no lock.
  struct LastLookup {
    CachingAllocator* allocator = nullptr;
    Device device;
    uint64_t generation = 0;
  };
  thread_local LastLookup last;
  Registry& r = registry();
  if (last.allocator && last.device == device &&
      last.generation == r.allocators_generation.load(std::memory_order_acquire))
    return *last.allocator;
  std::lock_guard lock(r.mutex);
  const Device key = device;
  auto it = r.allocators.find(key);
  // Inserted only once made: a failed creation (bad BYTEGRAD_ALLOC_CONF, absent GPU) leaves no entry.
  if (it == r.allocators.end()) it = r.allocators.emplace(key, make_allocator(r, device, capacity_of(r, device))).first;
  last = {it->second.get(), device, r.allocators_generation.load(std::memory_order_relaxed)};
  return *it->second;
}

void configure_simulated_device(Device device, SimulatedCapacity capacity) {
  forget_host_work();  // as in a fresh process
  require_simulated(device, "configure_simulated_device");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  replace_allocator(r, device, capacity);
}

DeviceLaunchLimits device_launch_limits(Device device) {
  switch (device.type) {
    case DeviceType::cuda: return cuda_launch_limits(device.index);
    case DeviceType::sim:
    case DeviceType::meta: {
      Registry& r = registry();
      std::lock_guard lock(r.mutex);
      SimulatedCapacity capacity;
      if (auto it = r.capacities.find(device); it != r.capacities.end()) capacity = it->second;
      return {capacity.multiprocessor_count, capacity.max_threads_per_multiprocessor};
    }
    case DeviceType::cpu: break;
  }
  throw std::invalid_argument("device_launch_limits: " + device.str() + " has no CUDA launch limits");
}

SimulatedCapacity simulated_capacity(Device device) {
  require_simulated(device, "simulated_capacity");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return capacity_of(r, device);
}

std::unique_ptr<CachingAllocator> make_simulated_allocator(Device device, SimulatedCapacity capacity) {
  require_simulated(device, "make_simulated_allocator");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return make_allocator(r, device, capacity);
}

SimulatedDeviceState exchange_simulated_device(Device device, SimulatedDeviceState state) {
  require_simulated(device, "exchange_simulated_device");
  forget_host_work();  // as in a fresh process
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const Device key = device;
  SimulatedDeviceState previous{nullptr, capacity_of(r, device)};
  if (auto it = r.allocators.find(key); it != r.allocators.end()) {
    previous.allocator = std::move(it->second);
    r.allocators.erase(it);
  }
  if (state.allocator) r.allocators.emplace(key, std::move(state.allocator));
  r.allocators_generation.fetch_add(1, std::memory_order_release);
  r.capacities.insert_or_assign(key, state.capacity);
  return previous;
}

void retire_allocator(std::unique_ptr<CachingAllocator> allocator) {
  if (!allocator || allocator->memory_allocated() == 0) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.retired.push_back(std::move(allocator));
}

void reset_device(Device device) {
  forget_host_work();  // as in a fresh process
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  replace_allocator(r, device, capacity_of(r, device));
}

// Declared in memory_functions.h; defined here, beside the registry of allocators they change.
void set_allocator_settings(std::string_view settings) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const AllocatorConfig current = current_settings(r);  // a bad BYTEGRAD_ALLOC_CONF is reported as such
  AllocatorConfig next;
  try {
    next = AllocatorConfig::updated(current, settings);
  } catch (const std::invalid_argument& error) {
    // The parser's messages name the environment variable; this text came from the caller.
    std::string message = error.what();
    constexpr std::string_view kEnvPrefix = "BYTEGRAD_ALLOC_CONF: ";
    if (message.starts_with(kEnvPrefix)) message.erase(0, kEnvPrefix.size());
    throw std::invalid_argument("set_allocator_settings(" + quote_setting(settings) + "): " + message);
  }
  for (auto& [key, allocator] : r.allocators) allocator->apply_settings(next);
  r.settings = std::move(next);
}

void attach_out_of_memory_observer(OutOfMemoryObserver observer) {
  if (!observer) throw std::invalid_argument("attach_out_of_memory_observer: the observer is empty");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto& [key, allocator] : r.allocators) allocator->attach_out_of_memory_observer(observer);
  r.oom_observers.push_back(std::move(observer));
}

void* HostAllocator::malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!ptr) throw std::bad_alloc();
  std::lock_guard lock(mutex_);
  allocated_ += static_cast<int64_t>(bytes);
  if (allocated_ > peak_) peak_ = allocated_;
  return ptr;
}

void HostAllocator::free(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::free(ptr);
  std::lock_guard lock(mutex_);
  allocated_ -= static_cast<int64_t>(bytes);
}

int64_t HostAllocator::memory_allocated() const {
  std::lock_guard lock(mutex_);
  return allocated_;
}

int64_t HostAllocator::max_memory_allocated() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

HostAllocator& host_allocator() {
  static HostAllocator* instance = new HostAllocator();
  return *instance;
}

bool cuda_is_available() { return cuda_device_count() > 0; }

Device default_device() {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.default_device) return *r.default_device;
  }
  return cuda_is_available() ? Device{DeviceType::cuda, 0} : Device{DeviceType::sim, 0};
}

void set_default_device(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.default_device = device;
}

void note_driver_allocations(Device device, uint32_t what) {
  if (device.type == DeviceType::cpu || what == 0) return;
  caching_allocator(device).note_driver_allocations(what);
}

}  // namespace bytegrad
