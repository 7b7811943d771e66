#include "programs/mark_notes.h"

#include <map>
#include <utility>

namespace bytegrad::programs {

namespace {

using Key = std::pair<std::string, std::string>;

// seed000's notes hold for all four variants (hidden 1024 or 2048, torch.sum or builtin sum).
const std::map<std::string, std::string>& seed000_notes() {
  static const std::map<std::string, std::string> notes = {
      {"linear1",
       "linear1.weight (hidden x 1024 fp32): a 1-10 MiB request gets a 20 MiB segment, the rest stays cached"},
      {"linear2", "linear2.weight (1 x hidden fp32) is small (<= 1 MiB): it comes from a new 2 MiB small-pool segment"},
      {"inputs", "inputs (1024 x 1024 fp32 = 4 MiB), built on the host and copied, is carved from linear1's segment"},
      {"forward1",
       "linear1's output h stays alive: linear2's backward saved it to compute linear2's weight gradient; "
       "linear2's output is gone (sum saves nothing), only the loss remains"},
      {"backward1",
       "backward released h after linear2's node ran; the two weight gradients (one weight's size each) "
       "stay as .grad, which had none, so they were kept without a copy"},
      {"forward2", "a second graph: a new h and loss exist before the old loss is released (assignment order)"},
      {"backward2", "h released again; the new gradients were added into the existing .grad in place, then freed"},
      {"loop_end", "steady state: each iteration frees everything it allocates; peaks do not grow"},
  };
  return notes;
}

const std::map<Key, std::string>& notes() {
  static const std::map<Key, std::string> table = {
      {{"seed001_mlp_estimate", "model"}, "the parameters: (784*1024 + 1024 + 1024*1024 + 1024 + 1024*10 + 10) fp32"},
      {{"seed001_mlp_estimate", "data"}, "x (256 x 784 fp32) and y (256 int64)"},
      {{"seed001_mlp_estimate", "forward"},
       "kept for backward: each ReLU's output (saved by the ReLU and, the same storage, by the next Linear) and the "
       "logits; the Linears' raw outputs were freed once ReLU had read them"},
      {{"seed001_mlp_estimate", "loss"},
       "log_softmax's output (saved by it and by nll_loss), the loss and nll_loss's total_weight"},
      {{"seed001_mlp_estimate", "backward"},
       "activations released as each node ran; one gradient per parameter remains (as large as the parameters)"},
      {{"seed001_mlp_estimate", "del_out_loss"}, "the logits and the loss go; the graph was already freed by backward"},
      {{"seed001_mlp_estimate", "zero_grad_none"},
       "zero_grad(set_to_none=True) drops every .grad: back to parameters + data"},
      {{"seed001_mlp_estimate", "model2_inplace"}, "a second model with ReLU(inplace=True)"},
      {{"seed001_mlp_estimate", "forward_inplace"},
       "in-place ReLU overwrites each Linear output instead of allocating another: the activation kept for backward "
       "is the Linear's own output"},
      {{"seed001_mlp_estimate", "backward_inplace"}, "gradients of both models' parameters now exist"},
      {{"seed001_mlp_estimate", "del_model2"}, "model2, its gradients, out and loss are released"},
      {{"seed001_mlp_estimate", "forward_checkpoint"},
       "checkpoint_sequential(model, 2): the first segment (Linear, ReLU) saves nothing of its own; its output is "
       "still kept, by the next Linear"},
      {{"seed001_mlp_estimate", "backward_checkpoint"},
       "backward re-ran the first segment to recompute what it needed, then freed it again"},
      {{"seed001_mlp_estimate", "no_grad_forward"},
       "under no_grad nothing is saved: each activation is freed as soon as the next layer has read it"},
      {{"seed002_small_linear", "linear10x10_cuda"},
       "440 bytes of parameters take two 512-byte blocks, and the card a whole 2 MiB segment"},
      {{"seed002_small_linear", "tensor_1"}, "4 bytes requested, 512 allocated, from the same cached segment"},
      {{"seed002_small_linear", "deleted"}, "freed blocks go back to the cache: reserved stays 2 MiB"},
      {{"seed002_small_linear", "empty_cache"}, "empty_cache returns the now entirely free segment to the driver"},
      {{"seed004_attention_function", "initial"}, "q, k, v, x: four 4 MiB tensors in one 20 MiB segment"},
      {{"seed004_attention_function", "in_fn_after_matmul"},
       "attn = (q @ k) * 0.125: the product (2 MiB) was freed once the scaled copy existed; the peak held both"},
      {{"seed004_attention_function", "in_fn_after_final"},
       "(attn @ v).transpose(1, 2).reshape(B, L, C): the transpose is a view, so reshape must copy: two 4 MiB blocks "
       "(the product and the copy, the new x), the product freed after"},
      {{"seed004_attention_function", "after_fn"},
       "the function's locals died at its closing brace: back to the four inputs"},
      {{"seed004_attention_global", "after_final"},
       "at global scope attn and the product's copy stay alive: the old x is freed only when the new one is assigned"},
      {{"seed004_x_plus_1", "in_fn_x_plus_1_unassigned"},
       "x + 1 with no name: allocated and freed in the same statement"},
      {{"seed004_x_plus_1", "fb_x_eq_x_plus_1"}, "x = x + 1 inside the function: the caller's x stays, so both exist"},
      {{"seed003_randn", "big1"},
       "a 960,000,000-byte tensor: its own 916 MiB segment (requests >= 10 MiB are rounded to 2 MiB)"},
      {{"seed003_randn", "B_assign2"},
       "x = randn(...) builds the new tensor before the old is released: two at the peak"},
      {{"seed003_randn", "B_x_eq_1"}, "x = 1 releases the tensor; its segment stays cached"},
      {{"seed003_randn", "A_alloc6"},
       "six live tensors fit under this 6 GiB cap on an 80 GB card (the seed's card had less room)"},
      {{"seed003_code_a_small_card", "A_oom"},
       "on a 6 GiB card with 1.35 GiB held by the driver and others, the sixth 916 MiB tensor does not fit"},
  };
  return table;
}

}  // namespace

std::string mark_note(const std::string& scenario, const std::string& label) {
  if (scenario.rfind("seed000_", 0) == 0) {
    auto it = seed000_notes().find(label);
    return it == seed000_notes().end() ? "" : it->second;
  }
  auto it = notes().find({scenario, label});
  return it == notes().end() ? "" : it->second;
}

}  // namespace bytegrad::programs
