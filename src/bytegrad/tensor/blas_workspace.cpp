#include "bytegrad/tensor/blas_workspace.h"

#include <charconv>
#include <iostream>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "bytegrad/memory/streams.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/tensor/storage.h"

namespace bytegrad {

namespace {

constexpr const char* kWorkspaceSyntax = "expected ':SIZE:COUNT' pairs, SIZE in KiB (e.g. ':4096:8' or ':0:0')";

[[noreturn]] void bad_workspace_config(const std::string& text, const std::string& what) {
  throw std::invalid_argument("CUBLAS_WORKSPACE_CONFIG=" + quote_setting(text) + ": " + what + "; " + kWorkspaceSyntax);
}

// One SIZE or COUNT of CUBLAS_WORKSPACE_CONFIG (digits only: the pattern matched them).
size_t parse_workspace_number(const std::string& digits, const std::string& text) {
  size_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) bad_workspace_config(text, quote_setting(digits) + " is out of range");
  if (ec != std::errc() || end != digits.data() + digits.size())
    bad_workspace_config(text, quote_setting(digits) + " is not a number");
  return value;
}

// set_blas_workspace_config's text, which takes the place of CUBLAS_WORKSPACE_CONFIG while set.
std::mutex config_override_mutex;
std::optional<std::string>& config_override() {
  static auto* text = new std::optional<std::string>;
  return *text;
}

// PyTorch's pattern ":([0-9]+):([0-9]+)", matched left to right without overlap, scanned by hand: std::regex
// recurses once per character it matches, so a long run of digits overflowed the stack (found by the
// configuration fuzzer, tests/fuzz/config_fuzz.cpp).
size_t parse_workspace_config(const std::string& config, size_t default_bytes) {
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  auto digits_end = [&](size_t pos) {
    while (pos < config.size() && config[pos] >= '0' && config[pos] <= '9') ++pos;
    return pos;
  };
  size_t total = 0;
  bool matched = false;
  for (size_t pos = 0; pos < config.size();) {
    const size_t size_end = config[pos] == ':' ? digits_end(pos + 1) : pos;
    if (size_end == pos || size_end == pos + 1 || size_end >= config.size() || config[size_end] != ':') {
      ++pos;
      continue;
    }
    const size_t count_end = digits_end(size_end + 1);
    if (count_end == size_end + 1) {
      ++pos;
      continue;
    }
    matched = true;
    const std::string size_digits = config.substr(pos + 1, size_end - pos - 1);
    const std::string count_digits = config.substr(size_end + 1, count_end - size_end - 1);
    const size_t kib = parse_workspace_number(size_digits, config);
    const size_t count = parse_workspace_number(count_digits, config);
    auto overflow = [&] {
      bad_workspace_config(config, "the workspaces (" + quote_setting(size_digits) + " KiB x " +
                                       quote_setting(count_digits) + ", in all) overflow " + std::to_string(kMax) +
                                       " bytes");
    };
    if (kib > kMax / 1024) overflow();
    const size_t size = kib * 1024;
    if (count != 0 && size > kMax / count) overflow();
    if (size * count > kMax - total) overflow();
    total += size * count;
    pos = count_end;
  }
  return matched ? total : default_bytes;  // PyTorch warns and keeps the default when it cannot parse
}

// set_blas_workspace_config's stricter rule: the whole text is ':SIZE:COUNT' pairs and nothing else, so
// that "0:0" (a colon forgotten) or a typo is an error instead of PyTorch's default 32 MiB.
void check_whole_text_is_pairs(const std::string& config) {
  auto digits_end = [&](size_t pos) {
    while (pos < config.size() && config[pos] >= '0' && config[pos] <= '9') ++pos;
    return pos;
  };
  auto refuse = [&](size_t pos) {
    const std::string found = pos < config.size() ? "found " + quote_setting(config.substr(pos, 1)) : "found the end";
    bad_workspace_config(config, "set_blas_workspace_config takes ':SIZE:COUNT' pairs and nothing else; " + found +
                                     " at character " + std::to_string(pos + 1));
  };
  if (config.empty()) bad_workspace_config(config, "set_blas_workspace_config needs at least one pair");
  size_t pos = 0;
  while (pos < config.size()) {
    for (int number = 0; number < 2; ++number) {  // ':' SIZE, then ':' COUNT
      if (pos >= config.size() || config[pos] != ':') refuse(pos);
      const size_t end = digits_end(pos + 1);
      if (end == pos + 1) refuse(pos + 1);
      pos = end;
    }
  }
}

// PyTorch's "Could not parse CUBLAS_WORKSPACE_CONFIG" warning, printed once per text: the variable keeps
// PyTorch's rule (the default size when no pair is found), but never silently.
void warn_unparsed_workspace_config(const std::string& config, size_t default_bytes) {
  static std::mutex warned_mutex;
  static auto* warned = new std::set<std::string>;
  std::lock_guard lock(warned_mutex);
  if (warned->insert(config).second)
    std::cerr << "UserWarning: Could not parse CUBLAS_WORKSPACE_CONFIG=" << quote_setting(config)
              << ", using default workspace size of " << default_bytes << " bytes." << std::endl;
}

constexpr size_t kNoPair = std::numeric_limits<size_t>::max();  // (a real total of SIZE_MAX cannot be allocated)

// parse_workspace_config's total (kNoPair when no pair matched) of the last text this thread parsed: every
// product reads the setting again (a test may change the variable between products), but parses it only
// when the text changed.
size_t workspace_config_total(std::string_view config) {
  thread_local std::string last_config;
  thread_local size_t last_total = 0;
  thread_local bool parsed = false;
  if (parsed && config == last_config) return last_total;
  const size_t total = parse_workspace_config(std::string(config), kNoPair);  // a bad text throws, not cached
  last_config.assign(config);
  last_total = total;
  parsed = true;
  return total;
}

size_t parse_cublas_workspace_config(size_t default_bytes) {
  size_t bytes = kNoPair;
  std::string config;  // only for the warning
  bool overridden = false;
  {
    std::lock_guard lock(config_override_mutex);
    if (const std::optional<std::string>& text = config_override()) {
      overridden = true;
      bytes = workspace_config_total(*text);
      if (bytes == kNoPair) config = *text;
    }
  }
  if (!overridden) {
    const char* text = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    if (!text) return default_bytes;
    bytes = workspace_config_total(text);
    if (bytes == kNoPair) config = text;
  }
  if (bytes != kNoPair) return bytes;
  warn_unparsed_workspace_config(config, default_bytes);
  return default_bytes;
}

// Keyed by the device's allocator, not only the device: a device given a fresh allocator
// (testing::FreshDevice) starts without workspaces, as a fresh process does, and the old allocator keeps its.
// Workspaces are also per stream, as PyTorch keys them by (handle, stream): a product on another stream
// parks another workspace, allocated on that stream.
using HandleKey = std::tuple<int, int, const CachingAllocator*>;  // device type, index, allocator
using WorkspaceKey = std::tuple<int, int, const CachingAllocator*, StreamId>;
struct Workspaces {
  std::map<WorkspaceKey, Storage> cublas;
  std::map<WorkspaceKey, Storage> cublaslt;
  std::set<HandleKey> handles;  // devices this owner has a cuBLAS handle on (kept when workspaces are cleared)
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

HandleKey handle_key(Device device) {
  return {static_cast<int>(device.type), device.index, &caching_allocator(device)};
}

WorkspaceKey workspace_key(Device device) {
  return std::tuple_cat(handle_key(device), std::make_tuple(current_stream(device).id()));
}

// The owner's first product on a device creates its cuBLAS handle, whose own allocations come before the
// workspaces (cublasCreate runs before PyTorch asks its allocator for them).
void note_handle(Workspaces& owner, Device device) {
  if (device.type != DeviceType::cpu && owner.handles.insert(handle_key(device)).second)
    note_driver_allocations(device, kBlasHandle);
}

BlasWorkspace get_or_allocate(std::map<WorkspaceKey, Storage>& cache, Device device, size_t bytes) {
  if (device.type == DeviceType::cpu || bytes == 0) return {};
  auto& slot = cache[workspace_key(device)];
  if (!slot) {
    AllocationScope scope(handle_owner == BlasHandleOwner::calling_thread ? "workspace" : "autograd-thread workspace");
    CategoryScope category(MemoryCategory::workspace);
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

namespace {

// CUBLASLT_WORKSPACE_SIZE's bytes, or 1 MiB when unset.
size_t lt_workspace_setting() {
  const char* text = std::getenv("CUBLASLT_WORKSPACE_SIZE");
  if (!text) return size_t{1024} * 1024;
  const std::string_view digits(text);
  size_t kib = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), kib);
  if (ec != std::errc() || end != digits.data() + digits.size() || kib > std::numeric_limits<size_t>::max() / 1024)
    throw std::invalid_argument("CUBLASLT_WORKSPACE_SIZE=" + quote_setting(digits) +
                                ": expected a size in KiB, a non-negative integer below 2^54 (e.g. 1024)");
  return kib * 1024;
}

}  // namespace

size_t blas_lt_workspace_bytes(Device device) { return blas_workspace_bytes(device) == 0 ? 0 : lt_workspace_setting(); }

namespace {

template <typename Choose>
BlasWorkspace owned_workspace(Device device, size_t bytes, Choose choose) {
  auto from = [&](Workspaces& owner) {
    note_handle(owner, device);
    return get_or_allocate(choose(owner), device, bytes);
  };
  if (handle_owner == BlasHandleOwner::calling_thread) return from(calling_thread_workspaces());
  std::lock_guard lock(autograd_thread_mutex);
  return from(autograd_thread_workspaces());
}

}  // namespace

void check_blas_settings(Device device) { blas_lt_workspace_bytes(device); }

BlasWorkspace blas_workspace(Device device) {
  const size_t bytes = blas_workspace_bytes(device);
  if (bytes != 0)
    lt_workspace_setting();  // a bad CUBLASLT_WORKSPACE_SIZE is refused before the cuBLAS workspace is parked
  return owned_workspace(
      device, bytes, [](Workspaces & w) -> auto& { return w.cublas; });
}

BlasWorkspace blas_lt_workspace(Device device) {
  return owned_workspace(
      device, blas_lt_workspace_bytes(device), [](Workspaces & w) -> auto& { return w.cublaslt; });
}

BlasWorkspace parked_blas_workspace(Device device) {
  if (device.type == DeviceType::cpu) return {};
  const Workspaces& own = calling_thread_workspaces();
  const auto it = own.cublas.find(workspace_key(device));
  return it == own.cublas.end() || !it->second ? BlasWorkspace{}
                                               : BlasWorkspace{it->second->data(), it->second->nbytes()};
}

void clear_blas_workspaces() {
  auto clear = [](Workspaces& w) {
    w.cublas.clear();
    w.cublaslt.clear();
  };
  clear(calling_thread_workspaces());
  std::lock_guard lock(autograd_thread_mutex);
  clear(autograd_thread_workspaces());
}

void release_blas_workspaces(const CachingAllocator& allocator) {
  auto release = [&](Workspaces& w) {
    for (auto* cache : {&w.cublas, &w.cublaslt})
      std::erase_if(*cache, [&](const auto& entry) { return std::get<2>(entry.first) == &allocator; });
    std::erase_if(w.handles, [&](const HandleKey& key) { return std::get<2>(key) == &allocator; });
  };
  release(calling_thread_workspaces());
  std::lock_guard lock(autograd_thread_mutex);
  release(autograd_thread_workspaces());
}

void set_blas_workspace_config(std::optional<std::string> config) {
  if (config) {  // a bad setting throws here, leaving the previous one
    check_whole_text_is_pairs(*config);
    parse_workspace_config(*config, 0);
  }
  std::lock_guard lock(config_override_mutex);
  config_override() = std::move(config);
}

BlasHandleOwner current_blas_handle_owner() { return handle_owner; }

BlasHandleOwnerScope::BlasHandleOwnerScope(BlasHandleOwner owner) : scope_(handle_owner, owner) {}

}  // namespace bytegrad
