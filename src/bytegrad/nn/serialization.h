// Saving and loading a module's state as a safetensors file, as Python's safetensors.torch.save_model and
// load_model do (the file format: tensor/safetensors.h). libtorch's torch::save / torch::load write
// TorchScript archives; bytegrad writes safetensors instead, which PyTorch reads with
// safetensors.torch.load_file and Hugging Face's tools read as they are.
#pragma once

#include <string>

#include "bytegrad/nn/module.h"
#include "bytegrad/tensor/safetensors.h"

namespace bytegrad::nn {

// Writes module.state_dict(). A file holds each storage once, so of the names sharing one tensor (tied
// weights: GPT's lm_head.weight and transformer.wte.weight) only the first in sorted order among those
// covering the whole storage is written, and the metadata maps each dropped name to the kept one
// ({"transformer.wte.weight": "lm_head.weight"}) unless `metadata` already has that key. Tensors sharing
// storage without one covering it all are refused (std::invalid_argument), as save_model refuses them.
void save_model(const Module& module, const std::string& path, safetensors::Metadata metadata = {});

// Reads the file onto the host and copies it into the module with load_state_dict: the module's device
// gets nothing beyond the tensors it already has. A name dropped at saving because it shared its tensor
// with a kept one is not missing (the kept one filled it). With strict, any missing or unexpected key is
// a std::runtime_error (listing them, sorted) before anything is written; without, they are returned.
// The file's errors are safetensors::Error; shape mismatches are load_state_dict's error in either mode.
IncompatibleKeys load_model(Module& module, const std::string& path, bool strict = true);

}  // namespace bytegrad::nn
