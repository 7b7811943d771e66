// Backward: runs the graph behind `roots` in PyTorch's engine order and accumulates into leaves' .grad.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "bytegrad/autograd/node.h"
#include "bytegrad/autograd/saved_tensors.h"  // saved_tensors(root): what each node keeps

namespace bytegrad {

// Each root's gradient defaults to ones_like(root) (roots must then have one element). Without
// retain_graph, each node's saved tensors are released right after it runs.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads, bool retain_graph);

// State that lives exactly as long as one backward pass (PyTorch keys such state by graph task, e.g.
// checkpointing's recomputed tensors): the slot for `key` in the backward running on this thread, empty
// until filled, dropped when that backward returns or throws; null outside backward.
std::shared_ptr<void>* backward_pass_state(const void* key);

// Runs `callback` once the backward running on this thread has run its last node, before it returns
// (PyTorch's Variable._execution_engine.queue_callback: DDP finishes its gradients this way). Callbacks run
// in the order queued, including ones queued by a callback. Throws std::logic_error outside backward.
void queue_backward_callback(std::function<void()> callback);

}  // namespace bytegrad
