#!/usr/bin/env python3
"""PyTorch's allocator events for norm/var/std forward and backward (the order bytegrad's formulas follow).
Usage: python3 pytorch_norm_var_backward.py OUT.json"""
import json
import sys

import torch


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


cases = {
    "norm dim1": lambda x: x.norm(dim=1).sum(),
    "vector_norm dim1": lambda x: torch.linalg.vector_norm(x, dim=1).sum(),
    "norm all": lambda x: x.norm(),
    "var dim1": lambda x: x.var(dim=1).sum(),
    "var all": lambda x: x.var(),
    "std dim1": lambda x: x.std(dim=1).sum(),
    "std all": lambda x: x.std(),
    "var dim1 correction0": lambda x: x.var(dim=1, correction=0).sum(),
}
out = {}
for name, f in cases.items():
    x = torch.randn(1024, 512, device="cuda", requires_grad=True)
    fwd_loss = []
    ev_fwd = events_of(lambda: fwd_loss.append(f(x)))
    ev_bwd = events_of(lambda: fwd_loss[0].backward())
    out[name] = {"forward": ev_fwd, "backward": ev_bwd}
    del fwd_loss, x
    torch.cuda.empty_cache()
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out)[:3000])
