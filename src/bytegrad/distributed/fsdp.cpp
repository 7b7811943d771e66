// fully_shard: the order of every allocation follows PyTorch 2.11's _fully_shard package (FSDPParam,
// FSDPParamGroup, FSDPState, foreach_all_gather / foreach_reduce), checked against the recordings of
// tools/probes/fsdp_probe.py. A parameter keeps one handle (the module's, which the optimizer also holds):
// its data is switched between this rank's shard and the gathered tensor, as PyTorch swaps the module
// attribute between its sharded and unsharded Parameters.
#include "bytegrad/distributed/fsdp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/engine.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/node.h"
#include "bytegrad/core/strided_view.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/nn/clip_grad.h"
#include "bytegrad/nn/init.h"
#include "bytegrad/tensor/memory_role.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::distributed {

namespace {

enum class TrainingState { idle, forward, pre_backward, post_backward };

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The device buffer ATen's CUDA kernels for split_with_sizes_copy and _chunk_cat pack their int64 launch
// metadata into (pinned host memory copied to the device): allocated on the current stream and freed as the
// op returns. Its size depends on the launch grid, hence on the card (multiprocessors, threads per one).
void packed_launch_metadata(Device device, int64_t int64_count) {
  Tensor packed = empty({int64_count}, TensorOptions{ScalarType::int64, device});
}

// Blocks of 128 threads moving 16 bytes each, as both kernels tile their work.
constexpr int64_t kTileBytes = int64_t{128} * 16;

// split_with_sizes_copy(flat.view(W, -1), split_sizes, dim=1): dst and src addresses, chunk sizes (one per
// split), one entry per block, and the blocks' running sums (splits + 1).
int64_t split_copy_metadata_count(Device device, const std::vector<int64_t>& split_bytes, int64_t num_chunks) {
  const DeviceLaunchLimits limits = device_launch_limits(device);
  int64_t num_blocks = 0;
  for (int64_t b : split_bytes) num_blocks += div_up(b, kTileBytes);
  const auto max_blocks = static_cast<int64_t>(static_cast<double>(limits.multiprocessor_count) *
                                               limits.max_threads_per_multiprocessor / 128 * 2.0);
  const int64_t iter_factor = div_up(num_blocks * num_chunks, max_blocks);
  int64_t chunks_per_block = 1;
  while (chunks_per_block * chunks_per_block < iter_factor) ++chunks_per_block;  // ceil(sqrt(iter_factor))
  chunks_per_block = std::min(chunks_per_block, num_chunks);
  const int64_t iters_per_chunk = div_up(iter_factor, chunks_per_block);
  int64_t blocks = 0;
  for (int64_t b : split_bytes) blocks += div_up(b, kTileBytes * iters_per_chunk);
  const auto splits = static_cast<int64_t>(split_bytes.size());
  return 3 * splits + blocks + (splits + 1);
}

// _chunk_cat(grads, dim=0, num_chunks=W, out=...): sources, one entry per block, start bytes and start
// blocks (tensors + 1 each), actual sizes, padded chunk sizes and blocks per tensor.
int64_t chunk_cat_metadata_count(const std::vector<int64_t>& padded_chunk_bytes) {
  int64_t blocks = 0;
  for (int64_t b : padded_chunk_bytes) blocks += div_up(b, kTileBytes);
  const auto n = static_cast<int64_t>(padded_chunk_bytes.size());
  return 6 * n + 2 + blocks;
}

// PyTorch's RegisterPostBackwardFunction: the identity on a module's inputs whose backward runs the
// group's post-backward once the inputs' gradients exist.
class PostBackwardNode final : public Node {
 public:
  explicit PostBackwardNode(std::function<void()> callback) : callback_(std::move(callback)) {}
  std::string name() const override { return "RegisterPostBackwardFunctionBackward"; }
  TensorList apply(TensorList&& grads) override {
    callback_();
    return std::move(grads);
  }

 private:
  std::function<void()> callback_;
};

Tensor through_post_backward_node(const Tensor& input, std::function<void()> callback) {
  auto node = std::make_shared<PostBackwardNode>(std::move(callback));
  node->next_edges.push_back(gradient_edge(input));
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& from = input.impl();
  impl->storage = from.storage;
  impl->sizes = from.sizes;
  impl->strides = from.strides;
  impl->storage_offset = from.storage_offset;
  impl->dtype = from.dtype;
  impl->version = from.version;
  impl->is_view = true;
  Tensor alias(std::move(impl));
  set_history(alias, node, 0);
  return alias;
}

struct AllGatherResult {
  Tensor output;  // the flat: W x the group's padded shard elements
  // The all-gather's world (the group's, or the post-forward subgroup's) and each parameter's part of a
  // rank's input.
  int world = 1;
  std::vector<int64_t> input_numels;
  Event event;        // recorded on the all-gather stream after the collective
  Tensor cast_input;  // with param_dtype: the cast copy of the shards, freed with the call
};

class ParamGroup;

struct CommContext {
  bool initialised = false;
  Stream copy_in, all_gather, reduce_scatter, all_reduce;
  struct AllGatherState {
    std::shared_ptr<AllGatherResult> result;
    Event event;
  };
  std::optional<AllGatherState> all_gather_state;
  struct ReduceScatterState {
    Tensor input;
    Event event;
  };
  std::optional<ReduceScatterState> reduce_scatter_state;
  std::vector<ParamGroup*> post_forward_order;
};

}  // namespace

// One parameter under Shard(0).
struct FSDPParam {
  std::string name;
  std::string path;  // the name the ledger gives its blocks: the module's path and the name ("fc1.weight")
  Tensor param;      // the module's handle
  Shape full_size;
  ScalarType orig_dtype = ScalarType::float32;
  ScalarType unsharded_dtype = ScalarType::float32;
  int64_t padded_rows = 0, local_rows = 0, row_numel = 1;
  Tensor padded_shard;       // padded_rows x rest, orig_dtype
  Tensor all_gather_output;  // padded_rows * W x rest (flat), unsharded_dtype; storage 0 bytes while sharded
  Tensor kept_sharded_grad;  // a sharded .grad set aside while the handle shows the unsharded parameter
  // reshard_after_forward=int: after forward, this rank's 1/int of the unsharded padded parameter (a clone,
  // unsharded dtype, on the default stream), all-gathered from the smaller group in backward.
  Tensor post_forward_shard;
  // The padded shard is this rank's `parameter` in the ledger: the module's own role went with the full
  // tensor's block when the handle moved to the shard.
  MemoryRole shard_role;
  void take_shard_role() { shard_role = MemoryRole(padded_shard, MemoryCategory::parameter, path); }

  int64_t padded_numel() const { return padded_rows * row_numel; }
  Shape sharded_size() const {
    Shape s = full_size;
    s[0] = local_rows;
    return s;
  }
  void point_handle(const Storage& storage, const Shape& sizes, ScalarType dtype) const {
    TensorImpl& impl = param.impl();
    impl.storage = storage;
    impl.sizes = sizes;
    impl.strides = contiguous_strides(sizes);
    impl.storage_offset = 0;
    impl.dtype = dtype;
  }
  void to_sharded() {
    point_handle(padded_shard.storage(), sharded_size(), orig_dtype);
    if (all_gather_output.defined()) all_gather_output.storage()->resize(0);
    if (kept_sharded_grad.defined() && !param.grad().defined()) param.set_grad(kept_sharded_grad);
    kept_sharded_grad = Tensor();
  }
  // Built on meta: the handle still shows a shard on a meta device other than the group's.
  bool awaits_materialisation(Device device) const {
    return param.device() != device && param.device().type == DeviceType::meta;
  }
  // FSDPParam.reset_sharded_param, after to() / to_empty() gave the handle new data of the (unpadded) local
  // size: a shorter shard is copied into a new zeroed padded one (the unpadded data freed as the handle
  // moves to it); one of the padded size becomes the padded shard itself. Nothing while still on meta.
  void reset_sharded_param(Device device) {
    if (awaits_materialisation(device) || param.storage() == padded_shard.storage()) return;
    Shape padded = full_size;
    padded[0] = padded_rows;
    if (local_rows != padded_rows) {
      Tensor repadded = zeros(padded, TensorOptions{orig_dtype, param.device()});
      if (local_rows > 0) repadded.narrow(0, 0, local_rows).copy_(param.detach());
      padded_shard = repadded;
      point_handle(padded_shard.storage(), sharded_size(), orig_dtype);
    } else {
      padded_shard = param.detach();
    }
    take_shard_role();
  }
  // FSDPParam.to_unsharded; from the post-forward state, the post-forward shard is freed (it fed the
  // copy-in, done by now). From the sharded state a post-forward shard left by an earlier reshard stays.
  void to_unsharded(bool from_post_forward) {
    if (Tensor g = param.grad(); g.defined()) {
      kept_sharded_grad = g;
      param.set_grad(Tensor());
    }
    point_handle(all_gather_output.storage(), full_size, unsharded_dtype);
    if (from_post_forward) post_forward_shard = Tensor();
  }
  // FSDPParam.to_sharded_post_forward: rank `rank` of `size` keeps its 1/size of the unsharded padded data
  // (cloned so that the unsharded storage can be freed), then the unsharded storage goes.
  void to_sharded_post_forward(int size, int rank) {
    const int64_t numel = all_gather_output.numel() / size;
    {
      CategoryScope gathered(MemoryCategory::gathered_parameter);
      TensorNameScope name(path);
      post_forward_shard = all_gather_output.narrow(0, numel * rank, numel).clone();
    }
    Shape sizes = full_size;
    sizes[0] = fsdp_local_rows(full_size[0], size, rank);
    point_handle(post_forward_shard.storage(), sizes, unsharded_dtype);
    all_gather_output.storage()->resize(0);
  }
};

namespace {

class ParamGroup {
 public:
  ParamGroup(std::vector<FSDPParam> params, ProcessGroup& group, bool reshard_after_forward,
             const MixedPrecisionPolicy& mp, std::unique_ptr<ProcessGroup> post_forward_group)
      : params_(std::move(params)),
        group_(group),
        reshard_after_forward_(reshard_after_forward),
        mp_(mp),
        post_forward_group_(std::move(post_forward_group)) {
    orig_dtype_ = params_.front().orig_dtype;
  }

  void set_comm(std::shared_ptr<CommContext> comm) { comm_ = std::move(comm); }
  void never_reshard_after_forward() { reshard_after_forward_ = false; }
  TrainingState training_state = TrainingState::idle;
  bool unsharded() const { return unsharded_; }

  // FSDPParamGroup.lazy_init: the shards re-padded if to() / to_empty() changed them since (a no-op after
  // FSDP's own apply hook), then none may still be on meta.
  void lazy_init() {
    NoGradGuard no_grad;
    reset_sharded_params();
    for (const FSDPParam& p : params_)
      if (p.awaits_materialisation(group_.device()))
        throw std::runtime_error("fully_shard: parameter '" + p.name + "' is still on " + p.param.device().str() +
                                 "; materialise the model (to_empty(device), then reset_parameters() or a state "
                                 "dict) before its first forward");
  }
  void reset_sharded_params() {
    for (FSDPParam& p : params_) p.reset_sharded_param(group_.device());
  }
  bool awaits_materialisation() const {
    return std::any_of(params_.begin(), params_.end(),
                       [&](const FSDPParam& p) { return p.awaits_materialisation(group_.device()); });
  }

  void unshard() {
    if (all_gather_result_ || unsharded_) return;
    const Device device = group_.device();
    const bool side = training_state == TrainingState::forward || training_state == TrainingState::pre_backward;
    const Stream copy_in = side ? comm_->copy_in : current_stream(device);
    const Stream gather = side ? comm_->all_gather : current_stream(device);
    // From the post-forward state: gathered from the smaller group, the post-forward shards (already of
    // the unsharded dtype) as inputs, once the all-gather streams waited for the reshard that made them.
    ProcessGroup& group = sharded_post_forward_ ? *post_forward_group_ : group_;
    if (reshard_after_forward_event_) {
      comm_->copy_in.wait_event(*reshard_after_forward_event_);
      comm_->all_gather.wait_event(*reshard_after_forward_event_);
      reshard_after_forward_event_.reset();
    }
    auto result = std::make_shared<AllGatherResult>();
    const int world = group.size(), rank = group.rank();
    result->world = world;
    int64_t total = 0;
    for (const FSDPParam& p : params_) {
      result->input_numels.push_back(sharded_post_forward_ ? p.post_forward_shard.numel() : p.padded_numel());
      total += result->input_numels.back();
    }
    NoGradGuard no_grad;
    CategoryScope communication(MemoryCategory::communication);
    {
      StreamGuard on(copy_in);
      std::vector<Tensor> inputs;
      ScalarType dtype = orig_dtype_;
      if (sharded_post_forward_) {
        dtype = params_.front().post_forward_shard.dtype();
        for (const FSDPParam& p : params_) inputs.push_back(p.post_forward_shard);
      } else if (mp_.param_dtype && *mp_.param_dtype != orig_dtype_) {
        dtype = *mp_.param_dtype;
        result->cast_input = named("FSDP all-gather input", [&] {
          return empty({total}, TensorOptions{dtype, device});
        });
        int64_t offset = 0;
        for (const FSDPParam& p : params_) {
          Tensor split = result->cast_input.narrow(0, offset, p.padded_numel());
          split.copy_(p.padded_shard.view({p.padded_numel()}));
          inputs.push_back(split);
          offset += p.padded_numel();
        }
      } else {
        for (const FSDPParam& p : params_) inputs.push_back(p.padded_shard.view({p.padded_numel()}));
      }
      result->output = named("FSDP all-gather output", [&] {
        return empty({total * world}, TensorOptions{dtype, device});
      });
      int64_t offset = static_cast<int64_t>(rank) * total;
      for (const Tensor& in : inputs) {
        result->output.narrow(0, offset, in.numel()).copy_(in);
        offset += in.numel();
      }
    }
    gather.wait_stream(copy_in);
    {
      StreamGuard on(gather);
      group.all_gather_into_tensor(result->output, result->output.narrow(0, static_cast<int64_t>(rank) * total, total));
      result->event = gather.record_event();
    }
    result->cast_input = Tensor();  // the cast copy goes when foreach_all_gather returns
    all_gather_result_ = std::move(result);
  }

  void wait_for_unshard() {
    if (!all_gather_result_) return;
    std::optional<CommContext::AllGatherState> previous;  // the previous group's flat, freed on return
    if (training_state == TrainingState::forward && comm_->all_gather_state) {
      previous = std::move(comm_->all_gather_state);
      comm_->all_gather_state.reset();
      comm_->copy_in.wait_event(previous->event);
      comm_->all_gather.wait_event(previous->event);
    }
    copy_out(*all_gather_result_);
    for (FSDPParam& p : params_) p.to_unsharded(sharded_post_forward_);
    unsharded_ = true;
    sharded_post_forward_ = false;
    const Device device = group_.device();
    Event copied = current_stream(device).record_event();
    if (training_state == TrainingState::forward) {
      comm_->all_gather_state = CommContext::AllGatherState{all_gather_result_, copied};
    } else {
      comm_->copy_in.wait_event(copied);
      comm_->all_gather.wait_event(copied);
    }
    all_gather_result_.reset();
  }

  void reshard() {
    if (training_state == TrainingState::forward) {
      if (!reshard_after_forward_) return;
      if (post_forward_group_) {  // to the smaller group's shard; the all-gather streams wait for it later
        if (!unsharded_) return;
        NoGradGuard no_grad;
        for (FSDPParam& p : params_)
          p.to_sharded_post_forward(post_forward_group_->size(), post_forward_group_->rank());
        unsharded_ = false;
        sharded_post_forward_ = true;
        reshard_after_forward_event_ = current_stream(group_.device()).record_event();
        return;
      }
    }
    if (!unsharded_ && !sharded_post_forward_) return;
    for (FSDPParam& p : params_) p.to_sharded();
    unsharded_ = false;
    sharded_post_forward_ = false;
  }

  void pre_forward() {
    training_state = TrainingState::forward;
    unshard();
    wait_for_unshard();
  }

  void post_forward() {
    reshard();
    post_forward_indices_.push_back(comm_->post_forward_order.size());
    comm_->post_forward_order.push_back(this);
    training_state = TrainingState::idle;
  }

  void pre_backward() {
    if (training_state == TrainingState::pre_backward) return;
    training_state = TrainingState::pre_backward;
    unshard();
    wait_for_unshard();
    backward_prefetch();
  }

  void post_backward() {
    training_state = TrainingState::post_backward;
    std::vector<FSDPParam*> with_grad;
    std::vector<Tensor> grads;
    if (unsharded_)
      for (FSDPParam& p : params_) {
        Tensor g = p.param.grad();
        if (!g.defined()) continue;
        with_grad.push_back(&p);
        grads.push_back(g);
        p.param.set_grad(Tensor());
      }
    reshard();
    if (with_grad.empty()) return;
    if (comm_->reduce_scatter_state) current_stream(group_.device()).wait_event(comm_->reduce_scatter_state->event);
    comm_->reduce_scatter_state.reset();
    reduce(with_grad, grads);
  }

  // _wait_for_post_backward: the optimizer reads the sharded gradients on the default stream after this.
  void finalize_backward() {
    if (post_reduce_event_) current_stream(group_.device()).wait_event(*post_reduce_event_);
    post_reduce_event_.reset();
    post_forward_indices_.clear();
  }

 private:
  void copy_out(const AllGatherResult& result) {
    const Device device = group_.device();
    current_stream(device).wait_event(result.event);
    const int world = result.world;
    const ScalarType dtype = result.output.dtype();
    NoGradGuard no_grad;
    CategoryScope communication(MemoryCategory::communication);  // the copy-out's launch metadata
    for (FSDPParam& p : params_) {
      // The unsharded parameter the module computes with: a `gathered_parameter` named as the parameter.
      CategoryScope gathered(MemoryCategory::gathered_parameter);
      TensorNameScope name(p.path);
      const int64_t numel = p.padded_numel() * group_.size();  // the unsharded padded parameter
      const size_t nbytes = static_cast<size_t>(numel) * element_size(dtype);
      if (!p.all_gather_output.defined()) {
        p.all_gather_output = empty({numel}, TensorOptions{dtype, device});
        p.unsharded_dtype = dtype;
      } else {
        p.all_gather_output.storage()->resize(nbytes);
      }
    }
    std::vector<int64_t> split_bytes;
    int64_t total = 0;
    for (int64_t n : result.input_numels) {
      split_bytes.push_back(n * static_cast<int64_t>(element_size(dtype)));
      total += n;
    }
    packed_launch_metadata(device, split_copy_metadata_count(device, split_bytes, world));
    int64_t offset = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t n = result.input_numels[i];
      for (int r = 0; r < world; ++r)
        params_[i].all_gather_output.narrow(0, r * n, n).copy_(result.output.narrow(0, r * total + offset, n));
      offset += n;
    }
  }

  void backward_prefetch() {
    if (post_forward_indices_.empty()) return;
    const size_t current = post_forward_indices_.back();
    post_forward_indices_.pop_back();
    if (current == 0) return;
    ParamGroup* target = comm_->post_forward_order[current - 1];
    const TrainingState saved = target->training_state;
    target->training_state = TrainingState::pre_backward;
    target->unshard();
    target->training_state = saved;
  }

  // foreach_reduce: reduce-scatter input on the current stream, output on the reduce-scatter stream.
  void reduce(const std::vector<FSDPParam*>& with_grad, std::vector<Tensor>& grads) {
    const Device device = group_.device();
    const int world = group_.size();
    const ScalarType grad_dtype = grads.front().dtype();
    const ScalarType reduce_dtype = mp_.reduce_dtype.value_or(grad_dtype);
    int64_t input_numel = 0;
    std::vector<int64_t> padded_chunk_bytes;
    for (const FSDPParam* p : with_grad) {
      input_numel += p->padded_numel() * world;
      padded_chunk_bytes.push_back(p->padded_numel() * static_cast<int64_t>(element_size(reduce_dtype)));
    }
    NoGradGuard no_grad;
    // Everything reduce() allocates feeds or receives the reduce-scatter; the output's views become the
    // sharded .grad, which makes it `gradient` (memory_category.h's precedence).
    CategoryScope communication(MemoryCategory::communication);
    Tensor input = named("FSDP reduce-scatter input", [&] {
      return empty({input_numel}, TensorOptions{reduce_dtype, device});
    });
    packed_launch_metadata(device, chunk_cat_metadata_count(padded_chunk_bytes));
    {
      int64_t offset = 0;
      const int64_t chunk = input_numel / world;
      for (size_t i = 0; i < with_grad.size(); ++i) {
        const FSDPParam& p = *with_grad[i];
        const Tensor flat = grads[i].contiguous().view({grads[i].numel()});
        for (int r = 0; r < world; ++r) {
          const int64_t rows = std::clamp<int64_t>(p.full_size[0] - r * p.padded_rows, 0, p.padded_rows);
          Tensor dest = input.narrow(0, r * chunk + offset, p.padded_numel());
          if (rows > 0)
            dest.narrow(0, 0, rows * p.row_numel)
                .copy_(flat.narrow(0, r * p.padded_rows * p.row_numel, rows * p.row_numel));
          if (rows < p.padded_rows) dest.narrow(0, rows * p.row_numel, (p.padded_rows - rows) * p.row_numel).zero_();
        }
        offset += p.padded_numel();
      }
    }
    // Python's loop over the gradients keeps the last one bound until foreach_reduce returns, and
    // list.clear() drops the others from the end.
    Tensor last_grad = grads.back();
    while (!grads.empty()) grads.pop_back();
    const Stream current = current_stream(device);
    comm_->reduce_scatter.wait_stream(current);
    Event reduced;
    {
      StreamGuard on(comm_->reduce_scatter);
      Tensor output = named("FSDP reduce-scatter output", [&] {
        return empty({input_numel / world}, TensorOptions{reduce_dtype, device});
      });
      group_.reduce_scatter_tensor(output, input, ReduceOp::avg);
      if (reduce_dtype != orig_dtype_) output = output.to(orig_dtype_);
      int64_t offset = 0;
      for (FSDPParam* p : with_grad) {
        Tensor view = output.as_strided(p->sharded_size(), contiguous_strides(p->sharded_size()), offset);
        if (Tensor existing = p->param.grad(); existing.defined()) {
          existing.add_(view);
        } else {
          p->param.set_grad(view);
        }
        offset += p->padded_numel();
      }
      reduced = comm_->reduce_scatter.record_event();
    }
    // The default stream waits for the reduction only at the end of backward (finalize_backward, PyTorch's
    // _wait_for_post_backward), so the blocks' backward before this one overlaps its reduce-scatter.
    post_reduce_event_ = reduced;
    comm_->reduce_scatter_state = CommContext::ReduceScatterState{input, reduced};
  }

  std::vector<FSDPParam> params_;
  ProcessGroup& group_;
  bool reshard_after_forward_;
  MixedPrecisionPolicy mp_;
  ScalarType orig_dtype_ = ScalarType::float32;
  std::shared_ptr<CommContext> comm_;
  std::shared_ptr<AllGatherResult> all_gather_result_;
  bool unsharded_ = false;
  // reshard_after_forward=int: the group of this rank's `int` consecutive ranks (PyTorch's post-forward
  // mesh), made by this fully_shard call; whether the parameters are in its shards now; the default
  // stream's event after that reshard.
  std::unique_ptr<ProcessGroup> post_forward_group_;
  bool sharded_post_forward_ = false;
  std::optional<Event> reshard_after_forward_event_;
  std::vector<size_t> post_forward_indices_;
  std::optional<Event> post_reduce_event_;  // recorded after this group's last reduce-scatter
};

// What a sharded parameter (a DTensor in PyTorch) brings to code outside FSDP: its group, for
// clip_grad_norm_'s all-reduce, and DTensor's random-number tracker (OffsetBasedRNGTracker, one per process,
// i.e. per process group here), for what random fills allocate. Shared by the group's fully_shard calls.
struct ShardedGroup {
  ProcessGroup* group = nullptr;
  Device device;
  bool tracker_made = false;
};
std::mutex sharded_mutex;
std::map<const ProcessGroup*, std::weak_ptr<ShardedGroup>>& sharded_groups() {
  static std::map<const ProcessGroup*, std::weak_ptr<ShardedGroup>> trackers;
  return trackers;
}
std::map<const TensorImpl*, std::weak_ptr<ShardedGroup>>& sharded_params() {
  static std::map<const TensorImpl*, std::weak_ptr<ShardedGroup>> params;
  return params;
}

void on_sharded_random_fill(const Tensor& t) {
  std::shared_ptr<ShardedGroup> rng;
  bool make_tracker = false;
  {
    std::lock_guard<std::mutex> lock(sharded_mutex);
    auto it = sharded_params().find(&t.impl());
    if (it != sharded_params().end()) rng = it->second.lock();
    if (!rng || t.device() != rng->device) return;
    make_tracker = !rng->tracker_made;
    rng->tracker_made = true;
  }
  NoGradGuard no_grad;
  const TensorOptions bytes{ScalarType::uint8, rng->device};
  if (make_tracker) {
    // The first random op on a DTensor makes the tracker: the generator's state (seed and offset, 16 bytes)
    // copied to the device and broadcast from rank 0, this rank's own copy, their elementwise comparison;
    // all three freed when it returns. (No broadcast here: only rank 0's state would differ.)
    Tensor state = empty({16}, bytes);
    Tensor own = empty({16}, bytes);
    Tensor same = empty({16}, TensorOptions{ScalarType::bool_, rng->device});
  }
  // Every random op on a DTensor: the generator's state on the device while the shard's offset is set.
  Tensor region_state = empty({16}, bytes);
}

// clip_grad_norm_ over sharded gradients: the stacked local norms made whole as DTensor redistributes a
// _NormPartial to Replicate (nn/clip_grad.h).
nn::utils::ShardedNormReducer sharded_norm_reducer(const Tensor& parameter) {
  std::shared_ptr<ShardedGroup> sharded;
  {
    std::lock_guard<std::mutex> lock(sharded_mutex);
    auto it = sharded_params().find(&parameter.impl());
    if (it != sharded_params().end()) sharded = it->second.lock();
  }
  if (!sharded) return {};
  return [sharded](const Tensor& stacked, double norm_type) {
    NoGradGuard no_grad;
    ProcessGroup& group = *sharded->group;
    if (std::isinf(norm_type)) {
      Tensor reduced = stacked.clone();  // the functional all-reduce's output
      group.all_reduce(reduced, ReduceOp::max);
      return reduced;
    }
    // The powers and the reduced copy are freed (in that order) once the root exists.
    Tensor reduced;
    const Tensor powered = pow(stacked, norm_type);
    reduced = powered.clone();
    group.all_reduce(reduced, ReduceOp::sum);
    Tensor whole = pow(reduced, 1.0 / norm_type);
    return whole;
  };
}

struct StateContext {
  std::vector<std::weak_ptr<FSDPState>> all_states;  // the modules' hooks own the states
  FSDPState* iter_forward_root = nullptr;
  bool final_callback_queued = false;
};

}  // namespace

// One fully_shard call (PyTorch's FSDPState).
class FSDPState : public std::enable_shared_from_this<FSDPState> {
 public:
  FSDPState(nn::Module* module, ProcessGroup& group, FullyShardOptions options, std::unique_ptr<ParamGroup> params)
      : module_(module), group_(group), options_(options), params_(std::move(params)) {}

  Tensor pre_forward(const Tensor& input);
  void post_forward(const std::vector<Tensor>& outputs);
  bool is_root() const { return is_root_.value_or(false); }
  void reshard() {
    if (params_) params_->reshard();
  }
  void before_apply();
  void after_apply();
  std::shared_ptr<ShardedGroup> sharded;  // shared by the process group's fully_shard calls

 private:
  void lazy_init();
  void pre_backward();
  void final_callback();

  nn::Module* module_;
  ProcessGroup& group_;
  FullyShardOptions options_;
  std::unique_ptr<ParamGroup> params_;
  std::optional<bool> is_root_;
  TrainingState training_state_ = TrainingState::idle;
  std::shared_ptr<StateContext> state_ctx_ = std::make_shared<StateContext>();
  std::shared_ptr<CommContext> comm_ = std::make_shared<CommContext>();
};

namespace {

// Which module each fully_shard call took, for the root's lazy init and the "twice" check.
std::mutex registry_mutex;
std::map<const nn::Module*, std::weak_ptr<FSDPState>>& registry() {
  static std::map<const nn::Module*, std::weak_ptr<FSDPState>> states;
  return states;
}
std::shared_ptr<FSDPState> state_of(const nn::Module* m) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(m);
  return it == registry().end() ? nullptr : it->second.lock();
}

}  // namespace

// The outermost FSDP module's to() / to_empty() of a model built on meta allocates 4 bytes on the device
// and frees them before the first parameter is made (PyTorch 2.11 records it; which DTensor step makes it
// is not identified). Depth counted per thread, as each rank is a thread on the threads backend.
thread_local int apply_depth = 0;

void FSDPState::before_apply() {
  reshard();  // FSDPModule._apply: the sharded parameters registered first
  if (apply_depth++ > 0) return;
  bool on_meta = false;
  for (nn::Module* m : module_->modules())
    if (std::shared_ptr<FSDPState> s = state_of(m); s && s->params_ && s->params_->awaits_materialisation())
      on_meta = true;
  if (on_meta) Tensor scratch = empty({1}, TensorOptions{ScalarType::float32, group_.device()});
}

void FSDPState::after_apply() {
  --apply_depth;
  NoGradGuard no_grad;
  if (params_) params_->reset_sharded_params();
}

void FSDPState::lazy_init() {
  if (is_root_) return;
  is_root_ = true;
  state_ctx_->all_states.clear();
  for (nn::Module* m : module_->modules()) {
    std::shared_ptr<FSDPState> s = state_of(m);
    if (!s) continue;
    if (s.get() != this) s->is_root_ = false;
    s->state_ctx_ = state_ctx_;
    s->comm_ = comm_;
    if (s->params_) s->params_->set_comm(comm_);
    state_ctx_->all_states.push_back(s);
  }
  // The root's parameters stay gathered from its forward to its post-backward.
  if (params_) params_->never_reshard_after_forward();
  const Device device = group_.device();
  comm_->copy_in = get_stream_from_pool(device, -1);
  comm_->all_gather = get_stream_from_pool(device, -1);
  comm_->reduce_scatter = get_stream_from_pool(device, -1);
  comm_->all_reduce = get_stream_from_pool(device, 0);
  comm_->initialised = true;
  for (const auto& weak : state_ctx_->all_states)
    if (auto s = weak.lock(); s && s->params_) s->params_->lazy_init();
}

Tensor FSDPState::pre_forward(const Tensor& input) {
  if (training_state_ == TrainingState::pre_backward) return input;
  training_state_ = TrainingState::forward;
  lazy_init();
  if (state_ctx_->iter_forward_root == nullptr) {
    state_ctx_->iter_forward_root = this;
    const Stream current = current_stream(group_.device());
    comm_->copy_in.wait_stream(current);
    comm_->all_gather.wait_stream(current);
  }
  Tensor x = input;
  const auto& param_dtype = options_.mp_policy.param_dtype;
  if (param_dtype && x.defined() && is_floating_point(x.dtype()) && x.dtype() != *param_dtype) x = x.to(*param_dtype);
  if (params_) {
    params_->pre_forward();
    if (x.defined() && grad_mode_enabled() && x.requires_grad()) {
      ParamGroup* group = params_.get();
      x = through_post_backward_node(x, [group] { group->post_backward(); });
    }
  }
  return x;
}

void FSDPState::post_forward(const std::vector<Tensor>& outputs) {
  if (training_state_ == TrainingState::pre_backward) return;
  if (params_) params_->post_forward();
  if (grad_mode_enabled()) {
    std::weak_ptr<FSDPState> self = weak_from_this();
    for (const Tensor& t : outputs)
      if (t.defined() && t.requires_grad())
        (void)t.register_hook([self](const Tensor&) {
          if (auto s = self.lock()) s->pre_backward();
        });
  }
  training_state_ = TrainingState::idle;
  if (state_ctx_->iter_forward_root == this) {
    std::optional<CommContext::AllGatherState> last = std::move(comm_->all_gather_state);
    comm_->all_gather_state.reset();
    if (last) {
      comm_->copy_in.wait_event(last->event);
      comm_->all_gather.wait_event(last->event);
    }
    state_ctx_->iter_forward_root = nullptr;
  }
}

void FSDPState::pre_backward() {
  if (training_state_ == TrainingState::pre_backward) return;
  training_state_ = TrainingState::pre_backward;
  if (!state_ctx_->final_callback_queued) {
    state_ctx_->final_callback_queued = true;
    std::weak_ptr<FSDPState> self = weak_from_this();
    queue_backward_callback([self] {
      if (auto s = self.lock()) s->final_callback();
    });
  }
  if (params_) params_->pre_backward();
}

void FSDPState::final_callback() {
  for (const auto& weak : state_ctx_->all_states) {
    const std::shared_ptr<FSDPState> s = weak.lock();
    if (!s) continue;
    if (s->params_ && s->params_->training_state != TrainingState::post_backward) s->params_->post_backward();
    s->training_state_ = TrainingState::idle;
    if (s->params_) s->params_->training_state = TrainingState::idle;
    if (s->params_) s->params_->finalize_backward();
  }
  comm_->post_forward_order.clear();
  if (comm_->reduce_scatter_state) {
    current_stream(group_.device()).wait_event(comm_->reduce_scatter_state->event);
    comm_->reduce_scatter_state.reset();
  }
  state_ctx_->final_callback_queued = false;
}

namespace {

// _get_post_forward_mesh_info: an int is the world size the parameters keep after forward: 1 is false,
// the group's size true, one between resharding to a group of that many consecutive ranks (the post-forward
// mesh's shard dimension: rank r with ranks r - r % size to r - r % size + size - 1). Returns whether to
// reshard and that size (0 for the whole group).
std::pair<bool, int> reshard_after_forward_of(const std::variant<bool, int>& option, int world) {
  if (const bool* flag = std::get_if<bool>(&option)) return {*flag, 0};
  const int size = std::get<int>(option);
  if (size < 1 || size > world || world % size != 0)
    throw std::invalid_argument(
        "fully_shard: reshard_after_forward as an int is the world size to reshard to after forward, a "
        "factor of the group's " +
        std::to_string(world) + " ranks from 1 to " + std::to_string(world) + ", not " + std::to_string(size));
  if (size == 1) return {false, 0};
  if (size == world) return {true, 0};
  return {true, size};
}

}  // namespace

int64_t fsdp_padded_rows(int64_t rows, int world) { return div_up(rows, world); }

int64_t fsdp_local_rows(int64_t rows, int world, int rank) {
  const int64_t padded = fsdp_padded_rows(rows, world);
  return std::clamp<int64_t>(rows - rank * padded, 0, padded);
}

FSDPModule fully_shard(const std::shared_ptr<nn::Module>& module, ProcessGroup& group, FullyShardOptions options) {
  if (!module) throw std::invalid_argument("fully_shard: the module is null");
  if (state_of(module.get()))
    throw std::invalid_argument("fully_shard: module '" + nn::module_class_name(*module) +
                                "' was already given to fully_shard");
  // Parameters an inner fully_shard already manages belong to that call's group.
  std::vector<const TensorImpl*> managed;
  for (nn::Module* m : module->modules(/*include_self=*/false))
    if (state_of(m))
      for (const Tensor& p : m->parameters()) managed.push_back(&p.impl());
  const int world = group.size(), rank = group.rank();
  const auto [reshard, post_forward_size] = options.reshard_after_forward
                                                ? reshard_after_forward_of(*options.reshard_after_forward, world)
                                                : std::pair<bool, int>{true, 0};
  const std::string module_path = module->name();
  std::vector<FSDPParam> params;
  for (const auto& [name, p] : module->named_parameters()) {
    if (std::find(managed.begin(), managed.end(), &p.impl()) != managed.end()) continue;
    // A model built on meta (a meta device other than the group's) is sharded on meta, materialised later.
    if (p.device() != group.device() && p.device().type != DeviceType::meta)
      throw std::invalid_argument("fully_shard: parameter '" + name + "' is on " + p.device().str() +
                                  ", the process group's device is " + group.device().str() + " (or build it on meta)");
    if (p.dim() == 0)
      throw std::invalid_argument("fully_shard: parameter '" + name +
                                  "' has 0 dimensions; Shard(0) needs at least one");
    FSDPParam fp;
    fp.name = name;
    fp.path = module_path;
    if (!fp.path.empty()) fp.path += '.';
    fp.path += name;
    fp.param = p;
    fp.full_size = p.sizes();
    fp.orig_dtype = p.dtype();
    fp.unsharded_dtype = options.mp_policy.param_dtype.value_or(p.dtype());
    fp.padded_rows = fsdp_padded_rows(p.size(0), world);
    fp.local_rows = fsdp_local_rows(p.size(0), world, rank);
    fp.row_numel = shape_numel(p.sizes()) / std::max<int64_t>(p.size(0), 1);
    params.push_back(std::move(fp));
  }
  // FSDPParam._init_sharded_param, parameter by parameter: a zeroed padded shard, this rank's rows copied in.
  // The full tensors are released after every parameter of the group has its shard (the call's return).
  std::vector<Storage> full;  // the full parameters' data, released when every shard exists
  {
    NoGradGuard no_grad;
    for (FSDPParam& fp : params) {
      Shape padded = fp.full_size;
      padded[0] = fp.padded_rows;
      fp.padded_shard = zeros(padded, TensorOptions{fp.orig_dtype, fp.param.device()});
      if (fp.local_rows > 0)
        fp.padded_shard.narrow(0, 0, fp.local_rows)
            .copy_(fp.param.detach().narrow(0, rank * fp.padded_rows, fp.local_rows));
      full.push_back(fp.param.storage());
      fp.point_handle(fp.padded_shard.storage(), fp.sharded_size(), fp.orig_dtype);
      fp.take_shard_role();
    }
  }
  full.clear();
  std::vector<Tensor> sharded_handles;
  sharded_handles.reserve(params.size());
  for (const FSDPParam& fp : params) sharded_handles.push_back(fp.param);
  std::unique_ptr<ParamGroup> param_group;
  if (!params.empty()) {
    // Each call with an int makes its own post-forward mesh, hence its own groups (as PyTorch's does).
    std::unique_ptr<ProcessGroup> post_forward_group;
    if (post_forward_size > 0) {
      std::vector<std::vector<int>> groups(static_cast<size_t>(world / post_forward_size));
      for (int r = 0; r < world; ++r) groups[static_cast<size_t>(r / post_forward_size)].push_back(r);
      post_forward_group = group.split_group(groups);
    }
    param_group = std::make_unique<ParamGroup>(std::move(params), group, reshard, options.mp_policy,
                                               std::move(post_forward_group));
  }
  auto state = std::make_shared<FSDPState>(module.get(), group, options, std::move(param_group));
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    for (auto it = registry().begin(); it != registry().end();) it = it->second.expired() ? registry().erase(it) : ++it;
    registry()[module.get()] = state;
  }
  {
    static std::once_flag observer_installed;
    std::call_once(observer_installed, [] {
      nn::init::set_random_fill_observer(&on_sharded_random_fill);
      nn::utils::set_sharded_norm_lookup(&sharded_norm_reducer);
    });
    std::lock_guard<std::mutex> lock(sharded_mutex);
    for (auto it = sharded_groups().begin(); it != sharded_groups().end();)
      it = it->second.expired() ? sharded_groups().erase(it) : ++it;
    for (auto it = sharded_params().begin(); it != sharded_params().end();)
      it = it->second.expired() ? sharded_params().erase(it) : ++it;
    state->sharded = sharded_groups()[&group].lock();
    if (!state->sharded) {
      state->sharded = std::make_shared<ShardedGroup>(ShardedGroup{&group, group.device()});
      sharded_groups()[&group] = state->sharded;
    }
    for (const Tensor& p : sharded_handles) sharded_params()[&p.impl()] = state->sharded;
  }
  module->add_apply_hooks([state](nn::Module&) { state->before_apply(); },
                          [state](nn::Module&) { state->after_apply(); });
  module->register_forward_pre_hook([state](nn::Module&, const Tensor& input) { return state->pre_forward(input); });
  module->register_forward_hook(
      [state](nn::Module&, const Tensor&, const Tensor& output) { state->post_forward({output}); });
  return FSDPModule(state);
}

bool FSDPModule::is_root() const { return state_->is_root(); }
void FSDPModule::reshard() { state_->reshard(); }
void FSDPModule::pre_forward(const Tensor& input) { state_->pre_forward(input); }
void FSDPModule::post_forward(const std::vector<Tensor>& outputs) { state_->post_forward(outputs); }

}  // namespace bytegrad::distributed
