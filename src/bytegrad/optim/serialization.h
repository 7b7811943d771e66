// An optimizer's state_dict in a safetensors file (the format of tensor/safetensors.h), beside the model's
// own file (nn::save_model): each state tensor under "state.<index>.<key>" ("state.0.exp_avg"), and the
// rest as JSON in the header's metadata: "param_groups" (each group's options with its "params" indices,
// as PyTorch's state_dict()["param_groups"]) and "state" (every parameter with state, by index, with its
// non-tensor entries: {"0": {"step": 3}, ...}). PyTorch's torch.save would pickle the same dict.
//
//   nn::save_model(model, "ckpt.model.safetensors");
//   optim::save(optimizer, "ckpt.optim.safetensors", {{"epoch", "3"}});
//   ...
//   nn::load_model(model, "ckpt.model.safetensors");
//   safetensors::Metadata extra = optim::load(optimizer, "ckpt.optim.safetensors");  // {"epoch": "3"}
#pragma once

#include <string>

#include "bytegrad/optim/optimizer.h"
#include "bytegrad/tensor/safetensors.h"

namespace bytegrad::optim {

// Writes optimizer.state_dict() to `path` (atomically, as safetensors::save_file). `metadata` is stored
// beside it (the caller's own: an epoch, a scheduler's state); its keys "param_groups" and "state" are
// the optimizer's and are refused (std::invalid_argument).
void save(const Optimizer& optimizer, const std::string& path, safetensors::Metadata metadata = {});

// Reads the file and loads it with optimizer.load_state_dict. The tensors are read straight onto the
// parameters' device when they all share one (so each state tensor is one new block there, which the
// optimizer then holds: nothing else is allocated on the device), else onto the host and cast from there.
// Returns the caller's metadata (the file's, less the optimizer's two keys). A file that is not an
// optimizer's (no "param_groups"), a tensor name outside "state.<index>.<key>", or a tensor for an index
// the "state" entry does not list is refused (safetensors::Error naming the file); the state dict's own
// errors are load_state_dict's. The optimizer is unchanged by any error.
safetensors::Metadata load(Optimizer& optimizer, const std::string& path);

// The same conversions without a file: a state_dict as (tensors, metadata) and back.
struct FlatStateDict {
  TensorDict tensors;
  safetensors::Metadata metadata;
};
FlatStateDict flatten(const OptimizerStateDict& state_dict);
// `where` names the source in errors (a path).
OptimizerStateDict unflatten(const TensorDict& tensors, const safetensors::Metadata& metadata,
                             const std::string& where);

}  // namespace bytegrad::optim
