#include "bytegrad/distributed/nccl.h"

#include <stdexcept>
#include <string>

#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_functions.h"

#if defined(BYTEGRAD_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#if defined(BYTEGRAD_HAVE_NCCL)
#include <nccl.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#endif

namespace bytegrad::distributed {

int64_t memory_outside_allocator(Device device) {
  if (device.type != DeviceType::cuda)
    throw std::invalid_argument("memory_outside_allocator: " + device.str() +
                                " is not a cuda device (only a GPU has memory outside the allocator to read)");
  const auto [free, total] = mem_get_info(device);
  return total - free - memory_reserved(device);
}

void set_current_cuda_device(int index) {
#if defined(BYTEGRAD_HAVE_CUDA)
  if (index < 0 || index >= cuda_device_count())
    throw std::runtime_error("cuda:" + std::to_string(index) + " is not available: this process sees " +
                             std::to_string(cuda_device_count()) + " CUDA device(s) (CUDA_VISIBLE_DEVICES?)");
  const cudaError_t status = cudaSetDevice(index);
  if (status != cudaSuccess)
    throw std::runtime_error("cudaSetDevice(" + std::to_string(index) + "): " + cudaGetErrorString(status));
#else
  throw std::runtime_error("cuda:" + std::to_string(index) + " is not available: bytegrad was built without CUDA");
#endif
}

#if !defined(BYTEGRAD_HAVE_NCCL)

namespace {
[[noreturn]] void no_nccl() {
  throw std::runtime_error(
      "the nccl backend is not in this build of bytegrad: CMake found no CUDA or no NCCL (nccl.h and libnccl.so; "
      "point -DNCCL_ROOT=... at them and rebuild). Without a GPU, use the store backend (processes) or threads "
      "(run_ranks on sim)");
}
}  // namespace

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }
NcclUniqueId make_nccl_unique_id() { no_nccl(); }
// The NCCL build's signature, which keeps the subgroup id source (taken by value to be moved in).
std::unique_ptr<ProcessGroup> make_nccl_process_group(
    int, int, Device, const NcclUniqueIdSource&, ProcessGroupOptions, NcclOptions,
    NcclSubgroupIdSource) {  // NOLINT(performance-unnecessary-value-param)
  no_nccl();
}
std::vector<std::unique_ptr<ProcessGroup>> make_nccl_process_groups(int, ProcessGroupOptions) { no_nccl(); }
std::optional<NcclMemoryFigures> nccl_memory_figures(const ProcessGroup&) { return std::nullopt; }

#else  // BYTEGRAD_HAVE_NCCL

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId), "ncclUniqueId is 128 bytes (NCCL_UNIQUE_ID_BYTES)");

namespace {

using Clock = std::chrono::steady_clock;

// How often the watchdog looks at the launched collectives (ProcessGroupNCCL's kWatchdogThreadSleepMillis).
constexpr std::chrono::milliseconds kWatchdogInterval{100};

std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = std::string(ncclGetErrorString(result)) + " (ncclResult_t " + std::to_string(result) + ")";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += ": " + std::string(last);
  return text;
}

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw CollectiveError(what + ": CUDA error: " + cudaGetErrorString(status));
}

ncclDataType_t nccl_dtype(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::float32: return ncclFloat32;
    case ScalarType::float64: return ncclFloat64;
    case ScalarType::float16: return ncclFloat16;
    case ScalarType::bfloat16: return ncclBfloat16;
    case ScalarType::int64: return ncclInt64;
    case ScalarType::int32: return ncclInt32;
    case ScalarType::uint8:
    case ScalarType::bool_: return ncclUint8;  // bool as bytes, as PyTorch maps it
  }
  throw std::invalid_argument("nccl: no NCCL type for " + std::string(scalar_type_name(dtype)));
}

// bool reduces as PyTorch maps it onto bytes: sum is a logical or (max), product a logical and (min).
ncclRedOp_t nccl_op(ReduceOp op, ScalarType dtype) {
  const bool is_bool = dtype == ScalarType::bool_;
  switch (op) {
    case ReduceOp::sum: return is_bool ? ncclMax : ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::product: return is_bool ? ncclMin : ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

// What the ranks of one run_ranks share: when one aborts, the others abort too instead of waiting for it.
struct SharedAbort {
  std::mutex mutex;
  std::optional<std::string> reason;
  std::optional<std::string> get() {
    std::lock_guard lock(mutex);
    return reason;
  }
  void set(const std::string& why) {
    std::lock_guard lock(mutex);
    if (!reason) reason = why;
  }
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, Device device, NcclUniqueIdSource unique_id, ProcessGroupOptions options,
                   std::shared_ptr<SharedAbort> shared, NcclSubgroupIdSource subgroup_ids)
      : ProcessGroup(rank, size, device, options),
        unique_id_(std::move(unique_id)),
        shared_(std::move(shared)),
        subgroup_ids_(std::move(subgroup_ids)) {
    if (device.type != DeviceType::cuda)
      throw std::invalid_argument("the nccl backend runs ranks on cuda devices, not " + device.str() +
                                  " (use the store or threads backend there)");
    if (device.index >= cuda_device_count())
      throw std::runtime_error("nccl process group for rank " + std::to_string(rank) + ": " + device.str() +
                               " is not available: this process sees " + std::to_string(cuda_device_count()) +
                               " CUDA device(s)");
    if (!unique_id_) throw std::invalid_argument("nccl process group: no source for NCCL's unique id");
  }

  ~NcclProcessGroup() override {
    stop_watchdog();
    std::lock_guard lock(mutex_);
    for (auto& launched : launched_) (void)cudaEventDestroy(launched.end);
    if (comm_ == nullptr) return;
    // A clean end: finalize (flushes what is queued) then destroy; whatever does not finish within the timeout
    // is aborted, so a peer that never came cannot hang the destructor.
    (void)cudaSetDevice(device().index);
    ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclSuccess || result == ncclInProgress)
      result = poll_async(Clock::now() + options().timeout, /*watch_shared=*/false);
    if (result == ncclSuccess) (void)ncclCommDestroy(comm_);
    else (void)ncclCommAbort(comm_);
  }

  std::string_view backend_name() const override { return "nccl"; }

  void make_communicator_now() {
    std::lock_guard lock(mutex_);
    ensure_communicator("communicator creation (eager_init) on rank " + std::to_string(rank()));
  }

  void abort(const std::string& reason) override {
    if (shared_) shared_->set(reason);
    std::lock_guard lock(mutex_);
    fail_locked("the process group was aborted: " + reason, /*timeout=*/false, /*print=*/false);
  }

  void shutdown() override {}  // NCCL has no way to tell the peers; the destructor finalizes the communicator

  NcclMemoryFigures figures() const {
    std::lock_guard lock(mutex_);
    return figures_;
  }

 protected:
  bool measures_outside_allocator() const override { return true; }

  // A communicator of its own, from a new unique id the subgroup's rank 0 makes, at its first collective.
  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int group_rank, const std::string& key,
                                              ProcessGroupOptions options) override {
    if (!subgroup_ids_)
      throw std::invalid_argument("new_group on nccl rank " + std::to_string(rank()) +
                                  ": this group was made without a way to share a subgroup's NCCL id "
                                  "(make_nccl_process_group's subgroup_ids)");
    NcclSubgroupIdSource ids = subgroup_ids_;
    NcclUniqueIdSource id = [ids, key, group_rank] { return ids(key, group_rank); };
    NcclSubgroupIdSource nested = [ids, key](const std::string& k, int r) { return ids(key + "/" + k, r); };
    return std::make_unique<NcclProcessGroup>(group_rank, static_cast<int>(ranks.size()), device(), id, options,
                                              shared_, nested);
  }

  void exchange(const Collective& call, const std::optional<Stream>& stream) override {
    const std::string where = "nccl " + call.str() + " on rank " + std::to_string(rank());
    std::lock_guard lock(mutex_);
    throw_if_failed(where);
    ensure_communicator(where);
    check_cuda(cudaSetDevice(device().index), where);

    const bool first_of_kind = !seen_[static_cast<int>(call.kind)];
    const int64_t before = first_of_kind ? memory_outside_allocator(device()) : 0;
    auto* handle = static_cast<cudaStream_t>(stream ? stream->native_handle() : nullptr);
    const ncclDataType_t dtype = nccl_dtype(call.input.dtype());
    const ncclRedOp_t op = nccl_op(call.op, call.input.dtype());
    void* in = call.input.data_ptr();
    void* out = call.output.data_ptr();
    ncclResult_t result = ncclSuccess;
    switch (call.kind) {
      case CollectiveKind::all_reduce:
      case CollectiveKind::barrier:
        result = ncclAllReduce(in, out, static_cast<size_t>(call.input.numel()), dtype, op, comm_, handle);
        break;
      case CollectiveKind::broadcast:
        result = ncclBroadcast(in, out, static_cast<size_t>(call.input.numel()), dtype, call.root, comm_, handle);
        break;
      case CollectiveKind::all_gather_into_tensor:
        result = ncclAllGather(in, out, static_cast<size_t>(call.input.numel()), dtype, comm_, handle);
        break;
      case CollectiveKind::reduce_scatter_tensor:
        result = ncclReduceScatter(in, out, static_cast<size_t>(call.output.numel()), dtype, op, comm_, handle);
        break;
    }
    // Non-blocking communicator: the launch may still be in progress; nothing else may touch the
    // communicator until it has finished.
    if (result == ncclInProgress) result = poll_async(Clock::now() + options().timeout, /*watch_shared=*/true);
    if (result != ncclSuccess) {
      const std::string message = where + ": NCCL error: " + nccl_text(result, comm_);
      fail_locked(message, result == ncclInProgress, /*print=*/false);
      if (result == ncclInProgress) throw CollectiveTimeout(message + " (the launch did not finish in time)");
      throw CollectiveError(message);
    }
    if (first_of_kind) {
      seen_[static_cast<int>(call.kind)] = true;
      figures_.first_use_bytes.emplace_back(call.kind, memory_outside_allocator(device()) - before);
      report_measured_figures();
    }
    // The watchdog's record of this launch.
    cudaEvent_t end = nullptr;
    check_cuda(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), where);
    check_cuda(cudaEventRecord(end, handle), where);
    launched_.push_back(Launched{where, Clock::now(), end});
    watchdog_wake_.notify_all();
  }

 private:
  struct Launched {
    std::string what;
    Clock::time_point start;
    cudaEvent_t end;
  };

  // Polls the communicator's asynchronous state until it leaves ncclInProgress or `deadline` passes (then
  // ncclInProgress is returned); a run_ranks sibling's abort stops it at once (watch_shared). A non-blocking
  // communicator hands every launch to a thread of NCCL's and returns ncclInProgress at once; the launch takes
  // tens of microseconds, so the first millisecond only yields: a sleep (200 us, more with the timer's slack)
  // would hold up every collective by that much, about 38 times in an FSDP2 step of GPT-2 small.
  ncclResult_t poll_async(Clock::time_point deadline, bool watch_shared) {
    ncclResult_t state = ncclInProgress;
    const Clock::time_point yield_until = Clock::now() + std::chrono::milliseconds(1);
    while (true) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return ncclInternalError;
      if (state != ncclInProgress) return state;
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return ncclInProgress;
      if (watch_shared && shared_ && shared_->get()) return ncclInProgress;
      if (now < yield_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  void throw_if_failed(const std::string& where) {
    if (shared_ && !error_) {
      if (auto reason = shared_->get()) fail_locked("the process group was aborted: " + *reason, false, false);
    }
    if (!error_) return;
    const std::string message = where + ": " + error_->message;
    if (error_->timeout) throw CollectiveTimeout(message);
    throw CollectiveError(message);
  }

  void ensure_communicator(const std::string& where) {
    if (comm_ != nullptr) return;
    throw_if_failed(where);
    NcclUniqueId id{};
    try {
      id = unique_id_();
    } catch (const std::exception& e) {
      throw CollectiveError(where + ": could not get NCCL's unique id from rank 0: " + e.what());
    }
    check_cuda(cudaSetDevice(device().index), where);
    figures_.before_communicator = memory_outside_allocator(device());
    ncclUniqueId nccl_id;
    std::memcpy(&nccl_id, id.data(), sizeof nccl_id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that creation and launches can be polled with a timeout
    ncclResult_t result = ncclCommInitRankConfig(&comm_, size(), nccl_id, rank(), &config);
    if (result == ncclInProgress || (result == ncclSuccess && comm_ != nullptr))
      result = poll_async(Clock::now() + options().timeout, /*watch_shared=*/true);
    if (result != ncclSuccess) {
      std::string message = where + ": making the NCCL communicator (rank " + std::to_string(rank()) + " of " +
                            std::to_string(size()) + " on " + device().str() + ") ";
      const bool timed_out = result == ncclInProgress;
      if (timed_out && shared_ && shared_->get())
        message += "stopped: the process group was aborted: " + *shared_->get();
      else if (timed_out)
        message += "timed out after " + std::to_string(options().timeout.count()) +
                   " ms: not every rank joined (a rank missing, or started with another unique id?)";
      else message += "failed: " + nccl_text(result, comm_);
      if (comm_ != nullptr) (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      error_ = Failure{message, timed_out && !(shared_ && shared_->get())};
      if (error_->timeout) throw CollectiveTimeout(message);
      throw CollectiveError(message);
    }
    figures_.communicator_bytes = memory_outside_allocator(device()) - figures_.before_communicator;
    note_driver_allocations(device(), kNcclCommunicator);  // for the model's tie addresses
    report_measured_figures();
    watchdog_ = std::thread([this] { watch(); });
  }

  // Records the failure, aborts the communicator (its kernels still waiting end) and forgets the launches.
  void fail_locked(const std::string& message, bool timeout, bool print) {
    if (error_) return;
    error_ = Failure{message, timeout};
    if (print) std::fprintf(stderr, "bytegrad nccl watchdog: %s; the communicator is aborted\n", message.c_str());
    if (comm_ != nullptr) {
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    for (auto& launched : launched_) (void)cudaEventDestroy(launched.end);
    launched_.clear();
  }

  void watch() {
    (void)cudaSetDevice(device().index);
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      watchdog_wake_.wait_for(lock, kWatchdogInterval);
      if (stopping_ || comm_ == nullptr || error_) continue;
      if (shared_) {
        if (auto reason = shared_->get()) {
          fail_locked("the process group was aborted: " + *reason, false, false);
          continue;
        }
      }
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
        const std::string message =
            "rank " + std::to_string(rank()) + ": NCCL reported an asynchronous error: " + nccl_text(state, comm_);
        if (shared_) shared_->set(message);
        fail_locked(message, false, true);
        continue;
      }
      while (!launched_.empty()) {
        Launched& oldest = launched_.front();
        const cudaError_t query = cudaEventQuery(oldest.end);
        if (query == cudaSuccess) {
          (void)cudaEventDestroy(oldest.end);
          launched_.pop_front();
          continue;
        }
        if (query == cudaErrorNotReady) (void)cudaGetLastError();
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - oldest.start);
        if (query == cudaErrorNotReady && waited < options().timeout) break;
        const std::string message = query == cudaErrorNotReady
                                        ? oldest.what + " did not complete within " +
                                              std::to_string(options().timeout.count()) +
                                              " ms (a rank missing, stuck, or calling another collective)"
                                        : oldest.what + ": CUDA error: " + cudaGetErrorString(query);
        if (shared_) shared_->set(message);
        fail_locked(message, query == cudaErrorNotReady, true);
        break;
      }
    }
  }

  void stop_watchdog() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    watchdog_wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  struct Failure {
    std::string message;
    bool timeout;
  };

  NcclUniqueIdSource unique_id_;
  std::shared_ptr<SharedAbort> shared_;
  NcclSubgroupIdSource subgroup_ids_;
  mutable std::mutex mutex_;
  std::condition_variable watchdog_wake_;
  ncclComm_t comm_ = nullptr;
  std::optional<Failure> error_;
  std::deque<Launched> launched_;
  std::thread watchdog_;
  bool stopping_ = false;
  bool seen_[5] = {};  // a collective of each CollectiveKind launched already
  NcclMemoryFigures figures_;

  // The figures as the reports show them: the communicator, each collective kind's first launch that grew
  // the memory outside the allocator (the all_reduce's always, once it ran).
  void report_measured_figures() {
    OutsideAllocatorFigures shown{.parts = {{"communicator", figures_.communicator_bytes}}};
    for (const auto& [kind, bytes] : figures_.first_use_bytes)
      if (bytes != 0 || kind == CollectiveKind::all_reduce)
        shown.parts.push_back({"first " + std::string(collective_name(kind)), bytes});
    set_measured_outside_allocator(std::move(shown));
  }
};

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "";
  // NCCL_VERSION(X, Y, Z) is X*10000 + Y*100 + Z since 2.9.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed: " + nccl_text(result, nullptr));
  NcclUniqueId bytes{};
  std::memcpy(bytes.data(), &id, sizeof id);
  return bytes;
}

std::unique_ptr<ProcessGroup> make_nccl_process_group(int rank, int world_size, Device device,
                                                      const NcclUniqueIdSource& unique_id, ProcessGroupOptions options,
                                                      NcclOptions nccl, NcclSubgroupIdSource subgroup_ids) {
  auto group = std::make_unique<NcclProcessGroup>(rank, world_size, device, unique_id, options, nullptr,
                                                  std::move(subgroup_ids));
  if (nccl.eager_init) group->make_communicator_now();
  return group;
}

std::vector<std::unique_ptr<ProcessGroup>> make_nccl_process_groups(int world_size, ProcessGroupOptions options) {
  if (world_size < 1)
    throw std::invalid_argument("nccl process groups: world size must be at least 1, got " +
                                std::to_string(world_size));
  if (cuda_device_count() < world_size)
    throw std::runtime_error("run_ranks on cuda: " + std::to_string(world_size) + " ranks need " +
                             std::to_string(world_size) + " GPUs (one per rank), this process sees " +
                             std::to_string(cuda_device_count()) + " (CUDA_VISIBLE_DEVICES?)");
  const NcclUniqueId id = make_nccl_unique_id();
  auto shared = std::make_shared<SharedAbort>();
  // Subgroups' ids, made by whichever member asks first (all ranks are in this process).
  struct SubgroupIds {
    std::mutex mutex;
    std::map<std::string, NcclUniqueId> ids;
  };
  auto made = std::make_shared<SubgroupIds>();
  NcclSubgroupIdSource subgroup_ids = [made](const std::string& key, int /*group_rank*/) {
    std::lock_guard lock(made->mutex);
    auto it = made->ids.find(key);
    if (it == made->ids.end()) it = made->ids.emplace(key, make_nccl_unique_id()).first;
    return it->second;
  };
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  groups.reserve(world_size);
  for (int r = 0; r < world_size; ++r)
    groups.push_back(std::make_unique<NcclProcessGroup>(
        r, world_size, Device{DeviceType::cuda, r}, [id] { return id; }, options, shared, subgroup_ids));
  return groups;
}

std::optional<NcclMemoryFigures> nccl_memory_figures(const ProcessGroup& group) {
  const auto* nccl = dynamic_cast<const NcclProcessGroup*>(&group);
  if (nccl == nullptr) return std::nullopt;
  return nccl->figures();
}

#endif  // BYTEGRAD_HAVE_NCCL

}  // namespace bytegrad::distributed
