#include "bytegrad/distributed/store_backend.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "bytegrad/core/strided_view.h"
#include "bytegrad/distributed/host_reduce.h"

namespace bytegrad::distributed {

namespace {

using Bytes = TcpStore::Bytes;
using Clock = std::chrono::steady_clock;

// How long one wait on the store lasts before the rank looks for peers that aborted or shut down.
constexpr std::chrono::milliseconds kWaitSlice{100};

// "all_reduce(float32 [4, 4], sum)", as the threads backend writes a rank's call.
std::string call_text(const Collective& call) {
  std::string text(collective_name(call.kind));
  if (call.kind == CollectiveKind::barrier) return text + "()";
  text += "(" + std::string(scalar_type_name(call.input.dtype())) + " " + shape_str(call.input.sizes());
  if (call.kind == CollectiveKind::all_gather_into_tensor || call.kind == CollectiveKind::reduce_scatter_tensor)
    text += " -> " + shape_str(call.output.sizes());
  if (call.kind == CollectiveKind::all_reduce || call.kind == CollectiveKind::reduce_scatter_tensor)
    text += ", " + std::string(reduce_op_name(call.op));
  if (call.kind == CollectiveKind::broadcast) text += ", src " + std::to_string(call.root);
  return text + ")";
}

// What the ranks must agree on (what NCCL would be given): collective, dtype, element count, and the op or
// the root where they matter.
std::string agreement_key(const Collective& call) {
  const int64_t count = call.kind == CollectiveKind::reduce_scatter_tensor ? call.output.numel() : call.input.numel();
  std::string key = std::string(collective_name(call.kind)) + "|" + std::string(scalar_type_name(call.input.dtype())) +
                    "|" + std::to_string(count);
  if (call.kind == CollectiveKind::all_reduce || call.kind == CollectiveKind::reduce_scatter_tensor)
    key += "|" + std::string(reduce_op_name(call.op));
  if (call.kind == CollectiveKind::broadcast) key += "|" + std::to_string(call.root);
  return key;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// One rank's entry for a collective: [text length u32][text][key length u32][key][the input's bytes].
struct Entry {
  std::string text, key;
  Bytes payload;
};

Bytes encode_entry(const std::string& text, const std::string& key, const void* data, size_t bytes) {
  Bytes out;
  for (const std::string* s : {&text, &key}) {
    const auto length = static_cast<uint32_t>(s->size());
    const auto* p = reinterpret_cast<const uint8_t*>(&length);
    out.insert(out.end(), p, p + sizeof length);
    out.insert(out.end(), s->begin(), s->end());
  }
  const auto* d = static_cast<const uint8_t*>(data);
  if (bytes > 0) out.insert(out.end(), d, d + bytes);
  return out;
}

std::optional<Entry> decode_entry(const Bytes& bytes) {
  Entry entry;
  size_t at = 0;
  for (std::string* s : {&entry.text, &entry.key}) {
    uint32_t length = 0;
    if (bytes.size() < at + sizeof length) return std::nullopt;
    std::memcpy(&length, bytes.data() + at, sizeof length);
    at += sizeof length;
    if (bytes.size() < at + length) return std::nullopt;
    s->assign(reinterpret_cast<const char*>(bytes.data() + at), length);
    at += length;
  }
  entry.payload.assign(bytes.begin() + static_cast<ptrdiff_t>(at), bytes.end());
  return entry;
}

class StoreProcessGroup final : public ProcessGroup {
 public:
  StoreProcessGroup(std::shared_ptr<TcpStore> store, int rank, int size, Device device, ProcessGroupOptions options,
                    std::string prefix)
      : ProcessGroup(rank, size, device, options), store_(std::move(store)), prefix_(std::move(prefix)) {}

  ~StoreProcessGroup() override {
    try {
      shutdown();
    } catch (...) {  // the store may be gone already; a destructor must not throw
    }
  }

  std::string_view backend_name() const override { return "store"; }

  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(mutex_);
      if (!aborted_) aborted_ = reason;
    }
    store_->set(gone_key(rank()), "it aborted: " + reason);
    store_->set(prefix_ + "aborted", reason);
  }

  void shutdown() override {
    std::lock_guard lock(mutex_);
    if (shut_down_) return;
    shut_down_ = true;
    if (!aborted_)
      store_->set(gone_key(rank()), "it shut down (its group was destroyed) before calling this collective");
  }

 protected:
  void exchange(const Collective& call, const std::optional<Stream>& /*stream*/) override {
    const std::string where = call.str() + " on rank " + std::to_string(rank());
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw CollectiveError(where + ": the process group was aborted: " + *aborted_);
    }
    try {
      run(call, where);
    } catch (const StoreError& e) {
      throw CollectiveError(where + ": the store failed: " + e.what());
    }
  }

  // The members meet under this group's prefix and the subgroup's key.
  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int group_rank, const std::string& key,
                                              ProcessGroupOptions options) override {
    return std::make_unique<StoreProcessGroup>(store_, group_rank, static_cast<int>(ranks.size()), device(), options,
                                               prefix_ + "sub/" + key + "/");
  }

 private:
  std::string entry_key(uint64_t sequence, int rank) const {
    return prefix_ + "c/" + std::to_string(sequence) + "/" + std::to_string(rank);
  }
  std::string gone_key(int rank) const { return prefix_ + "gone/" + std::to_string(rank); }

  void run(const Collective& call, const std::string& where) {
    // A group that timed out or was aborted elsewhere stays unusable, even when every rank's entry is there.
    if (store_->check({prefix_ + "aborted"}))
      throw CollectiveError(where + ": the process group was aborted: " + store_->get_string(prefix_ + "aborted"));
    const bool has_bytes = device().type != DeviceType::meta;
    const size_t input_bytes = has_bytes ? call.input.nbytes() : 0;
    const std::string text = call_text(call);
    const std::string key = agreement_key(call);
    store_->set(entry_key(call.sequence, rank()),
                encode_entry(text, key, has_bytes ? call.input.data_ptr() : nullptr, input_bytes));

    wait_for_everyone(call.sequence, where);

    std::vector<Entry> entries(size());
    for (int r = 0; r < size(); ++r) {
      auto entry = decode_entry(store_->get(entry_key(call.sequence, r)));
      if (!entry) throw CollectiveError(where + ": rank " + std::to_string(r) + "'s entry in the store is malformed");
      entries[r] = std::move(*entry);
    }
    // Every rank's entries are read: the last to get here removes them (the store keeps no old collectives).
    const std::string done_key = prefix_ + "c/" + std::to_string(call.sequence) + "/done";
    if (store_->add(done_key, 1) == size()) {
      for (int r = 0; r < size(); ++r) store_->delete_key(entry_key(call.sequence, r));
      store_->delete_key(done_key);
    }

    bool agree = true;
    for (const Entry& e : entries) agree = agree && e.key == entries.front().key;
    if (!agree) {
      std::string message = "collective #" + std::to_string(call.sequence) + ": the ranks' calls differ:";
      for (int r = 0; r < size(); ++r)
        message += (r ? "; rank " : " rank ") + std::to_string(r) + ": " + entries[r].text;
      throw CollectiveError(message);
    }
    if (has_bytes) write_result(call, entries);
  }

  // Returns once every rank's entry for `sequence` is in the store; fails at once when a missing rank has
  // aborted or shut down, or the group was aborted, and after the timeout otherwise.
  void wait_for_everyone(uint64_t sequence, const std::string& where) {
    std::vector<std::string> keys;
    keys.reserve(size());
    for (int r = 0; r < size(); ++r) keys.push_back(entry_key(sequence, r));
    const auto deadline = Clock::now() + options().timeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        store_->wait(keys, std::clamp(left, std::chrono::milliseconds(1), kWaitSlice));
        return;
      } catch (const StoreTimeout&) {}
      std::vector<int> missing, arrived;
      for (int r = 0; r < size(); ++r) (store_->check({keys[r]}) ? arrived : missing).push_back(r);
      if (missing.empty()) return;
      for (int r : missing)
        if (store_->check({gone_key(r)}))
          throw CollectiveError(where + ": rank " + std::to_string(r) +
                                " will never arrive: " + store_->get_string(gone_key(r)));
      if (store_->check({prefix_ + "aborted"}))
        throw CollectiveError(where + ": the process group was aborted: " + store_->get_string(prefix_ + "aborted"));
      if (Clock::now() >= deadline) {
        const std::string message = where + " timed out after " + std::to_string(options().timeout.count()) +
                                    " ms waiting for " + rank_list(missing) + " (arrived: " + rank_list(arrived) + ")";
        // The group is unusable now: the other ranks waiting fail at once, the late ones when they arrive.
        store_->set(prefix_ + "aborted", message);
        {
          std::lock_guard lock(mutex_);
          if (!aborted_) aborted_ = message;
        }
        throw CollectiveTimeout(message);
      }
    }
  }

  // This rank's output from every rank's input bytes, as the threads backend computes it.
  void write_result(const Collective& call, const std::vector<Entry>& entries) {
    std::vector<const std::byte*> sources;
    sources.reserve(entries.size());
    for (const Entry& e : entries) sources.push_back(reinterpret_cast<const std::byte*>(e.payload.data()));
    auto* output = static_cast<std::byte*>(call.output.data_ptr());
    const ScalarType dtype = call.input.dtype();
    switch (call.kind) {
      case CollectiveKind::all_reduce:
      case CollectiveKind::barrier: {
        std::vector<std::byte> result;
        reduce_in_rank_order(sources, dtype, call.input.numel(), call.op, result);
        if (!result.empty()) std::memcpy(output, result.data(), result.size());
        return;
      }
      case CollectiveKind::broadcast: {
        const Bytes& root = entries[call.root].payload;
        if (call.root != rank() && !root.empty()) std::memcpy(output, root.data(), root.size());
        return;
      }
      case CollectiveKind::all_gather_into_tensor: {
        size_t at = 0;
        for (const Entry& e : entries) {
          if (!e.payload.empty()) std::memcpy(output + at, e.payload.data(), e.payload.size());
          at += e.payload.size();
        }
        return;
      }
      case CollectiveKind::reduce_scatter_tensor: {
        // Only this rank's slice is reduced: elementwise, so the bits equal the threads backend's full reduction.
        const size_t slice = call.output.nbytes();
        std::vector<const std::byte*> slices;
        slices.reserve(sources.size());
        for (const std::byte* s : sources) slices.push_back(s + slice * static_cast<size_t>(rank()));
        std::vector<std::byte> result;
        reduce_in_rank_order(slices, dtype, call.output.numel(), call.op, result);
        if (!result.empty()) std::memcpy(output, result.data(), result.size());
        return;
      }
    }
  }

  std::shared_ptr<TcpStore> store_;
  std::string prefix_;
  std::mutex mutex_;
  std::optional<std::string> aborted_;
  bool shut_down_ = false;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_store_process_group(std::shared_ptr<TcpStore> store, int rank, int world_size,
                                                       Device device, ProcessGroupOptions options,
                                                       std::string key_prefix) {
  if (!store) throw std::invalid_argument("store process group: no store");
  if (device.type == DeviceType::cuda)
    throw std::invalid_argument(
        "the store backend runs ranks on cpu, sim or meta, not cuda (GPU collectives are the nccl backend's)");
  return std::make_unique<StoreProcessGroup>(std::move(store), rank, world_size, device, options,
                                             std::move(key_prefix));
}

}  // namespace bytegrad::distributed
