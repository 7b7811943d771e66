#include "bytegrad/distributed/process_group.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "bytegrad/core/enum_name.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/tensor/pending_scores.h"

namespace bytegrad::distributed {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::product: return "product";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "unknown";
}

std::string_view collective_name(CollectiveKind kind) {
  static constexpr std::string_view kNames[] = {"all_reduce", "broadcast", "all_gather_into_tensor",
                                                "reduce_scatter_tensor", "barrier"};
  return enum_name(kind, kNames, "unknown");
}

std::string Collective::str() const {
  std::string text = std::string(collective_name(kind)) + " #" + std::to_string(sequence);
  if (kind == CollectiveKind::barrier) return text;
  text += " (" + std::string(scalar_type_name(input.dtype())) + " " + shape_str(input.sizes());
  if (!output.shares_storage_with(input) || output.numel() != input.numel()) text += " -> " + shape_str(output.sizes());
  if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter_tensor)
    text += ", " + std::string(reduce_op_name(op));
  if (kind == CollectiveKind::broadcast) text += ", src " + std::to_string(root);
  return text + ")";
}

// ------------------------------------------------------------------------------------------ TensorShelf

void TensorShelf::stash(const std::vector<Tensor>& tensors) {
  std::lock_guard lock(mutex_);
  tensors_.insert(tensors_.end(), tensors.begin(), tensors.end());
}

void TensorShelf::unstash() {
  std::vector<Tensor> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(tensors_);
  }
  // `dropped` frees its blocks here, outside the lock.
}

bool TensorShelf::empty() const {
  std::lock_guard lock(mutex_);
  return tensors_.empty();
}

// ------------------------------------------------------------------------------------------------- Work

bool Work::wait() {
  // WorkNCCL::synchronizeStream: block the current stream on the end event, then unstash (reference §2.2).
  if (end_) end_->wait(current_stream(device_));
  shelf_->unstash();
  if (barrier_ && end_) current_stream(device_).synchronize();
  return true;
}

void Work::wait_future() const {
  if (end_) end_->wait(current_stream(device_));
}

bool Work::is_completed() const { return !end_ || end_->query(); }

// ---------------------------------------------------------------------------------------- ProcessGroup

ProcessGroup::ProcessGroup(int rank, int size, Device device, ProcessGroupOptions options)
    : rank_(rank), size_(size), device_(device), options_(options) {
  if (size < 1)
    throw std::invalid_argument("process group: world size must be at least 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size)
    throw std::invalid_argument("process group: rank " + std::to_string(rank) + " is not in a group of " +
                                std::to_string(size) + " (ranks 0 to " + std::to_string(size - 1) + ")");
  if (options.unwaited_release_after && *options.unwaited_release_after < 1)
    throw std::invalid_argument("process group: unwaited_release_after must be at least 1 (or unset), got " +
                                std::to_string(*options.unwaited_release_after));
  if (options.timeout.count() <= 0)
    throw std::invalid_argument("process group: the timeout must be positive, got " +
                                std::to_string(options.timeout.count()) + " ms");
  outside_source_ = register_outside_allocator_source([this](Device device) -> std::optional<OutsideAllocatorFigures> {
    if (device != device_) return std::nullopt;
    return outside_allocator_figures();
  });
}

// Unregistered before the members the source reads go (a derived group's destructor has run already; the
// source reads only this base's members).
ProcessGroup::~ProcessGroup() { unregister_outside_allocator_source(outside_source_); }

OutsideAllocatorFigures modelled_nccl_figures(bool first_in_process, bool first_broadcast) {
  OutsideAllocatorFigures figures{.parts = {{"communicator", kModelledNcclCommunicatorBytes}},
                                  .measured = false,
                                  .basis = std::string(kModelledNcclBasis)};
  if (first_in_process)
    figures.parts.push_back({"first communicator in the process", kModelledNcclFirstInProcessBytes});
  figures.parts.push_back({"ring buffers", kModelledNcclRingBytes});
  if (first_broadcast) figures.parts.push_back({"first broadcast", kModelledNcclBroadcastBytes});
  return figures;
}

namespace {

enum ProcessOnce : uint32_t { kFirstCommunicator = 1, kFirstBroadcast = 2 };

// True the first time `what` happens on `device` in its process. A rank's device stands for its process, and a
// fresh device for a fresh process: reset_device and fresh_process_state make a new allocator, whose id keys it.
bool first_in_process(Device device, ProcessOnce what) {
  static std::mutex mutex;
  static std::map<Device, std::pair<uint64_t, uint32_t>> done;  // allocator id, ProcessOnce flags
  const uint64_t allocator = caching_allocator(device).id();
  std::lock_guard lock(mutex);
  auto& [seen_allocator, flags] = done[device];
  if (seen_allocator != allocator) {
    seen_allocator = allocator;
    flags = 0;
  }
  if (flags & what) return false;
  flags |= what;
  return true;
}

}  // namespace

std::optional<OutsideAllocatorFigures> ProcessGroup::outside_allocator_figures() const {
  std::lock_guard lock(outside_mutex_);
  return outside_;
}

void ProcessGroup::set_measured_outside_allocator(OutsideAllocatorFigures figures) {
  figures.measured = true;
  std::lock_guard lock(outside_mutex_);
  outside_ = std::move(figures);
}

void ProcessGroup::model_outside_allocator(CollectiveKind kind) {
  if (device_.type == DeviceType::cpu) return;  // no GPU memory to model
  bool made_communicator = false;
  {
    std::lock_guard lock(outside_mutex_);
    made_communicator = !outside_.has_value();
  }
  // Once made, only the process's first broadcast adds: check the common case without the process-wide map.
  if (!made_communicator && kind != CollectiveKind::broadcast) return;
  const bool first_broadcast = kind == CollectiveKind::broadcast && first_in_process(device_, kFirstBroadcast);
  if (made_communicator) {
    const bool first_communicator = first_in_process(device_, kFirstCommunicator);
    std::lock_guard lock(outside_mutex_);
    outside_ = modelled_nccl_figures(first_communicator, first_broadcast);
  } else if (first_broadcast) {
    std::lock_guard lock(outside_mutex_);
    outside_->parts.push_back({"first broadcast", kModelledNcclBroadcastBytes});
  }
  // Where the communicator's buffers go moves later segments (virtual_address_space.h).
  if (made_communicator) note_driver_allocations(device_, kNcclCommunicator);
}

void ProcessGroup::check_tensor(const char* collective, const char* what, const Tensor& tensor) const {
  const std::string where = std::string(collective) + " on rank " + std::to_string(rank_) + ": ";
  if (!tensor.defined()) throw std::invalid_argument(where + "the " + what + " tensor is undefined");
  if (tensor.device() != device_)
    throw std::invalid_argument(where + "the " + what + " tensor is on " + tensor.device().str() + ", but rank " +
                                std::to_string(rank_) + " of this " + std::string(backend_name()) +
                                " process group uses " + device_.str());
  if (!tensor.is_contiguous()) throw std::invalid_argument(where + "Tensors must be contiguous (the " + what + ")");
}

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op, bool async_op) {
  check_tensor("all_reduce", "input", tensor);
  if (tensor.dtype() == ScalarType::bool_ && op == ReduceOp::avg)
    throw std::invalid_argument("all_reduce on rank " + std::to_string(rank_) +
                                ": Cannot use ReduceOp.AVG with boolean inputs");
  return issue(Collective{.kind = CollectiveKind::all_reduce, .op = op, .input = tensor, .output = tensor}, async_op);
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor, int src, bool async_op) {
  check_tensor("broadcast", "input", tensor);
  if (src < 0 || src >= size_)
    throw std::invalid_argument("broadcast on rank " + std::to_string(rank_) +
                                ": invalid root rank: " + std::to_string(src) + " (this group's ranks are 0 to " +
                                std::to_string(size_ - 1) + ")");
  return issue(Collective{.kind = CollectiveKind::broadcast, .root = src, .input = tensor, .output = tensor}, async_op);
}

// all_gather_into_tensor and reduce_scatter_tensor: one tensor world_size times the other, of one dtype,
// with PyTorch's message for each (`dtype_message`, `size_message`).
void ProcessGroup::check_world_sized(const char* collective, const Tensor& large, const Tensor& small,
                                     const char* dtype_message, const char* size_message) const {
  const std::string where = std::string(collective) + " on rank " + std::to_string(rank_) + ": ";
  if (large.dtype() != small.dtype())
    throw std::invalid_argument(where + dtype_message + " (" + std::string(scalar_type_name(large.dtype())) + " vs " +
                                std::string(scalar_type_name(small.dtype())) + ")");
  if (large.numel() != small.numel() * size_)
    throw std::invalid_argument(where + size_message + " (" + std::to_string(large.numel()) + " elements, expected " +
                                std::to_string(size_) + " * " + std::to_string(small.numel()) + ")");
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(const Tensor& output, const Tensor& input, bool async_op) {
  check_tensor("all_gather_into_tensor", "input", input);
  check_tensor("all_gather_into_tensor", "output", output);
  check_world_sized("all_gather_into_tensor", output, input, "output tensor must have the same type as input tensor",
                    "output tensor size must be equal to world_size times input tensor size");
  return issue(Collective{.kind = CollectiveKind::all_gather_into_tensor, .input = input, .output = output}, async_op);
}

std::shared_ptr<Work> ProcessGroup::all_gather(const std::vector<Tensor>& output_tensors, const Tensor& input,
                                               bool async_op) {
  check_tensor("all_gather", "input", input);
  if (output_tensors.size() != static_cast<size_t>(size_))
    throw std::invalid_argument("all_gather on rank " + std::to_string(rank_) + ": " +
                                std::to_string(output_tensors.size()) + " output tensors for a group of " +
                                std::to_string(size_) + " ranks");
  for (const Tensor& out : output_tensors) {
    check_tensor("all_gather", "output", out);
    if (out.dtype() != input.dtype() || out.sizes() != input.sizes())
      throw std::invalid_argument("all_gather on rank " + std::to_string(rank_) +
                                  ": every output must match the "
                                  "input's dtype and shape (" +
                                  describe(input) + "), got " + describe(out));
  }
  Tensor flat;
  {
    CategoryScope communication(MemoryCategory::communication);
    AllocationScope scope("all_gather flat");
    flat = empty({size_ * input.numel()}, TensorOptions{input.dtype(), device_});
  }
  auto work =
      issue(Collective{.kind = CollectiveKind::all_gather_into_tensor, .input = input, .output = flat}, async_op);
  {
    // Copied out on the collective's stream, after it.
    std::optional<StreamGuard> on_collective_stream;
    if (async_op && collective_stream_) on_collective_stream.emplace(*collective_stream_);
    for (int r = 0; r < size_; ++r)
      output_tensors[r].copy_(flat.narrow(0, r * input.numel(), input.numel()).view(input.sizes()));
  }
  if (!work) return nullptr;  // synchronous: the flat frees here
  // The copy-out is part of the collective: its end event moves after it (copies share the event, so the
  // group's list of unwaited works sees the move too).
  if (work->end_ && collective_stream_) work->end_->record(*collective_stream_);
  if (device_.type != DeviceType::cpu) work->shelf_->stash(output_tensors);
  return work;
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op,
                                                          bool async_op) {
  check_tensor("reduce_scatter_tensor", "input", input);
  check_tensor("reduce_scatter_tensor", "output", output);
  check_world_sized("reduce_scatter_tensor", input, output, "input tensor must be the same type as the output tensor",
                    "input tensor must be the same size as output size times world size");
  return issue(Collective{.kind = CollectiveKind::reduce_scatter_tensor, .op = op, .input = input, .output = output},
               async_op);
}

std::shared_ptr<Work> ProcessGroup::barrier(bool async_op) {
  // ProcessGroupNCCL::barrier: a one-float zeros tensor on the group's device, all-reduced with the
  // caller's async_op; a synchronous barrier then synchronizes the current stream (reference §2.3).
  Tensor flag;
  {
    CategoryScope communication(MemoryCategory::communication);
    AllocationScope scope("barrier");
    flag = zeros({1}, TensorOptions{ScalarType::float32, device_});
  }
  auto work = issue(Collective{.kind = CollectiveKind::barrier, .input = flag, .output = flag}, async_op);
  if (work) {
    work->barrier_ = true;
    return work;
  }
  if (device_.type != DeviceType::cpu) current_stream(device_).synchronize();
  return nullptr;  // the flag tensor frees here, on the stream it was allocated on
}

std::shared_ptr<Work> ProcessGroup::issue(Collective call, bool async_op) {
  // Collectives read and write device memory outside the backend calls: scores left pending there
  // (tensor/pending_scores.h) are written first.
  for (const Tensor* t : {&call.input, &call.output})
    if (t->defined()) write_out_pending_scores(t->device());
  const bool has_streams = device_.type != DeviceType::cpu;
  if (has_streams && !collective_stream_) {
    // The communicator's stream is taken from the pool when the communicator is made, at the first
    // collective (ProcessGroupNCCL::initNCCLComm), whether or not that collective is async.
    collective_stream_ = get_stream_from_pool(device_, options_.high_priority_stream ? -1 : 0);
  }
  // Counted before the ranks meet: a collective whose calls differ across ranks fails on every rank and
  // still counts, so the next one starts afresh everywhere.
  call.sequence = ++sequence_;

  // "in asyncOp=false [default] mode, we use currentStream as ncclStream otherwise, we use separate
  // ncclStream and let it sync on currentStream" (ProcessGroupNCCL::collective; reference §2.1).
  std::optional<Stream> stream;
  if (has_streams) {
    const Stream current = current_stream(device_);
    stream = async_op ? *collective_stream_ : current;
    if (async_op) stream->wait_stream(current);
  }

  exchange(call, stream);  // throws when the ranks disagree, fail or time out: then nothing is queued
  if (!measures_outside_allocator()) model_outside_allocator(call.kind);

  auto work = std::make_shared<Work>();
  work->device_ = device_;
  work->kind_ = call.kind;
  work->sequence_ = call.sequence;
  work->outputs_ = {call.output};
  if (stream) {
    if (device_.type == DeviceType::sim || device_.type == DeviceType::meta)
      stream_timeline(device_).launched(stream->id());  // the collective is one work item on its stream
    work->end_ = stream->record_event();
  }
  // Sync: nothing to manage, the work is ordered on the current stream. Async: inputs and outputs stay on
  // the Work's shelf until wait() (reference §2.2: 2.11 stashes instead of record_stream).
  if (async_op && has_streams) {
    work->shelf_->stash({call.input});
    if (!call.output.shares_storage_with(call.input)) work->shelf_->stash({call.output});
  }
  // workEnqueue: the shelves of works that completed without being waited for are released now, on the
  // calling thread (the watchdog hands them over; reference §2.2). This one joins the list if it holds any.
  release_completed_shelves();
  if (async_op && has_streams) outstanding_.push_back(Outstanding{work->shelf_, *work->end_});
  return async_op ? work : nullptr;
}

std::unique_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks,
                                                      std::optional<ProcessGroupOptions> options) {
  std::sort(ranks.begin(), ranks.end());
  std::string listed;
  for (int r : ranks) listed += (listed.empty() ? "" : ", ") + std::to_string(r);
  const std::string where = "new_group([" + listed + "]) on rank " + std::to_string(rank_) + " of " +
                            std::to_string(size_) + " (" + std::string(backend_name()) + ")";
  if (ranks.empty()) throw std::invalid_argument(where + ": no ranks");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_)
      throw std::invalid_argument(where + ": rank " + std::to_string(ranks[i]) + " is not in this group (ranks 0 to " +
                                  std::to_string(size_ - 1) + ")");
    if (i > 0 && ranks[i] == ranks[i - 1])
      throw std::invalid_argument(where + ": rank " + std::to_string(ranks[i]) + " is listed twice");
  }
  const auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  if (mine == ranks.end())
    throw std::invalid_argument(where + ": rank " + std::to_string(rank_) +
                                " is not a member of the new group, so it has no group to use (only its members "
                                "make it)");
  const int nth = ++subgroups_made_[ranks];
  const std::string key = listed + "#" + std::to_string(nth);
  return make_subgroup(ranks, static_cast<int>(mine - ranks.begin()), key, options.value_or(options_));
}

std::unique_ptr<ProcessGroup> ProcessGroup::split_group(const std::vector<std::vector<int>>& groups,
                                                        std::optional<ProcessGroupOptions> options) {
  const std::vector<int>* found = nullptr;
  std::vector<int> seen;
  for (const auto& g : groups)
    for (int r : g) {
      if (std::find(seen.begin(), seen.end(), r) != seen.end())
        throw std::invalid_argument("split_group on rank " + std::to_string(rank_) + ": rank " + std::to_string(r) +
                                    " is in more than one of the groups");
      seen.push_back(r);
      if (r == rank_) found = &g;
    }
  if (!found)
    throw std::invalid_argument("split_group on rank " + std::to_string(rank_) + ": this rank is in none of the " +
                                std::to_string(groups.size()) + " groups");
  return new_group(*found, options);
}

void ProcessGroup::release_completed_shelves() {
  std::vector<std::shared_ptr<TensorShelf>> done;
  const std::optional<int> after = options_.unwaited_release_after;
  auto keep = std::remove_if(outstanding_.begin(), outstanding_.end(), [&](Outstanding& o) {
    if (o.shelf->empty()) return true;  // waited for already
    if (!o.end.query()) return false;
    if (!after || ++o.collectives_after_completion < *after) return false;
    done.push_back(o.shelf);
    return true;
  });
  outstanding_.erase(keep, outstanding_.end());
  for (auto& shelf : done) shelf->unstash();
}

}  // namespace bytegrad::distributed
