"""What the CUDA driver allocates the first time a process launches each of PyTorch's kernels.

driver_allocations_probe.py found device allocations of the driver's own between PyTorch's segments: at the
first launch of some kernels a host-mapped 2 MiB piece at the top of a fresh 8 MiB region (its other 6 MiB
free, below every earlier region), 8.25 MiB more at others (32 bytes of stack for each of the card's
132 x 2048 threads), small pieces for the random kernels, and cuBLAS's own memory at a thread's first
product. This probe runs one op as the very first kernel of a fresh process (its inputs copied from the
CPU, which launches nothing), then a second op, and prints what each left in the process's address map
(mappings of 1 MiB or more) and among the device's allocations.

  python3 driver_first_launch_probe.py [OP[,OP2] ...]      (default: every op below, then relu)
"""
import subprocess, sys

OPS = ["relu", "add", "mul", "arange", "zeros", "fill", "embedding", "index_select", "layer_norm", "softmax",
       "log_softmax", "nll_loss", "cross_entropy", "gelu", "sum", "mean", "randn", "randint", "uniform",
       "addmm", "mm", "bmm", "masked_fill", "tril", "contiguous", "cat", "exp", "adamw_foreach", "adamw_single",
       "sgd", "tanh_backward", "threshold_backward", "clone", "to_bf16", "softmax_backward",
       "log_softmax_backward", "layer_norm_backward", "nll_loss_backward", "embedding_backward",
       "embedding_backward_sort", "gelu_backward", "index_add", "gather", "scatter_add", "where", "max_dim",
       "argmax", "var", "sdpa_bf16", "sdpa_fp32", "foreach_add", "dropout", "normal", "bernoulli", "cumsum"]

CHILD = r'''
import ctypes, sys, torch
import torch.nn.functional as F
cuda = ctypes.CDLL("libcuda.so.1")
get_range = cuda.cuMemGetAddressRange_v2
get_range.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
MiB = 1 << 20

def mappings():
    out = {}
    for line in open("/proc/self/maps"):
        p = line.split()
        a, b = (int(v, 16) for v in p[0].split("-"))
        out[a] = (b - a, p[1], p[5] if len(p) > 5 else "")
    return out

def foreign(lo, hi):
    segs = {s["address"] for s in torch.cuda.memory_snapshot()}
    found, a = {}, lo
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    while a < hi:
        if get_range(ctypes.byref(base), ctypes.byref(size), a) == 0:
            if base.value not in segs:
                found[base.value] = size.value
            a = max(a + (64 << 10), base.value + size.value)
        else:
            a += 64 << 10
    return found

def cpu(*shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype).to("cuda")

def run(op):
    x = cpu(256, 768)
    if op == "relu": torch.relu(x)
    elif op == "add": x + x
    elif op == "mul": x * x
    elif op == "arange": torch.arange(0, 256, device="cuda")
    elif op == "zeros": torch.zeros(1000, device="cuda")
    elif op == "fill": x.fill_(2.0)
    elif op == "embedding": F.embedding(torch.zeros(4, 256, dtype=torch.long).to("cuda"), cpu(1000, 768))
    elif op == "index_select": x.index_select(0, torch.zeros(16, dtype=torch.long).to("cuda"))
    elif op == "layer_norm": F.layer_norm(x, (768,), cpu(768), cpu(768))
    elif op == "softmax": F.softmax(x, -1)
    elif op == "log_softmax": F.log_softmax(x, -1)
    elif op == "nll_loss": F.nll_loss(x, torch.zeros(256, dtype=torch.long).to("cuda"))
    elif op == "cross_entropy": F.cross_entropy(x, torch.zeros(256, dtype=torch.long).to("cuda"))
    elif op == "gelu": F.gelu(x)
    elif op == "sum": x.sum()
    elif op == "mean": x.mean(-1)
    elif op == "randn": torch.randn(1000, device="cuda")
    elif op == "randint": torch.randint(0, 10, (1000,), device="cuda")
    elif op == "uniform": x.uniform_()
    elif op == "addmm": torch.addmm(cpu(768), x, cpu(768, 768))
    elif op == "mm": x @ cpu(768, 768)
    elif op == "bmm": torch.bmm(cpu(4, 64, 64), cpu(4, 64, 64))
    elif op == "masked_fill": x.masked_fill(torch.zeros(256, 768, dtype=torch.bool).to("cuda"), 0.0)
    elif op == "tril": torch.tril(x)
    elif op == "contiguous": x.t().contiguous()
    elif op == "cat": torch.cat([x, x])
    elif op == "exp": x.exp()
    elif op in ("adamw_foreach", "adamw_single", "sgd"):
        p = torch.nn.Parameter(cpu(256, 768)); p.grad = cpu(256, 768)
        opt = (torch.optim.SGD([p], lr=0.1) if op == "sgd" else
               torch.optim.AdamW([p], foreach=(op == "adamw_foreach")))
        opt.step()
    elif op == "tanh_backward": torch.ops.aten.tanh_backward(x, x)
    elif op == "threshold_backward": torch.ops.aten.threshold_backward(x, x, 0.0)
    elif op == "clone": x.clone()
    elif op == "to_bf16": x.to(torch.bfloat16)
    elif op == "softmax_backward": torch.ops.aten._softmax_backward_data(x, x, -1, torch.float32)
    elif op == "log_softmax_backward": torch.ops.aten._log_softmax_backward_data(x, x, -1, torch.float32)
    elif op == "layer_norm_backward":
        torch.ops.aten.native_layer_norm_backward(x, x, (768,), cpu(256, 1), cpu(256, 1), cpu(768), cpu(768),
                                                  [True, True, True])
    elif op == "nll_loss_backward":
        torch.ops.aten.nll_loss_backward(cpu(()), x, torch.zeros(256, dtype=torch.long).to("cuda"), None, 1,
                                         -100, cpu(()))
    elif op == "embedding_backward":
        torch.ops.aten.embedding_dense_backward(x, torch.zeros(256, dtype=torch.long).to("cuda"), 1000, -1, False)
    elif op == "embedding_backward_sort":
        torch.ops.aten.embedding_dense_backward(cpu(4096, 768), torch.zeros(4096, dtype=torch.long).to("cuda"),
                                                1000, -1, False)
    elif op == "gelu_backward": torch.ops.aten.gelu_backward(x, x)
    elif op == "index_add": x.index_add_(0, torch.zeros(16, dtype=torch.long).to("cuda"), cpu(16, 768))
    elif op == "gather": x.gather(1, torch.zeros(256, 4, dtype=torch.long).to("cuda"))
    elif op == "scatter_add": x.scatter_add_(1, torch.zeros(256, 4, dtype=torch.long).to("cuda"), cpu(256, 4))
    elif op == "where": torch.where(torch.ones(256, 768, dtype=torch.bool).to("cuda"), x, x)
    elif op == "max_dim": x.max(-1)
    elif op == "argmax": x.argmax(-1)
    elif op == "var": x.var(-1)
    elif op == "sdpa_bf16":
        q = cpu(4, 12, 256, 64, dtype=torch.bfloat16)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    elif op == "sdpa_fp32":
        q = cpu(4, 12, 256, 64)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    elif op == "foreach_add": torch._foreach_add_([x, x], [x, x])
    elif op == "dropout": F.dropout(x, 0.1)
    elif op == "normal": x.normal_()
    elif op == "bernoulli": x.bernoulli_(0.5)
    elif op == "cumsum": x.cumsum(-1)
    else: raise SystemExit("unknown op " + op)
    torch.cuda.synchronize()

torch.cuda.init()
anchor_tensor = cpu(1)  # the process's first segment: scans are relative to it
anchor = min(s["address"] for s in torch.cuda.memory_snapshot())
lo, hi = anchor - (4 << 30), anchor + (1 << 30)
before_maps, before_foreign = mappings(), foreign(lo, hi)
for op in sys.argv[1].split(","):
    run(op)
    maps, fo = mappings(), foreign(lo, hi)
    new_maps = [f"{s / MiB:.2f}{'/' + path.split('/')[-1] if path else ''}({perms})"
                for a, (s, perms, path) in sorted(maps.items())
                if lo <= a < hi and before_maps.get(a) != (s, perms, path) and s >= MiB and perms != "rw-p"]
    new_foreign = [f"{s / 1024:.0f}K" for a, s in sorted(fo.items()) if before_foreign.get(a) != s]
    print(f"{op:20s} maps: {' '.join(new_maps) or '-':60s} foreign: {' '.join(new_foreign) or '-'}", flush=True)
    before_maps, before_foreign = maps, fo
'''

if __name__ == "__main__":
    cases = sys.argv[1:] or [op + ",relu" for op in OPS]
    for case in cases:
        out = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True)
        print(out.stdout, end="", flush=True)
        if out.returncode != 0:
            print(case, "failed:", out.stderr.strip().splitlines()[-1], flush=True)
