#include "tensor/blas_workspace.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <memory>
#include <regex>
#include <string>

#include "memory/allocation_context.h"
#include "memory/device_allocators.h"
#include "tensor/storage.h"

namespace bytegrad {

namespace {

size_t parse_cublas_workspace_config(size_t default_bytes) {
  const char* text = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  if (!text) return default_bytes;
  const std::string config(text);
  static const std::regex pair(":([0-9]+):([0-9]+)");
  size_t total = 0;
  bool matched = false;
  for (std::sregex_iterator it(config.begin(), config.end(), pair), end; it != end; ++it) {
    matched = true;
    total += std::stoull((*it)[1].str()) * 1024 * std::stoull((*it)[2].str());
  }
  return matched ? total : default_bytes;  // PyTorch warns and keeps the default when it cannot parse
}

struct Workspaces {
  std::map<std::pair<int, int>, Storage> cublas;  // (device type, index) -> block
  std::map<std::pair<int, int>, Storage> cublaslt;
};

thread_local BlasHandleOwner handle_owner = BlasHandleOwner::calling_thread;

Workspaces& calling_thread_workspaces() {
  thread_local Workspaces workspaces;
  return workspaces;
}

// The autograd device thread is one per process, whichever thread runs backward.
std::mutex autograd_thread_mutex;
Workspaces& autograd_thread_workspaces() {
  static auto* workspaces = new Workspaces;  // never destroyed: it may outlive the allocators at exit
  return *workspaces;
}

BlasWorkspace get_or_allocate(std::map<std::pair<int, int>, Storage>& cache, Device device, size_t bytes) {
  if (device.type == DeviceType::cpu || bytes == 0) return {};
  auto& slot = cache[{static_cast<int>(device.type), device.index}];
  if (!slot) {
    AllocationScope scope(handle_owner == BlasHandleOwner::calling_thread ? "workspace" : "autograd-thread workspace");
    slot = std::make_shared<StorageImpl>(bytes, device);
  }
  return {slot->data(), slot->nbytes()};
}

}  // namespace

size_t blas_workspace_bytes(Device device) {
  if (device.type == DeviceType::cpu) return 0;
  const bool hopper = device.type != DeviceType::cuda || cuda_compute_capability_major(device.index) == 9;
  const size_t default_bytes = hopper ? size_t{4096} * 1024 * 8 : size_t{4096} * 1024 * 2 + size_t{16} * 1024 * 8;
  return parse_cublas_workspace_config(default_bytes);
}

size_t blas_lt_workspace_bytes(Device device) {
  if (blas_workspace_bytes(device) == 0) return 0;
  const char* text = std::getenv("CUBLASLT_WORKSPACE_SIZE");
  size_t kib = text ? std::strtoull(text, nullptr, 10) : 1024;
  return kib * 1024;
}

namespace {

template <typename Choose>
BlasWorkspace owned_workspace(Device device, size_t bytes, Choose choose) {
  if (handle_owner == BlasHandleOwner::calling_thread) return get_or_allocate(choose(calling_thread_workspaces()), device, bytes);
  std::lock_guard lock(autograd_thread_mutex);
  return get_or_allocate(choose(autograd_thread_workspaces()), device, bytes);
}

}  // namespace

BlasWorkspace blas_workspace(Device device) {
  return owned_workspace(device, blas_workspace_bytes(device), [](Workspaces& w) -> auto& { return w.cublas; });
}

BlasWorkspace blas_lt_workspace(Device device) {
  return owned_workspace(device, blas_lt_workspace_bytes(device), [](Workspaces& w) -> auto& { return w.cublaslt; });
}

void clear_blas_workspaces() {
  calling_thread_workspaces() = {};
  std::lock_guard lock(autograd_thread_mutex);
  autograd_thread_workspaces() = {};
}

BlasHandleOwner current_blas_handle_owner() { return handle_owner; }

BlasHandleOwnerScope::BlasHandleOwnerScope(BlasHandleOwner owner) : previous_(handle_owner) { handle_owner = owner; }
BlasHandleOwnerScope::~BlasHandleOwnerScope() { handle_owner = previous_; }

}  // namespace bytegrad
