// Scaled dot-product attention through NVIDIA's cuDNN (its fused flash-attention engines, the kernels PyTorch's
// cuDNN backend runs on Hopper), where the build found cuDNN and its C++ frontend (optional, like CUDA:
// tools/get_cudnn_frontend.sh). The op layer's blocks are unchanged: cuDNN writes the same out, logsumexp and
// gradients into them and uses only the workspace the op layer lent (PyTorch's own cuDNN workspace block);
// a call whose graph cuDNN refuses, or that would need more workspace than was lent, returns false and the
// caller runs bytegrad's own kernels.
#pragma once

#include <string>

#include "bytegrad/core/strided_view.h"
#include "bytegrad/kernels/backend.h"

namespace bytegrad::cuda {

// Whether this build can call cuDNN and BYTEGRAD_CUDNN_ATTENTION is not 0 (the switch, for comparisons).
bool cudnn_attention_enabled();

// Whether the cuda backend sends an attention call of this size to cuDNN. Each cuDNN call costs the host
// tens of microseconds more than a launch of bytegrad's kernels (its frontend assembles the call's arguments
// every time), which a host-bound step pays in full (GPT-2 small bf16 + SDPA at 4 x 256: 8.3 -> 8.65 ms a
// step on an H200), while at 8 x 1024 cuDNN's kernels save 2 ms a step (24.6 -> 22.4). So by the call's work,
// B H Sq Sk D, from 2^30 multiply-adds up (4 x 256 is 0.2 x 2^30, 8 x 1024 6 x 2^30);
// BYTEGRAD_CUDNN_ATTENTION=1 sends every call that cuDNN takes, 0 none.
bool cudnn_attention_pays(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D);

// Why this thread's last call below returned false (empty after one that ran): cuDNN's own message when it
// refused the graph, or the workspace it would have needed.
std::string cudnn_attention_refusal();

// backend.h's attention_forward / attention_backward without extras (no bias, no dropout) and with as many
// key/value heads as query heads; true when cuDNN ran the call.
bool cudnn_attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                             const StridedView& v, double scale, bool is_causal, DeviceScratch workspace);
bool cudnn_attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                              const StridedView& dout, const StridedView& q, const StridedView& k, const StridedView& v,
                              const StridedView& out, const StridedView& lse, double scale, bool is_causal,
                              DeviceScratch workspace);

}  // namespace bytegrad::cuda
