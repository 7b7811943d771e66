// DistributedDataParallel and its reducer, following PyTorch 2.11's distributed.py and reducer.cpp
// (shared/reference/pytorch-distributed-memory.md §1): every device allocation they make is made here, in
// the same order, with the same size, on the same stream.
#include "bytegrad/distributed/ddp.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "bytegrad/autograd/accumulate_grad.h"
#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::distributed {

namespace {

constexpr size_t kBroadcastBucketBytes = size_t{250} * 1024 * 1024;  // DDP's broadcast_bucket_size
constexpr size_t kDefaultFirstBucketBytes = size_t{1024} * 1024;     // dist._DEFAULT_FIRST_BUCKET_BYTES
constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();      // sys.maxsize

std::string rank_prefix(const ProcessGroup& group) {
  return "DistributedDataParallel on rank " + std::to_string(group.rank()) + ": ";
}

// One int32 tensor on `device` holding `values`, through a host tensor (a blocking host-to-device copy).
Tensor device_ints(const std::vector<int32_t>& values, Device device) {
  std::vector<double> as_double(values.begin(), values.end());
  Tensor host = from_vector(as_double, {static_cast<int64_t>(values.size())}, TensorOptions{ScalarType::int32, kCpu});
  Tensor on_device = empty({static_cast<int64_t>(values.size())}, TensorOptions{ScalarType::int32, device});
  on_device.copy_(host);
  return on_device;
}

// The values of an int tensor on the host (meta has none: the fallback is returned).
std::vector<int64_t> host_ints(const Tensor& t, const std::vector<int64_t>& fallback) {
  if (t.device().type == DeviceType::meta) return fallback;
  Tensor host = t.to(ScalarType::int64).cpu();
  const auto* data = static_cast<const int64_t*>(host.data_ptr());
  return std::vector<int64_t>(data, data + host.numel());
}

// The pass-through node DDP puts after the module's outputs (_DDPSink): outputs are clones, gradients pass
// unchanged; with static_graph its first backward queues the delayed all-reduce.
class DDPSinkNode final : public Node {
 public:
  explicit DDPSinkNode(std::function<void()> on_backward) : on_backward_(std::move(on_backward)) {}
  std::string name() const override { return "_DDPSinkBackward"; }
  TensorList apply(TensorList&& grads) override {
    if (on_backward_) on_backward_();
    return std::move(grads);
  }

 private:
  std::function<void()> on_backward_;
};

}  // namespace

// ------------------------------------------------------------------------------------- bucket assignment

std::vector<std::vector<size_t>> compute_bucket_assignment_by_size(const std::vector<Tensor>& tensors,
                                                                   const std::vector<size_t>& limits,
                                                                   const std::vector<size_t>& order) {
  if (limits.empty()) throw std::invalid_argument("compute_bucket_assignment_by_size: no bucket size limit given");
  if (!order.empty() && order.size() != tensors.size())
    throw std::invalid_argument("compute_bucket_assignment_by_size: " + std::to_string(order.size()) + " indices for " +
                                std::to_string(tensors.size()) + " tensors");
  struct Accumulator {
    std::vector<size_t> indices;
    size_t bytes = 0;
    size_t limit_index = 0;
  };
  // Keyed by dtype and device, in the order keys first appear (PyTorch's map: one key in practice).
  std::vector<std::pair<std::pair<ScalarType, Device>, Accumulator>> open;
  std::vector<std::vector<size_t>> result;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const size_t index = order.empty() ? i : order[i];
    const auto key = std::make_pair(t.dtype(), t.device());
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& entry) { return entry.first == key; });
    if (it == open.end()) it = open.insert(open.end(), {key, Accumulator{}});
    Accumulator& bucket = it->second;
    bucket.indices.push_back(index);
    bucket.bytes += t.nbytes();
    if (bucket.bytes >= limits[bucket.limit_index]) {
      result.push_back(std::move(bucket.indices));
      const size_t next_limit = std::min(bucket.limit_index + 1, limits.size() - 1);
      bucket = Accumulator{};
      bucket.limit_index = next_limit;
    }
  }
  for (auto& [key, bucket] : open)
    if (!bucket.indices.empty()) result.push_back(std::move(bucket.indices));
  if (order.empty()) {
    std::stable_sort(result.begin(), result.end(), [](const auto& a, const auto& b) {
      return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
    });
  }
  return result;
}

// ---------------------------------------------------------------------------------- broadcast_coalesced

void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, size_t bucket_bytes, int src) {
  NoGradGuard no_grad;
  struct InFlight {
    std::vector<Tensor> tensors;
    Tensor flat;
    std::shared_ptr<Work> work;
  };
  auto finish = [](InFlight& f) {
    f.work->wait();
    if (f.tensors.size() > 1) {
      int64_t offset = 0;
      for (const Tensor& t : f.tensors) {
        t.copy_(f.flat.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
    }
  };
  // "We maintain a maximum of 2 in flight broadcast operations" (comm.cpp).
  constexpr size_t kMaxInFlight = 2;
  std::deque<InFlight> in_flight;
  for (const auto& bucket : compute_bucket_assignment_by_size(tensors, {bucket_bytes})) {
    if (in_flight.size() >= kMaxInFlight) {
      finish(in_flight.front());
      in_flight.pop_front();
    }
    InFlight f;
    for (size_t i : bucket) f.tensors.push_back(tensors[i]);
    if (f.tensors.size() == 1) {
      f.flat = f.tensors[0].view({-1});  // flatten_dense_tensors of one tensor is a view
    } else {
      // flatten_dense_tensors: at::cat of the flattened tensors, one allocation on the current stream.
      CategoryScope communication(MemoryCategory::communication);
      AllocationScope scope("broadcast_coalesced flat");
      int64_t numel = 0;
      for (const Tensor& t : f.tensors) numel += t.numel();
      f.flat = empty({numel}, TensorOptions{f.tensors[0].dtype(), f.tensors[0].device()});
      int64_t offset = 0;
      for (const Tensor& t : f.tensors) {
        f.flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
        offset += t.numel();
      }
    }
    f.work = group.broadcast(f.flat, src, /*async_op=*/true);  // C++ callers get asyncOp=true
    in_flight.push_back(std::move(f));
  }
  while (!in_flight.empty()) {
    finish(in_flight.front());
    in_flight.pop_front();
  }
}

// ------------------------------------------------------------------------------------------------ Reducer

class Reducer {
 public:
  Reducer(std::vector<Tensor> params, ProcessGroup& group, const DDPOptions& options,
          const std::vector<std::vector<size_t>>& initial_buckets, size_t first_bucket_bytes, size_t bucket_bytes)
      : params_(std::move(params)),
        group_(group),
        options_(options),
        first_bucket_bytes_(first_bucket_bytes),
        bucket_bytes_(bucket_bytes) {
    initialize_buckets(initial_buckets);
    hooks_triggered_.assign(params_.size(), 0);
    for (size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(register_post_accumulate_grad_hook(params_[i], [this, i](const Tensor&) { autograd_hook(i); }));
    if (options_.find_unused_parameters) initialize_local_used_map();
  }
  ~Reducer() {
    for (size_t i = 0; i < params_.size(); ++i) remove_post_accumulate_grad_hook(params_[i], hooks_[i]);
  }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  const std::vector<Tensor>& params() const { return params_; }

  void set_static_graph() {
    static_graph_ = true;
    initialize_local_used_map();
  }

  // At each grad-enabled forward: refuses to start an iteration whose previous reduction never finished,
  // then rebuilds the buckets once, in gradient-ready order.
  bool rebuild_buckets() {
    ensure_prior_reduction_finished();
    if (!should_rebuild_buckets() || rebuilt_params_.empty()) return false;
    std::vector<Tensor> ordered;
    for (size_t i : rebuilt_params_) ordered.push_back(params_[i]);
    auto assignment = compute_bucket_assignment_by_size(ordered, {first_bucket_bytes_, bucket_bytes_}, rebuilt_params_);
    assignment = sync_bucket_indices(assignment);
    has_rebuilt_bucket_ = true;
    rebuilt_params_.clear();
    initialize_buckets(assignment);
    return true;
  }

  void prepare_for_backward(const std::vector<Tensor>& outputs) {
    expect_autograd_hooks_ = true;
    next_bucket_ = 0;
    for (Bucket& b : buckets_) b.pending = b.variables.size();
    if (static_graph_) hooks_left_this_iteration_ = hooks_triggered_;
    has_marked_unused_parameters_ = false;
    ready_this_iteration_.assign(params_.size(), false);
    if (dynamic_graph_find_unused()) {
      unused_parameters_.clear();
      search_unused_parameters(outputs);
    }
  }

  // Static graph, first backward: every gradient goes into its bucket at the end, all buckets reduce.
  void delay_all_reduce() {
    unused_parameters_.clear();
    require_finalize_ = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (hooks_triggered_[i] == 0) unused_parameters_.push_back(i);
      mark_variable_ready_dense(i);
    }
    all_reduce_local_used_map();
    for (Bucket& b : buckets_) all_reduce_bucket(b);
    finalize_backward();
  }

  std::vector<std::vector<size_t>> bucket_indices() const {
    std::vector<std::vector<size_t>> out;
    for (const Bucket& b : buckets_) out.push_back(b.variables);
    return out;
  }
  std::vector<size_t> bucket_bytes() const {
    std::vector<size_t> out;
    for (const Bucket& b : buckets_) out.push_back(b.gradients.nbytes());
    return out;
  }
  bool has_rebuilt_buckets() const { return has_rebuilt_bucket_; }
  bool static_graph() const { return static_graph_; }

 private:
  struct Bucket {
    Tensor gradients;               // the flat all-reduced in place
    std::vector<size_t> variables;  // parameter indices, in layout order
    std::vector<Tensor> views;      // each parameter's view of `gradients`
    size_t pending = 0;
    std::shared_ptr<Work> work;
  };
  struct Locator {
    size_t bucket = 0;
    size_t position = 0;
  };

  bool dynamic_graph_find_unused() const { return !static_graph_ && options_.find_unused_parameters; }
  bool static_graph_first_iteration() const { return static_graph_ && backward_calls_ == 1; }
  bool static_graph_after_first_iteration() const { return static_graph_ && backward_calls_ > 1; }
  bool should_rebuild_buckets() const {
    return (static_graph_ || !options_.find_unused_parameters) && !has_rebuilt_bucket_;
  }

  void initialize_local_used_map() {
    local_used_map_.assign(params_.size(), 0);
    CategoryScope communication(MemoryCategory::communication);  // all-reduced to find the unused parameters
    AllocationScope scope("DDP local_used_map");
    local_used_map_dev_ =
        empty({static_cast<int64_t>(params_.size())}, TensorOptions{ScalarType::int32, group_.device()});
  }

  void initialize_buckets(const std::vector<std::vector<size_t>>& assignment) {
    buckets_.clear();  // the old flats go now (unless an unwaited all-reduce still holds one)
    locators_.assign(params_.size(), {});
    // With gradient_as_bucket_view the bucket is where the gradients live (.grad views it); without, it is a
    // second copy of them that exists for the all-reduce.
    CategoryScope category(options_.gradient_as_bucket_view ? MemoryCategory::gradient : MemoryCategory::communication);
    AllocationScope scope("DDP gradient bucket");
    NoGradGuard no_grad;
    for (const auto& indices : assignment) {
      Bucket bucket;
      bucket.variables = indices;
      int64_t numel = 0;
      for (size_t i : indices) numel += params_.at(i).numel();
      const Tensor& first = params_.at(indices.front());
      bucket.gradients = empty({numel}, TensorOptions{first.dtype(), first.device()});
      int64_t offset = 0;
      for (size_t position = 0; position < indices.size(); ++position) {
        const Tensor& p = params_[indices[position]];
        bucket.views.push_back(bucket.gradients.as_strided(p.sizes(), p.strides(), offset));
        offset += p.numel();
        locators_[indices[position]] = {buckets_.size(), position};
      }
      // With bucket views, a gradient already there moves into the bucket (initialize_bucket_views).
      if (options_.gradient_as_bucket_view) {
        for (size_t position = 0; position < indices.size(); ++position) {
          const Tensor& p = params_[indices[position]];
          const Tensor grad = p.grad();
          if (grad.defined() && !grad.shares_storage_with(bucket.gradients)) {
            bucket.views[position].copy_(grad);
            p.set_grad(bucket.views[position]);
          }
        }
      }
      bucket.pending = indices.size();
      buckets_.push_back(std::move(bucket));
    }
  }

  // Every rank takes rank 0's assignment: two small int32 tensors broadcast and waited for.
  std::vector<std::vector<size_t>> sync_bucket_indices(const std::vector<std::vector<size_t>>& local) {
    NoGradGuard no_grad;
    CategoryScope communication(MemoryCategory::communication);
    AllocationScope scope("DDP bucket indices");
    std::vector<int32_t> indices;
    std::vector<int64_t> local_flat;
    for (const auto& bucket : local)
      for (size_t i : bucket) {
        indices.push_back(static_cast<int32_t>(i));
        local_flat.push_back(static_cast<int64_t>(i));
      }
    indices.push_back(static_cast<int32_t>(local.size()));
    local_flat.push_back(static_cast<int64_t>(local.size()));
    Tensor indices_device = device_ints(indices, group_.device());
    group_.broadcast(indices_device, 0, /*async_op=*/true)->wait();
    const std::vector<int64_t> received = host_ints(indices_device, local_flat);
    const auto num_buckets = static_cast<size_t>(received.back());
    std::vector<int32_t> sizes;
    std::vector<int64_t> local_sizes;
    for (size_t b = 0; b < num_buckets; ++b) {
      const size_t size = local.at(std::min(b, local.size() - 1)).size();
      sizes.push_back(static_cast<int32_t>(size));
      local_sizes.push_back(static_cast<int64_t>(size));
    }
    Tensor sizes_device = device_ints(sizes, group_.device());
    group_.broadcast(sizes_device, 0, /*async_op=*/true)->wait();
    const std::vector<int64_t> received_sizes = host_ints(sizes_device, local_sizes);
    std::vector<std::vector<size_t>> result;
    size_t next = 0;
    for (int64_t size : received_sizes) {
      std::vector<size_t> bucket;
      for (int64_t k = 0; k < size; ++k) bucket.push_back(static_cast<size_t>(received.at(next++)));
      result.push_back(std::move(bucket));
    }
    return result;  // sizes_device frees first, then indices_device (PyTorch's destruction order)
  }

  void ensure_prior_reduction_finished() const {
    if (!require_finalize_) return;
    std::string unready;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_this_iteration_.empty() && !ready_this_iteration_[i])
        unready += (unready.empty() ? "" : ", ") + std::to_string(i);
    throw std::runtime_error(
        rank_prefix(group_) +
        "the previous iteration's gradient reduction never finished: some parameters received no gradient in "
        "that backward (indices " +
        unready +
        "). Construct DistributedDataParallel with find_unused_parameters = true when parts of the model can "
        "go unused, and make sure every output of the forward takes part in the loss.");
  }

  void search_unused_parameters(const std::vector<Tensor>& outputs) {
    std::unordered_set<const Node*> seen;
    std::vector<Node*> stack;
    for (const Tensor& out : outputs) {
      if (!out.defined()) continue;
      const Edge edge = gradient_edge(out);
      if (edge.valid() && seen.insert(edge.function.get()).second) stack.push_back(edge.function.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& e : node->next_edges)
        if (e.valid() && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const AutogradMeta* meta = autograd_meta(params_[i]);
      const auto accumulator = meta ? meta->grad_accumulator.lock() : nullptr;
      if (!accumulator || seen.count(accumulator.get()) == 0) unused_parameters_.push_back(i);
    }
  }

  void autograd_hook(size_t index) {
    if (!first_autograd_hook_called_) {
      first_autograd_hook_called_ = true;
      ++backward_calls_;
    }
    if (dynamic_graph_find_unused() || static_graph_first_iteration()) local_used_map_[index] = 1;
    if (!expect_autograd_hooks_) return;  // no_sync, or a backward DDP's forward did not prepare
    if (!has_marked_unused_parameters_) {
      has_marked_unused_parameters_ = true;
      for (size_t unused : unused_parameters_) mark_variable_ready(unused);
    }
    if (static_graph_after_first_iteration()) {
      if (--hooks_left_this_iteration_.at(index) == 0) {
        if (should_rebuild_buckets()) rebuilt_params_.push_back(index);
        mark_variable_ready(index);
      }
      return;
    }
    if (static_graph_first_iteration()) {
      hooks_triggered_.at(index) += 1;
      return;
    }
    if (should_rebuild_buckets()) rebuilt_params_.push_back(index);
    mark_variable_ready(index);
  }

  void mark_variable_ready(size_t index) {
    if (ready_this_iteration_.at(index))
      throw std::runtime_error(rank_prefix(group_) + "parameter " + std::to_string(index) +
                               " was marked ready twice in one backward: a parameter used by several "
                               "forwards of one iteration, or reentrant backward, is not supported");
    ready_this_iteration_[index] = true;
    require_finalize_ = true;
    mark_variable_ready_dense(index);
    Bucket& bucket = buckets_.at(locators_.at(index).bucket);
    if (--bucket.pending == 0) mark_bucket_ready(locators_[index].bucket);
    if (next_bucket_ == buckets_.size()) {
      if (dynamic_graph_find_unused()) all_reduce_local_used_map();
      queue_backward_callback([this] {
        if (static_graph_after_first_iteration() && should_rebuild_buckets())
          for (size_t unused : unused_parameters_) rebuilt_params_.push_back(unused);
        finalize_backward();
      });
    }
  }

  // The gradient into its bucket view, divided by the world size while copied (PyTorch's mul_out with a
  // host scalar: no allocation). With bucket views, .grad becomes the view and autograd's tensor goes.
  void mark_variable_ready_dense(size_t index) {
    NoGradGuard no_grad;
    const Tensor& param = params_[index];
    const Locator where = locators_.at(index);
    const Tensor& view = buckets_[where.bucket].views[where.position];
    const Tensor grad = param.grad();
    const double inverse = 1.0 / static_cast<double>(group_.size());
    if (grad.defined()) {
      if (!grad.shares_storage_with(view)) {
        view.copy_(grad);
        view.mul_(inverse);
        if (options_.gradient_as_bucket_view) param.set_grad(view);
      } else {
        view.mul_(inverse);
      }
    } else {
      view.zero_();
    }
  }

  void mark_bucket_ready(size_t bucket_index) {
    if (bucket_index > next_bucket_) return;  // launched in order, once the ones before are
    for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0; ++next_bucket_)
      all_reduce_bucket(buckets_[next_bucket_]);
  }

  // The default comm hook: the flat all-reduced (sum) in place on the group's stream; the Work is kept
  // only for its future, so the bucket stays on its shelf until the group notices completion.
  void all_reduce_bucket(Bucket& bucket) { bucket.work = group_.all_reduce(bucket.gradients, ReduceOp::sum, true); }

  void all_reduce_local_used_map() {
    NoGradGuard no_grad;
    std::vector<double> used(local_used_map_.begin(), local_used_map_.end());
    // Through a pinned host buffer (host memory) into the device map, then all-reduced asynchronously.
    local_used_map_dev_.copy_(
        from_vector(used, {static_cast<int64_t>(used.size())}, TensorOptions{ScalarType::int32, kCpu}));
    local_used_work_ = group_.all_reduce(local_used_map_dev_, ReduceOp::sum, true);
    local_used_map_reduced_ = false;
  }

  void finalize_backward() {
    expect_autograd_hooks_ = false;
    first_autograd_hook_called_ = false;
    require_finalize_ = false;
    for (Bucket& bucket : buckets_) {
      if (!bucket.work)
        throw std::logic_error(rank_prefix(group_) + "a gradient bucket was never all-reduced in this backward");
      bucket.work->wait_future();
      finalize_bucket_dense(bucket);
    }
    if ((dynamic_graph_find_unused() || static_graph_first_iteration()) && !local_used_map_reduced_ && local_used_work_)
      local_used_work_->wait();
    if (dynamic_graph_find_unused()) {
      std::fill(local_used_map_.begin(), local_used_map_.end(), 0);
      local_used_map_reduced_ = false;
    }
  }

  void finalize_bucket_dense(Bucket& bucket) {
    NoGradGuard no_grad;
    for (size_t position = 0; position < bucket.variables.size(); ++position) {
      const size_t index = bucket.variables[position];
      const Tensor& param = params_[index];
      bool globally_unused = false;
      if (static_graph_ || options_.find_unused_parameters) {
        globally_unused = local_used_map_[index] == 0;
        if (globally_unused && !local_used_map_reduced_) {
          local_used_work_->wait();
          const std::vector<int64_t> fallback(local_used_map_.begin(), local_used_map_.end());
          const std::vector<int64_t> reduced = host_ints(local_used_map_dev_, fallback);
          for (size_t k = 0; k < reduced.size(); ++k) local_used_map_[k] = static_cast<int32_t>(reduced[k]);
          globally_unused = local_used_map_[index] == 0;
          local_used_map_reduced_ = true;
        }
      }
      if (globally_unused) continue;  // its .grad stays as it was
      const Tensor& view = bucket.views[position];
      const Tensor grad = param.grad();
      if (options_.gradient_as_bucket_view) {
        if (!grad.defined()) {
          param.set_grad(view);
        } else if (!grad.shares_storage_with(view)) {
          throw std::runtime_error(rank_prefix(group_) + "parameter " + std::to_string(index) +
                                   "'s .grad is not its DDP bucket view although gradient_as_bucket_view is set: "
                                   "assign to .grad only in place");
        }
      } else if (!grad.defined()) {
        // clone_obey_contract: a gradient laid out as its parameter.
        AllocationScope scope("gradient");
        Tensor copy = empty_strided(param.sizes(), param.strides(), TensorOptions{param.dtype(), param.device()});
        copy.copy_(view);
        param.set_grad(copy);
      } else {
        grad.copy_(view);
      }
    }
  }

  std::vector<Tensor> params_;
  ProcessGroup& group_;
  DDPOptions options_;
  size_t first_bucket_bytes_;
  size_t bucket_bytes_;
  std::vector<uint64_t> hooks_;
  std::vector<Bucket> buckets_;
  std::vector<Locator> locators_;
  size_t next_bucket_ = 0;
  bool expect_autograd_hooks_ = false;
  bool require_finalize_ = false;
  bool first_autograd_hook_called_ = false;
  bool has_marked_unused_parameters_ = false;
  bool has_rebuilt_bucket_ = false;
  bool static_graph_ = false;
  int64_t backward_calls_ = 0;
  std::vector<size_t> rebuilt_params_;
  std::vector<bool> ready_this_iteration_;
  std::vector<size_t> unused_parameters_;
  std::vector<int32_t> local_used_map_;
  Tensor local_used_map_dev_;
  std::shared_ptr<Work> local_used_work_;
  bool local_used_map_reduced_ = false;
  std::vector<int64_t> hooks_triggered_;            // static graph: hooks per parameter in the first backward
  std::vector<int64_t> hooks_left_this_iteration_;  // ... counted down in later ones
};

// ---------------------------------------------------------------------------------- DistributedDataParallel

namespace {

// _verify_param_shape_across_processes (reducer.cpp's verify_params_across_processes): the parameter count
// all-gathered, then rank 0's shapes broadcast and compared, with the same small device tensors.
void verify_params_across_processes(ProcessGroup& group, const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  CategoryScope communication(MemoryCategory::communication);  // small tensors gathered and broadcast
  AllocationScope scope("DDP parameter check");
  const Device device = group.device();
  const TensorOptions int64_on{ScalarType::int64, device};
  Tensor count = from_vector({static_cast<double>(params.size())}, {1}, TensorOptions{ScalarType::int64, kCpu});
  Tensor count_device = empty({1}, int64_on);
  count_device.copy_(count);
  std::vector<Tensor> counts(static_cast<size_t>(group.size()));
  for (Tensor& c : counts) c = empty({1}, int64_on);
  group.all_gather(counts, count_device, /*async_op=*/true)->wait();
  if (device.type != DeviceType::meta) {
    std::string listed;
    bool differ = false;
    for (int r = 0; r < group.size(); ++r) {
      const auto n = static_cast<size_t>(counts[r].cpu().item());
      differ = differ || n != params.size();
      listed += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + std::to_string(n);
    }
    if (differ)
      throw CollectiveError(rank_prefix(group) +
                            "DDP needs the same model on every rank, but the ranks' parameter counts differ (" +
                            listed + ")");
  }
  std::vector<double> metadata;
  std::vector<int64_t> local;
  for (const Tensor& p : params) {
    for (int64_t s : p.sizes()) metadata.push_back(static_cast<double>(s));
    for (int64_t s : p.strides()) metadata.push_back(static_cast<double>(s));
  }
  local.reserve(metadata.size());
  for (double v : metadata) local.push_back(static_cast<int64_t>(v));
  {
    Tensor host =
        from_vector(metadata, {static_cast<int64_t>(metadata.size())}, TensorOptions{ScalarType::int64, kCpu});
    Tensor metadata_device = empty({static_cast<int64_t>(metadata.size())}, int64_on);
    metadata_device.copy_(host);
    group.broadcast(metadata_device, 0, /*async_op=*/true)->wait();
    const std::vector<int64_t> from_rank0 = host_ints(metadata_device, local);
    size_t at = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      const auto dims = static_cast<size_t>(p.dim());
      Shape sizes(from_rank0.begin() + static_cast<std::ptrdiff_t>(at),
                  from_rank0.begin() + static_cast<std::ptrdiff_t>(at + dims));
      Shape strides(from_rank0.begin() + static_cast<std::ptrdiff_t>(at + dims),
                    from_rank0.begin() + static_cast<std::ptrdiff_t>(at + 2 * dims));
      at += 2 * dims;
      if (sizes != p.sizes() || strides != p.strides())
        throw CollectiveError(rank_prefix(group) + "DDP needs the same model on every rank, but parameter " +
                              std::to_string(i) + " has sizes " + shape_str(p.sizes()) + " and strides " +
                              shape_str(p.strides()) + " here and sizes " + shape_str(sizes) + " and strides " +
                              shape_str(strides) + " on rank 0");
    }
  }  // metadata_device frees first, then the gathered counts, then the count (destruction order)
  counts.clear();
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group,
                                                 DDPOptions options)
    : module_(std::move(module)), group_(group), options_(options) {
  if (!module_) throw std::invalid_argument(rank_prefix(group) + "the module is null");
  if (!(options.bucket_cap_mb > 0))
    throw std::invalid_argument(rank_prefix(group) + "bucket_cap_mb must be positive, got " +
                                std::to_string(options.bucket_cap_mb));
  // _build_params_for_reducer: parameters that require grad, each once (tied weights once).
  std::vector<Tensor> params;
  for (const auto& [name, p] : module_->named_parameters()) {
    if (p.device() != group.device())
      throw std::invalid_argument(rank_prefix(group) + "parameter " + name + " is on " + p.device().str() +
                                  ", but this rank's process group uses " + group.device().str() +
                                  ": move the module there first");
    if (p.requires_grad()) params.push_back(p);
  }
  for (const auto& [name, b] : module_->named_buffers())
    if (b.device() != group.device())
      throw std::invalid_argument(rank_prefix(group) + "buffer " + name + " is on " + b.device().str() +
                                  ", but this rank's process group uses " + group.device().str());
  if (params.empty())
    throw std::invalid_argument(rank_prefix(group) +
                                "DistributedDataParallel is not needed when a module has no parameter that requires a "
                                "gradient");
  if (options.init_sync) {
    verify_params_across_processes(group, params);
    // _sync_module_states: parameters, then buffers, from rank 0.
    std::vector<Tensor> states;
    for (const Tensor& p : module_->parameters()) states.push_back(p.detach());
    if (options.broadcast_buffers)
      for (const Tensor& b : module_->buffers()) states.push_back(b);
    broadcast_coalesced(group, states, kBroadcastBucketBytes, 0);
  }
  const auto cap = static_cast<size_t>(options.bucket_cap_mb * 1024 * 1024);
  const bool default_cap = options.bucket_cap_mb == 25;
  std::vector<size_t> limits;
  if (options.static_graph || !options.find_unused_parameters) {
    limits = {kNoLimit};  // one bucket per dtype until the rebuild
  } else if (default_cap) {
    limits = {kDefaultFirstBucketBytes, cap};
  } else {
    limits = {cap};
  }
  auto buckets = compute_bucket_assignment_by_size(params, limits);
  std::reverse(buckets.begin(), buckets.end());
  reducer_ = std::make_unique<Reducer>(std::move(params), group, options, buckets,
                                       default_cap ? kDefaultFirstBucketBytes : cap, cap);
  if (options.static_graph) reducer_->set_static_graph();
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::pre_forward() {
  if (!grad_mode_enabled()) return;
  reducer_->rebuild_buckets();
  if (require_forward_param_sync_ && options_.broadcast_buffers) sync_buffers();
}

void DistributedDataParallel::sync_buffers() {
  std::vector<Tensor> buffers = module_->buffers();
  if (buffers.empty()) return;
  NoGradGuard no_grad;
  broadcast_coalesced(group_, buffers, kBroadcastBucketBytes, 0);
}

void DistributedDataParallel::post_forward(const std::vector<Tensor*>& outputs) {
  if (!grad_mode_enabled()) return;
  if (require_backward_grad_sync_) {
    std::vector<Tensor> searched;
    if (options_.find_unused_parameters && !options_.static_graph)
      for (const Tensor* t : outputs) searched.push_back(*t);
    reducer_->prepare_for_backward(searched);
    require_forward_param_sync_ = true;
  } else {
    require_forward_param_sync_ = false;
  }
  const bool sink = (options_.find_unused_parameters && !options_.static_graph) ||
                    (options_.static_graph && !static_graph_delay_allreduce_enqueued_);
  if (!sink) return;
  // _DDPSink: every output with history is replaced by a clone behind a pass-through node.
  std::function<void()> on_backward;
  if (options_.static_graph) {
    on_backward = [this] {
      if (static_graph_delay_allreduce_enqueued_) return;
      static_graph_delay_allreduce_enqueued_ = true;
      Reducer* reducer = reducer_.get();
      queue_backward_callback([reducer] { reducer->delay_all_reduce(); });
    };
  }
  auto node = std::make_shared<DDPSinkNode>(std::move(on_backward));
  std::vector<Tensor*> through;
  for (Tensor* t : outputs)
    if (t->defined() && requires_grad(*t)) through.push_back(t);
  if (through.empty()) return;
  for (Tensor* t : through) node->next_edges.push_back(gradient_edge(*t));
  for (size_t i = 0; i < through.size(); ++i) {
    Tensor clone;
    {
      NoGradGuard no_grad;
      clone = through[i]->clone();
    }
    set_history(clone, node, static_cast<uint32_t>(i));
    *through[i] = clone;
  }
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.require_backward_grad_sync_) {
  ddp.require_backward_grad_sync_ = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.require_backward_grad_sync_ = previous_; }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_indices() const { return reducer_->bucket_indices(); }
std::vector<size_t> DistributedDataParallel::bucket_bytes() const { return reducer_->bucket_bytes(); }
bool DistributedDataParallel::buckets_rebuilt() const { return reducer_->has_rebuilt_buckets(); }

}  // namespace bytegrad::distributed
