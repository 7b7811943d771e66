// The autograd graph: a Node per differentiable op, holding what its derivative needs (saved tensors) and
// edges to the nodes of its inputs. Backward runs nodes in PyTorch's engine order (engine.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bytegrad/autograd/saved_variable.h"
#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

class Node;
using TensorList = std::vector<Tensor>;

// One tensor's gradient hooks (Tensor::register_hook), in registration order, each under the id its handle
// removes. Shared by the tensor's metadata and the node whose input the tensor's gradient is.
struct GradientHooks {
  std::vector<std::pair<uint64_t, GradientHook>> hooks;
  uint64_t next_id = 0;
  // Runs every hook on `grad` (when defined), each defined result replacing it.
  void run(Tensor& grad) const;
};

// Where a gradient goes: input `input_nr` of `function` (null when that input needs no gradient).
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  bool valid() const { return function != nullptr; }
};

// Shape, dtype and device of a gradient a node expects (a forward output), so the engine can reduce a
// broadcast gradient to it (PyTorch's validate_outputs / sum_to).
struct GradientMetadata {
  Shape sizes;
  ScalarType dtype = ScalarType::float32;
  Device device;
};

// One saved tensor as the visibility API (saved_tensors(), saved_tensors.h) reports it.
struct SavedTensorReport {
  std::string node;    // e.g. "AddmmBackward0"
  std::string module;  // the module whose call made the node, e.g. "fc1" ("" outside any; module_scope.h)
  std::string name;    // which operand, e.g. "mat1"
  Shape sizes;
  ScalarType dtype = ScalarType::float32;
  Device device;
  size_t bytes = 0;             // numel * element size of the saved view
  size_t block_bytes = 0;       // the allocator's block behind its storage (rounded, as memory_allocated counts)
  size_t charged_bytes = 0;     // block_bytes for the first entry naming a storage, 0 for later ones
  bool shares_storage = false;  // the storage is also held by something else (a parameter, a live tensor,
                                // another saved tensor)
  bool graph_only = false;      // nothing but this graph's saved tensors holds the storage: the graph's
                                // release (backward, or dropping the output) frees it
  bool released = false;
  bool packed = false;  // kept by saved-tensor hooks (saved_tensor_hooks.h): what they keep is theirs to say
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  // Gradients of the forward outputs in, gradients of the forward inputs out (one per next edge; an
  // undefined tensor where an input needs none).
  virtual TensorList apply(TensorList&& grads) = 0;
  // Drops saved tensors (after the node ran, unless the graph is retained).
  virtual void release_variables() {}
  // Where this node's backward only casts its one incoming gradient to a dtype (ToCopyBackward0 of a dtype
  // conversion), that dtype: the engine may then let the node before it hand it a gradient only the cast
  // reads (tensor/gradient_reader.h).
  virtual std::optional<ScalarType> only_casts_gradient_to() const { return std::nullopt; }
  // Deferred gradients (tensor/gradient_reader.h): whether this node's backward is one op that can hand its
  // gradient on unwritten (masked_fill's, the cast's), and whether it is one op that can write its output
  // from a deferred gradient (masked_fill's, a mul by a number's, softmax's).
  virtual bool can_defer_gradient() const { return false; }
  virtual bool takes_deferred_gradient() const { return false; }
  // (operand name, saved variable) pairs, for saved_tensors().
  virtual std::vector<std::pair<std::string, const SavedVariable*>> saved_variables() const { return {}; }

  // Later nodes run first among those ready; AccumulateGrad nodes use the maximum, so they run at once.
  uint64_t sequence_nr() const { return sequence_nr_; }
  // The module whose call made this node ("fc1"; module_scope.h), "" when none did.
  const std::string& module() const;
  std::vector<Edge> next_edges;
  std::vector<GradientMetadata> input_metadata;  // one per gradient this node receives
  // Gradient hooks of the tensors this node made (by output number), run on the incoming gradients before
  // apply, as PyTorch's tensor pre-hooks.
  std::vector<std::pair<uint32_t, std::shared_ptr<GradientHooks>>> tensor_pre_hooks;
  void run_tensor_pre_hooks(TensorList& grads) const;

 protected:
  explicit Node(uint64_t sequence_nr);
  // Unpacks a saved tensor, checking it was neither released nor modified in place since.
  Tensor unpack(const SavedVariable& saved) const { return saved.unpack(name()); }

 private:
  std::shared_ptr<const std::string> module_;
  uint64_t sequence_nr_;
};

}  // namespace bytegrad
