#!/usr/bin/env python3
"""What a CUDA card keeps for itself before PyTorch's allocator gets any memory (issue 29's `--card`):
cudaMemGetInfo's total and free bytes after the context is created, after the first allocation, and after
cuBLAS and cuBLASLt are first used. Prints one JSON object.
  python3 cuda_context_probe.py"""
import json

import torch


def used():
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


torch.cuda.init()
free0, total = torch.cuda.mem_get_info()
after = {"context": used()}
x = torch.ones(1024, 1024, device="cuda")
after["first_allocation"] = used()
y = x @ x
torch.cuda.synchronize()
after["cublas"] = used()
z = torch.nn.functional.linear(x, x, torch.ones(1024, device="cuda"))
torch.cuda.synchronize()
after["cublaslt"] = used()
print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "total_bytes": total, "free_after_context_bytes": free0,
                  "outside_allocator_bytes_after": after,
                  "what": "outside_allocator = total - free - memory_reserved, after each step"}))
