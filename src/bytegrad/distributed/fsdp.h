// FSDP2 (torch.distributed.fsdp.fully_shard) for bytegrad modules, with PyTorch 2.11's allocations and
// streams (shared/reference/pytorch-distributed-memory.md section 3, corrected by the two-GPU recordings in
// tests/data/pytorch_probes/fsdp_n2). Applied as PyTorch's examples apply it: to each block, then the root.
//
//   for (auto& layer : {model->fc1, model->fc2, model->fc3}) distributed::fully_shard(layer, pg);
//   auto root = distributed::fully_shard(model, pg);
//   optim::Adam opt(model->parameters(), {...});   // the parameters are now this rank's shards
//   Tensor loss = cross_entropy((*model)(x), y);    // Module::operator() runs FSDP's hooks
//   loss.backward();                                // gradients reduce-scattered into sharded .grad
//
// What it allocates, in order:
//  - fully_shard: each parameter of the module (not already managed by an inner call) becomes a padded
//    shard: ceil(d0 / W) rows on every rank (new_zeros, this rank's rows copied in), the parameter seeing
//    only this rank's real rows (fewer, maybe none, on the last ranks). The full parameters are freed when
//    the call returns. No broadcast.
//  - the first forward (lazy init): the outermost module run becomes the root; three side streams come from
//    the pool at priority -1 (all-gather copy-in, all-gather, reduce-scatter) and one at 0 (all-reduce,
//    unused without HSDP). A rank whose shard is shorter than the padded size re-pads it here.
//  - each group's pre-forward (unshard): on the copy-in stream one flat output of W x the group's padded
//    shard elements (with param_dtype, a cast copy of the shards first, freed at the end); all-gather into
//    it on the all-gather stream; copy-out on the default stream into one padded unsharded tensor per
//    parameter (allocated the first time, its storage re-allocated in place afterwards) through
//    split_with_sizes_copy's packed metadata (a small int64 buffer, freed at once). In forward the flat is
//    kept until the next group's copy-out (the root's post-forward for the last); in backward it goes at once.
//  - post-forward: reshard (the unsharded storage resized to 0) unless reshard_after_forward is false or the
//    group is the root's (kept until its post-backward). With an int k: first a clone of this rank's 1/k of
//    each unsharded parameter (default stream), which backward's all-gather from the k ranks takes as its
//    input and which is freed as the parameter becomes unsharded again.
//  - pre-backward (a hook on the module's outputs): unshard, then prefetch the group that ran before it.
//  - post-backward (after the module's inputs got their gradients, or at the end of backward): reshard,
//    free the previous group's reduce-scatter input, allocate this one's on the default stream (padded,
//    reduce_dtype), chunk_cat's packed metadata, free the unsharded gradients (the last one when the
//    reduction returns), the reduce-scatter output on its stream; each sharded .grad is a view of that
//    output, which lives until the optimizer's zero_grad drops every view.
//  Streams: the default stream waits for a group's all-gather just before its copy-out, for the previous
//  reduce-scatter before the next one's input is written, and for every group's reduction only when
//  backward ends; nothing waits on the host, so the collectives overlap the compute on either side of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "bytegrad/distributed/process_group.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/nn/module.h"

namespace bytegrad::distributed {

// torch.distributed.fsdp.MixedPrecisionPolicy: unset fields keep the parameters' dtype.
struct MixedPrecisionPolicy {
  std::optional<ScalarType> param_dtype;   // of the all-gathered parameters, their gradients and the flat
  std::optional<ScalarType> reduce_dtype;  // of the reduce-scatter (default: param_dtype)
};

struct FullyShardOptions {
  // unset: PyTorch 2.11's None, reshard after forward except for the root (kept until its post-backward).
  // An int is the world size to reshard to after forward, a factor of the group's size: 1 is false (each
  // rank keeps the whole parameters, as PyTorch reads it), the group's size is true; k between reshards to
  // the group of k consecutive ranks (PyTorch's post-forward mesh, made per fully_shard call with
  // ProcessGroup::split_group): each rank keeps 1/k of each unsharded parameter after forward, and backward
  // all-gathers from those k ranks. Other values are refused.
  std::optional<std::variant<bool, int>> reshard_after_forward;
  MixedPrecisionPolicy mp_policy;
};

class FSDPState;

// The handle fully_shard returns (PyTorch's FSDPModule methods).
class FSDPModule {
 public:
  explicit FSDPModule(std::shared_ptr<FSDPState> state) : state_(std::move(state)) {}
  // A forward other than Module::operator()(Tensor) (nanoGPT's forward(x, y)) between this module's pre-
  // and post-forward: root.forward([&] { return gpt->forward(x, y); }). Returns a Tensor or nn::GPT::Output.
  template <typename Call>
  std::invoke_result_t<Call&> forward(Call&& call) {
    pre_forward(Tensor());
    auto output = call();
    post_forward(outputs_of(output));
    return output;
  }
  bool is_root() const;
  // The group's parameters now gathered (unsharded) or sharded (FSDPModule.unshard / reshard).
  void reshard();

 private:
  static std::vector<Tensor> outputs_of(const Tensor& t) { return {t}; }
  static std::vector<Tensor> outputs_of(const nn::GPT::Output& o) { return {o.logits, o.loss}; }
  void pre_forward(const Tensor& input);
  void post_forward(const std::vector<Tensor>& outputs);
  std::shared_ptr<FSDPState> state_;
};

// Shards `module`'s parameters (those no inner fully_shard call took) over `group` as one FSDPParamGroup
// and installs FSDP's hooks. Throws std::invalid_argument when a parameter is not on group.device(), is
// 0-dimensional (Shard(0) needs a dimension), or the module was already given to fully_shard.
FSDPModule fully_shard(const std::shared_ptr<nn::Module>& module, ProcessGroup& group, FullyShardOptions options = {});

// The rows a parameter of `rows` first-dimension rows keeps on `rank` of `world` under Shard(0) (torch.chunk:
// ceil(rows / world) per rank, the last ranks fewer or none), and the padded rows every rank allocates.
int64_t fsdp_padded_rows(int64_t rows, int world);
int64_t fsdp_local_rows(int64_t rows, int world, int rank);

}  // namespace bytegrad::distributed
