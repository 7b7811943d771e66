// The engine, following PyTorch's Engine::execute for one device and no re-entrancy:
//  - dependencies are counted over every edge reachable from the root;
//  - ready nodes run highest sequence number first (later-created first; AccumulateGrad at once);
//  - a node's incoming gradients stay alive until its outputs were checked against the next nodes'
//    expected shapes, dtypes and devices (PyTorch's validate_outputs, output by output, validate_gradient.h:
//    a broadcast gradient is summed down, then one of another dtype is converted, each a new allocation),
//    then are dropped;
//  - then its saved tensors are released (unless retain_graph), then its outputs are handed on,
//    accumulating into the next node's buffer when several paths meet.
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/kernels/kernel_profile.h"
#include "bytegrad/memory/memory_category.h"
#include "bytegrad/autograd/engine.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/autograd/validate_gradient.h"
#include "bytegrad/core/recycling_allocator.h"
#include "bytegrad/memory/allocation_context.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/ops_support.h"
#include "bytegrad/tensor/blas_workspace.h"
#include "bytegrad/tensor/gradient_reader.h"
#include "bytegrad/tensor/pending_scores.h"

namespace bytegrad {

namespace {

// PyTorch's can_accumulate_inplace: nothing else references `t` or its storage, and it is
// non-overlapping and dense (an expanded gradient is not). A view never qualifies: PyTorch's view keeps its
// base alive, a second reference to the storage (GPT-2's tied weight: lm_head's gradient arrives as
// TBackward0's transposed view, so the embedding's gradient is added out of place, a third vocab x C block).
bool can_accumulate_in_place(const Tensor& t) {
  return !t.impl().is_view && t.use_count() == 1 && t.storage().use_count() == 1 &&
         ops_detail::is_non_overlapping_and_dense(t);
}

// PyTorch's InputBuffer::accumulate (dense gradients, grad mode off): keeps the first gradient; adds a later
// one in place into the buffered gradient when it is exclusively ours, else out of place (old + new, a new
// block). PyTorch never adds into the incoming gradient instead (it does so only when the buffered one is
// sparse): e.g. x.sum()'s expanded gradient buffered first, then a 16 MiB dense one from another path,
// costs a third 16 MiB block (x_mean_sum_reductions' backward, whose inactive_split shows where it lands).
void accumulate(TensorList& buffer, size_t pos, Tensor&& grad) {
  if (!grad.defined()) return;
  Tensor& slot = buffer[pos];
  if (!slot.defined()) {
    slot = std::move(grad);
  } else if (can_accumulate_in_place(slot) && slot.sizes() == grad.sizes()) {
    slot.add_(grad);
  } else {
    slot = slot + grad;
  }
}

struct ReadyTask {
  std::shared_ptr<Node> node;
  TensorList inputs;
};

struct LaterFirst {
  bool operator()(const ReadyTask& a, const ReadyTask& b) const {
    return a.node->sequence_nr() < b.node->sequence_nr();
  }
};

// A backward's maps keyed by node, their hash nodes recycled (core/recycling_allocator.h) rather than taken
// from malloc one per graph node; their order is the hash's and the insertions', as before.
template <typename Value>
using NodeMap = std::unordered_map<Node*, Value, std::hash<Node*>, std::equal_to<Node*>,
                                   RecyclingAllocator<std::pair<Node* const, Value>>>;

NodeMap<int> count_dependencies(Node* root) {
  // A node is seen once it has a count (one hash node per graph node, not two); the root has none.
  NodeMap<int> dependencies;
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges) {
      if (!edge.valid()) continue;
      auto [count, first_seen] = dependencies.try_emplace(edge.function.get(), 0);
      ++count->second;
      if (first_seen && edge.function.get() != root) stack.push_back(edge.function.get());
    }
  }
  return dependencies;
}

// The offer of tensor/gradient_reader.h for `node`'s apply: the gradient it returns first goes to one node
// alone (no other edge leads there, and no gradient is buffered for it yet), which only casts it or takes
// a deferred gradient from this node, has no hooks, and runs right after it (no ready node comes first).
// The gradient must then arrive as that node expects it (its dtype and shape), so that validate_gradient
// passes it on untouched.
std::optional<SoleReader> sole_reader(const Node& node, const NodeMap<int>& dependencies,
                                      const NodeMap<TensorList>& not_ready, const std::vector<ReadyTask>& ready) {
  if (node.next_edges.empty() || !node.next_edges[0].valid()) return std::nullopt;
  const Edge& edge = node.next_edges[0];
  Node* next = edge.function.get();
  const std::optional<ScalarType> cast = next->only_casts_gradient_to();
  const bool takes_deferred = node.can_defer_gradient() && next->takes_deferred_gradient();
  if ((!cast && !takes_deferred) || !next->tensor_pre_hooks.empty()) return std::nullopt;
  const auto it = dependencies.find(next);
  if (it == dependencies.end() || it->second != 1 || not_ready.contains(next)) return std::nullopt;
  if (!ready.empty() && ready.front().node->sequence_nr() >= next->sequence_nr()) return std::nullopt;
  const GradientMetadata& expected = next->input_metadata.at(edge.input_nr);
  return SoleReader{
      .cast_to = cast, .takes_deferred = takes_deferred, .dtype = expected.dtype, .sizes = expected.sizes};
}

// The running backward's state (backward_pass_state); one per thread, as backward does not nest.
thread_local std::unordered_map<const void*, std::shared_ptr<void>>* running_backward_state = nullptr;
// Its final callbacks (queue_backward_callback).
thread_local std::vector<std::function<void()>>* running_backward_callbacks = nullptr;

void execute(const Edge& root, Tensor root_grad, bool retain_graph) {
  // Scores the forward left pending (tensor/pending_scores.h) are written before any backward kernel runs:
  // this thread's, and any on the gradient's device (a forward run by another thread).
  write_out_own_pending_scores();
  if (root_grad.defined()) write_out_pending_scores(root_grad.device());
  std::unordered_map<const void*, std::shared_ptr<void>> state;  // dropped last, however this ends
  struct StateScope {
    std::unordered_map<const void*, std::shared_ptr<void>>* previous;
    ~StateScope() { running_backward_state = previous; }
  } state_scope{std::exchange(running_backward_state, &state)};
  std::vector<std::function<void()>> callbacks;
  struct CallbacksScope {
    std::vector<std::function<void()>>* previous;
    ~CallbacksScope() { running_backward_callbacks = previous; }
  } callbacks_scope{std::exchange(running_backward_callbacks, &callbacks)};
  auto dependencies = count_dependencies(root.function.get());
  NodeMap<TensorList> not_ready;
  std::vector<ReadyTask> ready;  // a max-heap by sequence number
  auto push_ready = [&](ReadyTask task) {
    ready.push_back(std::move(task));
    std::push_heap(ready.begin(), ready.end(), LaterFirst());
  };
  {
    TensorList buffer(root.function->input_metadata.size());
    accumulate(buffer, root.input_nr, std::move(root_grad));
    push_ready({root.function, std::move(buffer)});
  }
  // A gradient handed on as packed rows (gradient_reader.h) goes to this node, which must take them.
  const Node* packed_rows_reader = nullptr;
  struct PackedRowsScope {
    ~PackedRowsScope() { forget_packed_gradient(); }  // none outlives the backward, however it ends
  } packed_rows_scope;
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), LaterFirst());
    ReadyTask task = std::move(ready.back());
    ready.pop_back();
    Node& node = *task.node;
    if (packed_rows_reader != nullptr && packed_rows_reader != &node)
      throw std::logic_error("autograd engine: a gradient handed on packed went to " + node.name() +
                             ", not to the reader it was made for");
    const StorageImpl* handed_to_this = packed_gradient_storage();
    TensorList outputs;
    {
      TensorList inputs = std::move(task.inputs);
      const std::string node_name = node.name();
      AllocationScope scope(node_name);
      KernelProfileLabel profile_label(node_name);  // BYTEGRAD_PROFILE_KERNELS: the node's kernel time
      node.run_tensor_pre_hooks(inputs);
      {
        SoleReaderScope offer(sole_reader(node, dependencies, not_ready, ready));
        outputs = node.apply(std::move(inputs));
      }
      const StorageImpl* handed_on = packed_gradient_storage();
      if (handed_to_this != nullptr && handed_on == handed_to_this)
        throw std::logic_error("autograd engine: " + node_name + " did not read the packed gradient it was handed");
      if (handed_on != nullptr && (outputs.empty() || !outputs[0].defined() || outputs[0].storage().get() != handed_on))
        throw std::logic_error("autograd engine: " + node_name +
                               " handed on packed a gradient it did not return first");
      packed_rows_reader = handed_on != nullptr ? node.next_edges.at(0).function.get() : nullptr;
      if (outputs.size() < node.next_edges.size()) outputs.resize(node.next_edges.size());
      for (size_t i = 0; i < node.next_edges.size(); ++i) {
        const Edge& edge = node.next_edges[i];
        if (!edge.valid() || !outputs[i].defined()) continue;
        // validate_outputs: a broadcast gradient summed down, another dtype converted, another device refused.
        outputs[i] = validate_gradient(std::move(outputs[i]), edge.function->input_metadata.at(edge.input_nr),
                                       {GradientEntry::node_output, i, node_name});
      }
    }  // the incoming gradients are dropped here
    if (!retain_graph) node.release_variables();
    for (size_t i = 0; i < node.next_edges.size(); ++i) {
      const Edge& edge = node.next_edges[i];
      if (!edge.valid()) continue;
      Node* next = edge.function.get();
      const bool is_ready = --dependencies[next] == 0;
      auto it = not_ready.find(next);
      if (it == not_ready.end()) {
        TensorList buffer(next->input_metadata.size());
        accumulate(buffer, edge.input_nr, std::move(outputs[i]));
        if (is_ready) push_ready({edge.function, std::move(buffer)});
        else not_ready.emplace(next, std::move(buffer));
      } else {
        accumulate(it->second, edge.input_nr, std::move(outputs[i]));
        if (is_ready) {
          push_ready({edge.function, std::move(it->second)});
          not_ready.erase(it);
        }
      }
    }
  }
  // GraphTask::exec_post_processing: the final callbacks, after every node (indexed: one may queue more).
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto callback = std::move(callbacks[i]);
    callback();
  }
}

}  // namespace

std::shared_ptr<void>* backward_pass_state(const void* key) {
  return running_backward_state ? &(*running_backward_state)[key] : nullptr;
}

void queue_backward_callback(std::function<void()> callback) {
  if (running_backward_callbacks == nullptr)
    throw std::logic_error("queue_backward_callback: no backward is running on this thread");
  running_backward_callbacks->push_back(std::move(callback));
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph) {
  if (roots.size() != 1) throw std::invalid_argument("backward: exactly one root tensor is supported");
  const Tensor& root = roots[0];
  Edge edge = gradient_edge(root);
  if (!edge.valid())
    throw std::runtime_error("element 0 of tensors does not require grad and does not have a grad_fn (" +
                             describe(root) + ")");
  // Gradients made from here on are in flight until they become a .grad (memory_category.h); whatever of
  // them outlives backward without becoming one (a .grad replaced and kept by the user) is `other` after.
  struct SettleTemporaries {
    Device device;
    ~SettleTemporaries() {
      if (device.uses_caching_allocator())
        caching_allocator(device).rebirth_blocks(MemoryCategory::autograd_temporary, MemoryCategory::other);
    }
  } settle{root.device()};
  CategoryScope temporaries(MemoryCategory::autograd_temporary);
  PhaseScope phase(MemoryPhase::backward);
  NoGradGuard no_grad;  // gradients of gradients are not recorded (create_graph=false)
  Tensor grad;
  if (!root_grads.empty() && root_grads[0].defined()) {
    // _make_grads and validate_outputs on the root edge: the root's shape; another dtype converted, a 0-d
    // gradient on another device moved (either held until backward returns, as PyTorch's engine holds its
    // converted inputs).
    grad = validate_gradient(root_grads[0], gradient_metadata_of(root), {GradientEntry::root, 0, {}});
  } else {
    if (root.numel() != 1)
      throw std::runtime_error("grad can be implicitly created only for scalar outputs (got " + describe(root) + ")");
    AllocationScope scope("backward root gradient");
    grad = ones_like(root);  // held until backward returns, as PyTorch's Python-side tuple holds it
  }
  // PyTorch hands a GPU graph to its autograd device thread, whose cuBLAS handle has its own workspaces.
  const bool device_thread = autograd_multithreading_enabled() && root.device().type != DeviceType::cpu;
  BlasHandleOwnerScope handle_owner(device_thread ? BlasHandleOwner::autograd_device_thread
                                                  : BlasHandleOwner::calling_thread);
  execute(edge, grad, retain_graph);
}

}  // namespace bytegrad
