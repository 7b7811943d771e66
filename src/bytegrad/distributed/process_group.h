// torch.distributed's process group for bytegrad: one ProcessGroup object per rank, with all_reduce,
// broadcast, all_gather_into_tensor, reduce_scatter_tensor and barrier, each synchronous or async_op (a Work
// to wait on), under PyTorch's names and defaults.
//
// Streams and lifetimes follow PyTorch 2.11's ProcessGroupNCCL (shared/reference/pytorch-distributed-memory.md
// §2.1-2.3) on every backend and device with streams (cuda, sim, meta):
//  - async_op=false (the default): the collective is queued on the caller's current stream, nothing is
//    stashed and nothing is record_stream'ed; the call returns no Work (nullptr), as torch.distributed's
//    functions return None.
//  - async_op=true: the collective is queued on the process group's own stream (taken from the stream pool
//    at its first collective, as the communicator's stream is), after that stream waits for the current
//    stream; its input and output tensors are stashed in the Work until wait(), which makes the current
//    stream wait for the collective's end. A Work dropped without wait() keeps them until its collective
//    has completed and a later collective is issued on the group (the watchdog's hand-over, §2.2).
//  - Through the caching allocator: nothing for all_reduce, broadcast, all_gather_into_tensor and
//    reduce_scatter_tensor (they work in place on the caller's tensors); barrier() allocates one float32
//    (512 B) on the group's device, all-reduces it and synchronizes the current stream (§2.3's table).
// On cpu (no streams) every collective is complete when its call returns.
//
// Backends (one file each): threads.h (N ranks as threads of one process, real collectives in host
// memory), fake.h (one rank alone: the same allocations, no data moved), nccl.h (cuda), store_backend.h
// (ranks as processes on cpu/sim/meta, through the TCP store). Ranks as processes: init.h.
#pragma once

#include <chrono>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bytegrad/core/device.h"
#include "bytegrad/memory/outside_allocator.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad::distributed {

// torch.distributed.ReduceOp. bool tensors reduce as NCCL maps them: sum is a logical or (max), product a
// logical and (min); avg is refused for bool.
enum class ReduceOp { sum, avg, product, min, max };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "avg", ... (ReduceOp.SUM in Python)

enum class CollectiveKind { all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor, barrier };
std::string_view collective_name(CollectiveKind kind);  // "all_reduce", ...

// PyTorch's default collective timeout for NCCL process groups (10 minutes).
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{10 * 60 * 1000};

struct ProcessGroupOptions {
  // How long a rank waits in a collective for the other ranks before it fails (nccl: its watchdog; also the
  // rendezvous of init_process_group).
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  // ProcessGroupNCCL.Options.is_high_priority_stream: the async stream comes from the high-priority pool.
  bool high_priority_stream = false;
  // When the tensors of an async collective nobody waited for are given back (§2.2): at the n-th collective
  // issued on the group after it completed. In PyTorch that is the first collective issued after NCCL's
  // watchdog thread, which looks every 100 ms, saw it complete: a matter of timing. 1: the watchdog had
  // already looked; n > 1: it looked while n - 1 more collectives were issued; nullopt: it did not look
  // while the program ran (held until the group is destroyed). DDP's buckets are such collectives, so the
  // old buckets' release at the rebuild moves with it.
  std::optional<int> unwaited_release_after = 1;
};

// A collective failed across ranks: the ranks' calls disagree, a rank failed or left, or the group was
// aborted (torch.distributed.DistBackendError).
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A rank waited longer than the group's timeout for the others (PyTorch's watchdog timeout).
class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// Tensors kept alive for the allocator's sake until a collective is known to be done (ProcessGroupNCCL's
// TensorShelf). Shared by the Work and the group's list of works not yet waited for.
class TensorShelf {
 public:
  void stash(const std::vector<Tensor>& tensors);
  void unstash();  // drops them (their blocks free on their own streams; nothing was record_stream'ed)
  bool empty() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Tensor> tensors_;
};

// One collective call as a backend sees it, after the group checked it on this rank.
struct Collective {
  CollectiveKind kind = CollectiveKind::all_reduce;
  uint64_t sequence = 0;  // this group's count of collectives, from 1 (every rank counts the same)
  ReduceOp op = ReduceOp::sum;
  int root = 0;             // broadcast's src
  Tensor input;             // all_reduce and broadcast: the tensor itself; barrier: its one float
  Tensor output;            // the tensor written (the input again for the in-place ones)
  std::string str() const;  // "all_reduce #3 (float32 [4, 4], sum)"
};

class Work {
 public:
  // Makes the caller's current stream wait for the collective, then releases the stashed tensors; after a
  // barrier, also waits on the host for the current stream (torch.distributed.Work.wait). Returns true.
  bool wait();
  // What waiting on the Work's future does (Reducer::finalize_backward): the current stream waits for the
  // collective, and the stashed tensors stay until the group notices it completed.
  void wait_future() const;
  // Whether the collective's work on its stream has completed (on sim and meta: stream_timeline.h's model).
  bool is_completed() const;
  // The tensors the collective wrote (Work.result()).
  const std::vector<Tensor>& result() const { return outputs_; }
  CollectiveKind kind() const { return kind_; }
  uint64_t sequence() const { return sequence_; }

 private:
  friend class ProcessGroup;
  Device device_ = kCpu;
  CollectiveKind kind_ = CollectiveKind::all_reduce;
  uint64_t sequence_ = 0;
  std::optional<Event> end_;  // recorded on the collective's stream after it (none on cpu)
  std::shared_ptr<TensorShelf> shelf_ = std::make_shared<TensorShelf>();
  std::vector<Tensor> outputs_;
  bool barrier_ = false;
};

// NCCL's memory outside the allocator, per rank, as PyTorch 2.11's NCCL 2.28.9 takes it on H200s with
// NCCL_NVLS_ENABLE=0 (tools/probes/nccl_outside_probe.py; tests/data/pytorch_probes/nccl_outside/): the model
// that groups not running NCCL report for a rank on sim, meta and cuda. All of a group's comes at its first
// collective, whichever kind (ProcessGroupNCCL makes the communicator then): the communicator and its ring's
// buffers, 484 MiB (a later group's first all_gather or broadcast took 484-486 MiB; bytegrad's own NCCL backend
// splits them 196 + 288), and where it is the process's first communicator 356 MiB more (840 MiB in all, on
// two and on four ranks); the process's first broadcast takes 4 MiB more, whenever it comes.
inline constexpr int64_t kModelledNcclCommunicatorBytes = 205'520'896;    // 196 MiB
inline constexpr int64_t kModelledNcclRingBytes = 301'989'888;            // 288 MiB
inline constexpr int64_t kModelledNcclFirstInProcessBytes = 373'293'056;  // 356 MiB = 840 - 196 - 288
inline constexpr int64_t kModelledNcclBroadcastBytes = 4'194'304;         // 4 MiB
inline constexpr std::string_view kModelledNcclBasis = "measured per rank with PyTorch 2.11's NCCL 2.28.9 on H200s";
// The model's parts for one group once its first collective ran: "communicator", "first communicator in the
// process" where it was the rank's first, "ring buffers", and "first broadcast" where the process's first
// broadcast ran on it.
OutsideAllocatorFigures modelled_nccl_figures(bool first_in_process = true, bool first_broadcast = false);

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, Device device, ProcessGroupOptions options);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Device device() const { return device_; }  // this rank's device: its tensors must be there
  const ProcessGroupOptions& options() const { return options_; }
  virtual std::string_view backend_name() const = 0;  // "threads", "fake", "nccl", "store"

  // Each returns the Work when async_op is true, else nullptr once the collective is queued on the
  // current stream. Tensors must be contiguous and on device().
  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum, bool async_op = false);
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int src, bool async_op = false);
  // output_tensors: size() tensors shaped and typed as input; rank i's input lands in the i-th
  // (torch.distributed.all_gather). As ProcessGroupNCCL does for equal sizes: one flat output of size()
  // inputs is allocated on the current stream, gathered into, and copied out on the collective's stream;
  // the flat and the outputs are held with the Work (freed at return when synchronous).
  std::shared_ptr<Work> all_gather(const std::vector<Tensor>& output_tensors, const Tensor& input,
                                   bool async_op = false);
  // output holds size() * input.numel() elements: rank i's input lands in the i-th slice.
  std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input, bool async_op = false);
  // input holds size() * output.numel() elements: rank r gets the reduction of every rank's r-th slice.
  std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum,
                                              bool async_op = false);
  std::shared_ptr<Work> barrier(bool async_op = false);

  // torch.distributed.new_group(ranks): a process group of some of this group's ranks (distinct, each in
  // 0..size()-1, in any order: sorted, as PyTorch sorts them), on this rank's device, with its own
  // collectives, sequence numbers, stream and (nccl) communicator, each made as the world group's are (at
  // its first collective). This rank's rank in it is its place among the sorted ranks. Collectives on it
  // move data among its ranks only. Every member calls new_group with the same ranks; ranks not in it need
  // not call (the members of the n-th group of the same ranks meet each other). Called on a rank not in
  // `ranks`, it throws std::invalid_argument naming the rank and the ranks (PyTorch returns a non-member
  // placeholder whose collectives fail); so does a bad list. Options default to this group's.
  std::unique_ptr<ProcessGroup> new_group(std::vector<int> ranks,
                                          std::optional<ProcessGroupOptions> options = std::nullopt);
  // torch.distributed.split_group: `groups` lists disjoint sets of this group's ranks; returns the group of
  // the set this rank is in (new_group of that set). Throws std::invalid_argument when this rank is in none
  // or the sets overlap.
  std::unique_ptr<ProcessGroup> split_group(const std::vector<std::vector<int>>& groups,
                                            std::optional<ProcessGroupOptions> options = std::nullopt);

  // The stream async collectives run on (the communicator's stream); none before the first collective
  // and on cpu.
  std::optional<Stream> collective_stream() const { return collective_stream_; }
  uint64_t collectives_issued() const { return sequence_; }

  // NCCL's memory outside the allocator on this rank's device, as the reports show it
  // (memory/outside_allocator.h; every group registers itself there while it lives): measured by the nccl
  // backend, modelled by the others (kModelledNccl* above) on sim, meta and cuda; nullopt before the
  // first collective and on cpu.
  std::optional<OutsideAllocatorFigures> outside_allocator_figures() const;

  // This rank stops: collectives waiting for it (on every rank) fail at once, naming it and the reason
  // (ProcessGroup.abort). Safe from any thread.
  virtual void abort(const std::string& reason) = 0;
  // This rank has finished and will issue no more collectives (destroy_process_group): a peer waiting for
  // it in a collective fails at once instead of timing out.
  virtual void shutdown() = 0;

 protected:
  // The backend's part of one collective: agree with the other ranks and move the bytes (threads), nothing
  // (fake), or launch it on `stream` (nccl). Throws CollectiveError when the ranks disagree or fail.
  virtual void exchange(const Collective& call, const std::optional<Stream>& stream) = 0;
  // The backend's subgroup (new_group checked the arguments): this rank is `group_rank` of `ranks` (this
  // group's ranks, sorted); `key` names the group alike on all its members ("0,1#1": the ranks and the
  // how-many-th group of these ranks this rank made), for the members to meet by.
  virtual std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int group_rank,
                                                      const std::string& key, ProcessGroupOptions options) = 0;
  // True for a backend that measures NCCL's memory itself and hands it to set_measured_outside_allocator.
  virtual bool measures_outside_allocator() const { return false; }
  void set_measured_outside_allocator(OutsideAllocatorFigures figures);

 private:
  std::shared_ptr<Work> issue(Collective call, bool async_op);
  void check_tensor(const char* collective, const char* what, const Tensor& tensor) const;
  void check_world_sized(const char* collective, const Tensor& large, const Tensor& small, const char* dtype_message,
                         const char* size_message) const;
  void release_completed_shelves();
  void model_outside_allocator(CollectiveKind kind);

  int rank_;
  int size_;
  Device device_;
  ProcessGroupOptions options_;
  uint64_t sequence_ = 0;
  std::optional<Stream> collective_stream_;
  // Async works issued and not yet known complete: their shelves are released once their collective has
  // completed, at the next collective issued (ProcessGroupNCCL's shelvesToUnstash_ and workEnqueue).
  struct Outstanding {
    std::shared_ptr<TensorShelf> shelf;
    Event end;
    int collectives_after_completion = 0;  // issued since its end was first seen complete
  };
  std::vector<Outstanding> outstanding_;
  // Read by reports from any thread: its own small lock, never held while calling out.
  mutable std::mutex outside_mutex_;
  std::optional<OutsideAllocatorFigures> outside_;
  int outside_source_ = 0;                          // the registration in memory/outside_allocator.h
  std::map<std::vector<int>, int> subgroups_made_;  // new_group's count per list of ranks
};

}  // namespace bytegrad::distributed
