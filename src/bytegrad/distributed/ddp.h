// DistributedDataParallel: torch.nn.parallel.DistributedDataParallel for bytegrad modules, with PyTorch
// 2.11's memory behaviour rule for rule (shared/reference/pytorch-distributed-memory.md §1, probed on two
// H100s by tools/probes/ddp_probe.py). One object per rank, over that rank's ProcessGroup.
//
//   auto model = std::make_shared<MLP>(...);  model->to(pg.device());
//   distributed::DistributedDataParallel ddp(model, pg);         // checks and broadcasts rank 0's state
//   optim::Adam opt(ddp.parameters(), {.lr = 1e-3, .foreach = true});
//   auto loss = cross_entropy(ddp(x), y);
//   loss.backward();                                              // gradients all-reduced and averaged
//   opt.step();
//
// What it allocates, in order (docs/distributed.md tells the story with GPT-2 small's figures):
//  - construction: the parameter check's small tensors (freed), the broadcast of parameters and buffers
//    in flat buckets of >= 250 MiB, two in flight (freed, their segments stay cached), then the reducer's
//    gradient buckets: one flat for every parameter of a dtype until the buckets are rebuilt
//    (find_unused_parameters: buckets of 1 MiB then bucket_cap_mb from the start, never rebuilt);
//  - every backward: each gradient is divided by the world size while copied into its bucket (no
//    allocation); a full bucket is all-reduced on the group's stream; at the end the results are copied
//    back into .grad (or, with gradient_as_bucket_view, .grad is the bucket's view and the gradient
//    autograd made is freed);
//  - the second forward (the third with static_graph): the buckets are rebuilt in the order gradients
//    became ready (1 MiB first, then bucket_cap_mb), rank 0's assignment broadcast; the old flats go, but
//    an all-reduce not waited for keeps its bucket until the group notices it completed (process_group.h):
//    in PyTorch that is the NCCL watchdog's timing, so that release moves between runs;
//  - every forward with buffers (broadcast_buffers): rank 0's buffers broadcast through a flat bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "bytegrad/distributed/process_group.h"
#include "bytegrad/nn/gpt.h"
#include "bytegrad/nn/module.h"

namespace bytegrad::distributed {

// DistributedDataParallel's keyword arguments, with PyTorch's defaults.
struct DDPOptions {
  double bucket_cap_mb = 25;  // PyTorch's default; a default cap also makes the first rebuilt bucket 1 MiB
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  bool init_sync = true;  // check parameters across ranks and broadcast rank 0's state at construction
};

class Reducer;

class DistributedDataParallel {
 public:
  // The module's parameters and buffers must be on group.device(). Throws std::invalid_argument when they
  // are not or no parameter requires grad, and CollectiveError (on every rank) when the ranks' parameters
  // differ in count or shape.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() const { return *module_; }
  std::vector<Tensor> parameters() const { return module_->parameters(); }
  ProcessGroup& process_group() const { return group_; }
  const DDPOptions& options() const { return options_; }

  // ddp(x): the module's forward (Module::operator()) between DDP's pre- and post-forward.
  Tensor operator()(const Tensor& input) {
    return forward([&] { return (*module_)(input); });
  }
  // Any other forward: ddp.forward([&] { return gpt->forward(x, y); }). The result may be a Tensor, a
  // std::vector, pair or tuple of Tensors, or nn::GPT::Output.
  template <typename Call>
  std::invoke_result_t<Call&> forward(Call&& call) {
    pre_forward();
    auto output = call();
    std::vector<Tensor*> tensors;
    collect_outputs(output, tensors);
    post_forward(tensors);
    return output;
  }

  // While the guard lives, backward accumulates into .grad without communicating (DDP.no_sync()).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // The buckets now: each one's parameter indices (in parameters() order) and its flat's bytes.
  std::vector<std::vector<size_t>> bucket_indices() const;
  std::vector<size_t> bucket_bytes() const;
  bool buckets_rebuilt() const;

 private:
  void pre_forward();
  void post_forward(const std::vector<Tensor*>& outputs);
  void sync_buffers();

  static void collect_outputs(Tensor& t, std::vector<Tensor*>& out) { out.push_back(&t); }
  static void collect_outputs(std::vector<Tensor>& ts, std::vector<Tensor*>& out) {
    for (Tensor& t : ts) out.push_back(&t);
  }
  static void collect_outputs(nn::GPT::Output& o, std::vector<Tensor*>& out) {
    out.push_back(&o.logits);
    out.push_back(&o.loss);
  }
  template <typename A, typename B>
  static void collect_outputs(std::pair<A, B>& p, std::vector<Tensor*>& out) {
    collect_outputs(p.first, out);
    collect_outputs(p.second, out);
  }
  template <typename... Ts>
  static void collect_outputs(std::tuple<Ts...>& t, std::vector<Tensor*>& out) {
    std::apply([&](auto&... items) { (collect_outputs(items, out), ...); }, t);
  }

  std::shared_ptr<nn::Module> module_;
  ProcessGroup& group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool require_backward_grad_sync_ = true;
  bool require_forward_param_sync_ = true;
  bool static_graph_delay_allreduce_enqueued_ = false;
};

// The bucket assignment DDP and broadcast_coalesced use (PyTorch's compute_bucket_assignment_by_size):
// tensors, taken in the given order, fill one bucket per dtype until its bytes reach the current limit;
// the limits are used in turn, the last one repeating. Without `order`, buckets are sorted by their lowest
// index; with it (indices of the tensors, in gradient-ready order) they stay in the order they closed.
std::vector<std::vector<size_t>> compute_bucket_assignment_by_size(const std::vector<Tensor>& tensors,
                                                                   const std::vector<size_t>& limits,
                                                                   const std::vector<size_t>& order = {});

// Broadcasts `tensors` from rank `src` through flat buckets of about `bucket_bytes` (each bucket of more than
// one tensor is copied into one flat allocation, at most two in flight), as torch's _broadcast_coalesced.
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, size_t bucket_bytes, int src);

}  // namespace bytegrad::distributed
