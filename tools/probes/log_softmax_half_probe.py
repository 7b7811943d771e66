#!/usr/bin/env python3
"""PyTorch's allocator events for log_softmax's half_to_float path (and softmax's, as the control).

Usage: python3 log_softmax_half_probe.py OUT.json

log_softmax(x, dim, dtype=float32) of a float16 CUDA x goes to _log_softmax(x, dim, half_to_float=True):
no float32 copy of x, a float32 output, and _log_softmax_backward_data(grad, result, dim, Half) writes the
float16 grad_input straight from the float32 operands (softmax's backward makes grad * output first).
Float16 autocast reaches it through fp32_set_opt_dtype (an unset dtype becomes float32); bfloat16 takes the
copy. Each case: {"forward": events, "backward": events, "output_dtype", "grad_dtype"}, events being
[["alloc"|"free", block bytes], ...] made by the forward call alone, then by y.backward(g) alone (x, its
views and the float32 g are made before recording; y stays referenced through backward).
"""
import json
import sys

import torch
import torch.nn.functional as F


def events_of(fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    before = len(torch.cuda.memory._snapshot()["device_traces"][0])
    fn()
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
    torch.cuda.memory._record_memory_history(enabled=None)
    return [["alloc" if e["action"] == "alloc" else "free", e["size"]] for e in trace
            if e["action"] in ("alloc", "free_completed")]


def autocast16(f):
    def run(x):
        with torch.autocast("cuda", dtype=torch.float16):
            return f(x)
    return run


f32 = torch.float32
# name: (leaf shape, leaf dtype, transpose the leaf before the op, the op)
CASES = {
    "log_softmax f16 dim-1 dtype=f32": ((64, 1000), torch.float16, False, lambda x: F.log_softmax(x, -1, dtype=f32)),
    "log_softmax f16 dim-1 autocast_f16": ((64, 1000), torch.float16, False, autocast16(lambda x: F.log_softmax(x, -1))),
    "log_softmax f16 dim0 dtype=f32": ((64, 1000), torch.float16, False, lambda x: F.log_softmax(x, 0, dtype=f32)),
    "log_softmax f16.t() dim-1 dtype=f32": ((1000, 64), torch.float16, True, lambda x: F.log_softmax(x, -1, dtype=f32)),
    "log_softmax bf16 dim-1 dtype=f32": ((64, 1000), torch.bfloat16, False, lambda x: F.log_softmax(x, -1, dtype=f32)),
    "log_softmax f16 dim-1": ((64, 1000), torch.float16, False, lambda x: F.log_softmax(x, -1)),
    "softmax f16 dim-1 dtype=f32": ((64, 1000), torch.float16, False, lambda x: F.softmax(x, -1, dtype=f32)),
    "softmax f16 dim-1 autocast_f16": ((64, 1000), torch.float16, False, autocast16(lambda x: F.softmax(x, -1))),
}

out = {"_device": {"name": torch.cuda.get_device_name(), "torch": torch.__version__}}
for name, (shape, dtype, transpose, op) in CASES.items():
    torch.manual_seed(0)
    leaf = torch.randn(shape, device="cuda").to(dtype).requires_grad_()
    x = leaf.t() if transpose else leaf
    result = []
    forward = events_of(lambda: result.append(op(x)))
    y = result[0]
    g = torch.randn(y.shape, device="cuda", dtype=y.dtype)
    backward = events_of(lambda: y.backward(g))
    out[name] = {"forward": forward, "backward": backward, "output_dtype": str(y.dtype).split(".")[1],
                 "grad_dtype": str(leaf.grad.dtype).split(".")[1]}
    del result, y, g, x, leaf
    torch.cuda.empty_cache()
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out))
