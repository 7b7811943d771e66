#include "bytegrad/distributed/threads.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/core/strided_view.h"
#include "bytegrad/distributed/host_reduce.h"

namespace bytegrad::distributed {

namespace {

// What one rank passed to a collective, as the rendezvous compares and executes it.
struct RankCall {
  CollectiveKind kind;
  ReduceOp op;
  int root;
  ScalarType dtype;
  Shape input_sizes, output_sizes;
  int64_t input_numel, output_numel;
  std::byte* input_data;  // null on meta
  std::byte* output_data;

  // "all_reduce(float32 [4, 4], sum)"
  std::string str() const {
    std::string text(collective_name(kind));
    if (kind == CollectiveKind::barrier) return text + "()";
    text += "(" + std::string(scalar_type_name(dtype)) + " " + shape_str(input_sizes);
    if (kind == CollectiveKind::all_gather_into_tensor || kind == CollectiveKind::reduce_scatter_tensor)
      text += " -> " + shape_str(output_sizes);
    if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter_tensor)
      text += ", " + std::string(reduce_op_name(op));
    if (kind == CollectiveKind::broadcast) text += ", src " + std::to_string(root);
    return text + ")";
  }
  // The element count the ranks must agree on (what NCCL is given).
  int64_t count() const { return kind == CollectiveKind::reduce_scatter_tensor ? output_numel : input_numel; }
  bool agrees_with(const RankCall& other) const {
    if (kind != other.kind || dtype != other.dtype || count() != other.count()) return false;
    if ((kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter_tensor) && op != other.op)
      return false;
    return kind != CollectiveKind::broadcast || root == other.root;
  }
};

std::vector<const std::byte*> inputs_of(const std::vector<RankCall>& calls) {
  std::vector<const std::byte*> inputs;
  inputs.reserve(calls.size());
  for (const RankCall& c : calls) inputs.push_back(c.input_data);
  return inputs;
}

// Moves the bytes of one agreed collective (every rank's call present and checked).
void execute(const std::vector<RankCall>& calls) {
  const RankCall& first = calls.front();
  if (first.input_data == nullptr) return;  // meta: accounting only
  const size_t element = element_size(first.dtype);
  const int world = static_cast<int>(calls.size());
  switch (first.kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::barrier: {
      std::vector<std::byte> result;
      reduce_in_rank_order(inputs_of(calls), first.dtype, first.input_numel, first.op, result);
      for (const RankCall& c : calls)
        if (!result.empty()) std::memcpy(c.output_data, result.data(), result.size());
      return;
    }
    case CollectiveKind::broadcast: {
      const RankCall& root = calls[first.root];
      const size_t bytes = static_cast<size_t>(root.input_numel) * element;
      for (const RankCall& c : calls)
        if (&c != &root && bytes > 0) std::memcpy(c.output_data, root.input_data, bytes);
      return;
    }
    case CollectiveKind::all_gather_into_tensor: {
      // Gathered into a staging buffer first: an input may be a slice of its own rank's output (FSDP's
      // in-place all-gather).
      const size_t slice = static_cast<size_t>(first.input_numel) * element;
      std::vector<std::byte> gathered(slice * static_cast<size_t>(world));
      for (int r = 0; r < world && slice > 0; ++r) std::memcpy(gathered.data() + slice * r, calls[r].input_data, slice);
      for (const RankCall& c : calls)
        if (!gathered.empty()) std::memcpy(c.output_data, gathered.data(), gathered.size());
      return;
    }
    case CollectiveKind::reduce_scatter_tensor: {
      std::vector<std::byte> result;
      reduce_in_rank_order(inputs_of(calls), first.dtype, first.input_numel, first.op, result);
      const size_t slice = static_cast<size_t>(first.output_numel) * element;
      for (int r = 0; r < world && slice > 0; ++r) std::memcpy(calls[r].output_data, result.data() + slice * r, slice);
      return;
    }
  }
}

// ------------------------------------------------------------------------------------------- rendezvous

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// Where the ranks of one threads process group meet for each collective, by sequence number.
class Rendezvous {
 public:
  Rendezvous(int world_size, std::chrono::milliseconds timeout)
      : world_size_(world_size), timeout_(timeout), gone_(world_size) {}

  // Rank `rank`'s part of collective `sequence`: returns once the bytes have moved on every rank.
  void arrive(int rank, const Collective& collective, const RankCall& call) {
    const std::string where = collective.str() + " on rank " + std::to_string(rank);
    std::unique_lock lock(mutex_);
    if (aborted_) throw CollectiveError(where + ": the process group was aborted: " + *aborted_);
    Slot& slot = slots_[collective.sequence];
    if (slot.calls.empty()) slot.calls.resize(world_size_);
    if (slot.calls[rank]) throw std::logic_error(where + ": this rank arrived twice (a sequence number reused)");
    slot.calls[rank] = call;
    if (++slot.arrived == world_size_) {
      finish(slot, collective.sequence);
      changed_.notify_all();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (!slot.done) {
        if (aborted_) throw CollectiveError(where + ": the process group was aborted: " + *aborted_);
        for (int r = 0; r < world_size_; ++r)
          if (!slot.calls[r] && gone_[r])
            throw CollectiveError(where + ": rank " + std::to_string(r) + " will never arrive: " + *gone_[r]);
        if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !slot.done) {
          std::vector<int> missing, arrived;
          for (int r = 0; r < world_size_; ++r) (slot.calls[r] ? arrived : missing).push_back(r);
          const std::string message = where + " timed out after " + std::to_string(timeout_.count()) +
                                      " ms waiting for rank" + (missing.size() > 1 ? "s " : " ") + rank_list(missing) +
                                      " (arrived: rank" + (arrived.size() > 1 ? "s " : " ") + rank_list(arrived) + ")";
          // The group is unusable now: every rank waiting fails, and the late ones as they arrive.
          if (!aborted_) aborted_ = message;
          changed_.notify_all();
          throw CollectiveTimeout(message);
        }
      }
    }
    const std::string error = slot.error;
    if (++slot.departed == world_size_) slots_.erase(collective.sequence);
    if (!error.empty()) throw CollectiveError(error);
  }

  // A rank that aborts or shuts down does so in the subgroups it is in too (their members would wait for
  // it otherwise); parent first, then child, never the other way.
  void abort(int rank, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (!aborted_) aborted_ = reason;
    if (!gone_[rank]) gone_[rank] = "it aborted: " + reason;
    changed_.notify_all();
    for_subgroups_of(rank, [&](Rendezvous& sub, int sub_rank) { sub.abort(sub_rank, reason); });
  }

  void shutdown(int rank) {
    std::lock_guard lock(mutex_);
    if (!gone_[rank]) gone_[rank] = "it shut down (its function returned) before calling this collective";
    changed_.notify_all();
    for_subgroups_of(rank, [&](Rendezvous& sub, int sub_rank) { sub.shutdown(sub_rank); });
  }

  // The rendezvous of the subgroup `key` of `ranks` (new_group's): the first member to ask makes it.
  std::shared_ptr<Rendezvous> subgroup(const std::string& key, const std::vector<int>& ranks,
                                       std::chrono::milliseconds timeout) {
    std::lock_guard lock(mutex_);
    Subgroup& sub = subgroups_[key];
    std::shared_ptr<Rendezvous> made = sub.rendezvous.lock();
    if (!made) {
      made = std::make_shared<Rendezvous>(static_cast<int>(ranks.size()), timeout);
      sub.rendezvous = made;
      sub.ranks = ranks;
      // A member already gone from this group is gone from the new one too.
      for (size_t i = 0; i < ranks.size(); ++i)
        if (gone_[ranks[i]]) made->gone_[i] = *gone_[ranks[i]];
    }
    return made;
  }

 private:
  struct Slot {
    std::vector<std::optional<RankCall>> calls;
    int arrived = 0;
    int departed = 0;
    bool done = false;
    std::string error;  // set when the calls disagree: every rank throws it
  };

  // The last rank to arrive checks the calls and moves the bytes for all (the others are waiting).
  void finish(Slot& slot, uint64_t sequence) {
    std::vector<RankCall> calls;
    for (auto& c : slot.calls) calls.push_back(*c);
    bool agree = true;
    for (const RankCall& c : calls) agree = agree && c.agrees_with(calls.front());
    if (agree) {
      execute(calls);
    } else {
      std::string text = "collective #" + std::to_string(sequence) + ": the ranks' calls differ:";
      for (size_t r = 0; r < calls.size(); ++r)
        text += (r ? "; rank " : " rank ") + std::to_string(r) + ": " + calls[r].str();
      slot.error = text;
    }
    slot.done = true;
  }

  template <typename F>
  void for_subgroups_of(int rank, F&& f) {
    for (auto& [key, sub] : subgroups_)
      if (auto r = sub.rendezvous.lock()) {
        auto it = std::find(sub.ranks.begin(), sub.ranks.end(), rank);
        if (it != sub.ranks.end()) f(*r, static_cast<int>(it - sub.ranks.begin()));
      }
  }

  struct Subgroup {
    std::weak_ptr<Rendezvous> rendezvous;
    std::vector<int> ranks;
  };

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Subgroup> subgroups_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::map<uint64_t, Slot> slots_;
  std::optional<std::string> aborted_;            // why the group stopped
  std::vector<std::optional<std::string>> gone_;  // why a rank will issue no more collectives
};

std::byte* data_of(const Tensor& t) {
  return t.device().type == DeviceType::meta ? nullptr : static_cast<std::byte*>(t.data_ptr());
}

class ThreadsProcessGroup final : public ProcessGroup {
 public:
  ThreadsProcessGroup(int rank, int size, Device device, ProcessGroupOptions options,
                      std::shared_ptr<Rendezvous> rendezvous)
      : ProcessGroup(rank, size, device, options), rendezvous_(std::move(rendezvous)) {}
  std::string_view backend_name() const override { return "threads"; }
  void abort(const std::string& reason) override { rendezvous_->abort(rank(), reason); }
  void shutdown() override { rendezvous_->shutdown(rank()); }

 protected:
  void exchange(const Collective& call, const std::optional<Stream>& /*stream*/) override {
    const RankCall mine{.kind = call.kind,
                        .op = call.op,
                        .root = call.root,
                        .dtype = call.input.dtype(),
                        .input_sizes = call.input.sizes(),
                        .output_sizes = call.output.sizes(),
                        .input_numel = call.input.numel(),
                        .output_numel = call.output.numel(),
                        .input_data = data_of(call.input),
                        .output_data = data_of(call.output)};
    rendezvous_->arrive(rank(), call, mine);
  }
  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int group_rank, const std::string& key,
                                              ProcessGroupOptions options) override {
    return std::make_unique<ThreadsProcessGroup>(group_rank, static_cast<int>(ranks.size()), device(), options,
                                                 rendezvous_->subgroup(key, ranks, options.timeout));
  }

 private:
  std::shared_ptr<Rendezvous> rendezvous_;
};

}  // namespace

Device threads_rank_device(DeviceType type, int rank) {
  switch (type) {
    case DeviceType::sim:
    case DeviceType::meta: return Device{type, rank};
    case DeviceType::cpu: return kCpu;
    case DeviceType::cuda: break;
  }
  throw std::invalid_argument(
      "the threads backend runs ranks on sim, meta or cpu, not cuda (GPU collectives are the nccl backend's: "
      "make_nccl_process_groups, or run_ranks on cuda)");
}

std::vector<std::unique_ptr<ProcessGroup>> make_threads_process_groups(int world_size, DeviceType type,
                                                                       ProcessGroupOptions options) {
  if (world_size < 1)
    throw std::invalid_argument("threads process group: world size must be at least 1, got " +
                                std::to_string(world_size));
  threads_rank_device(type, 0);  // refuses cuda before anything is made
  auto rendezvous = std::make_shared<Rendezvous>(world_size, options.timeout);
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  groups.reserve(world_size);
  for (int r = 0; r < world_size; ++r)
    groups.push_back(
        std::make_unique<ThreadsProcessGroup>(r, world_size, threads_rank_device(type, r), options, rendezvous));
  return groups;
}

}  // namespace bytegrad::distributed
