"""Which device allocations exist that are not the caching allocator's segments, and when do they appear?

The CUDA driver (and cuBLAS) allocate device memory of their own: loaded kernels' code, cuBLAS's handle
state. They come out of the same address space as cudaMalloc's segments, so they take gaps the placement
model (src/bytegrad/memory/virtual_address_space.h) would give to later segments. This probe asks the
driver directly: after every op of a program's first steps it scans the device address range around
PyTorch's segments with cuMemGetAddressRange and prints every allocation that is not one of PyTorch's
segments, when it appeared, and where each new PyTorch segment went, relative to the lowest segment.

  python3 driver_allocations_probe.py PROGRAM [PROGRAM ...]     (each in a fresh process)

PROGRAM: gpt2 (g_gpt2_small_fp32's first step, PyTorch's default cuBLAS workspaces), seed001 (the seed's
first forward and backward), lt:N (N MB of parameters moved, then one linear, as
lt_workspace_placement_probe.py), gpt2:L,H,C,V,BLOCK,B,T,AMP,SDPA (any nanoGPT configuration, both
steps; AMP and SDPA 0 or 1). PROBE_SCAN_EVERY=N: scan after every Nth op (and after each op that changed
memory_reserved) instead of every op.
"""
import ctypes, os, subprocess, sys

CHILD = r'''
import ctypes, math, sys, torch
import torch.nn as nn, torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

cuda = ctypes.CDLL("libcuda.so.1")
get_range = cuda.cuMemGetAddressRange_v2
get_range.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
MiB = 1 << 20

def segments():
    return {s["address"]: s["total_size"] for s in torch.cuda.memory_snapshot()}

def scan(lo, hi, step=256 << 10):
    """Every allocation (base, size) that covers an address in [lo, hi), probing every `step` bytes."""
    found, a = {}, lo
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    while a < hi:
        if get_range(ctypes.byref(base), ctypes.byref(size), a) == 0:
            found[base.value] = size.value
            a = max(a + step, base.value + size.value)
        else:
            a += step
    return found

state = {"foreign": {}, "segs": {}, "anchor": None, "maps": {}}

def mappings():
    """The process's address map: start -> (size, permissions, path)."""
    out = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo_hi, perms = parts[0], parts[1]
            a, b = (int(v, 16) for v in lo_hi.split("-"))
            out[a] = (b - a, perms, parts[5] if len(parts) > 5 else "")
    return out

def report(label):
    torch.cuda.synchronize()
    segs = segments()
    if not segs:
        return
    if state["anchor"] is None:
        state["anchor"] = max(segs)
    anchor = state["anchor"]
    # Scan windows around the segments, not the whole span: a segment placed far from the others (DDP's
    # GPT-2 small puts one ~hundreds of GiB below the rest) would make one span millions of probes.
    windows = []
    for b, s in sorted(list(segs.items()) + [(anchor, 0)]):
        w_lo, w_hi = b - (3 << 30), b + s + (512 << 20)
        if windows and w_lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], w_hi)
        else:
            windows.append([w_lo, w_hi])
    every = {}
    for w_lo, w_hi in windows:
        every.update(scan(w_lo, w_hi))
    lo, hi = windows[0][0], windows[-1][1]
    foreign = {b: s for b, s in every.items() if b not in segs}
    lines = []
    for b, s in sorted(segs.items()):
        if state["segs"].get(b) != s:
            lines.append(f"  + segment  {(b - anchor) / MiB:+9.2f} MiB  size {s / MiB:8.2f} MiB")
    for b, s in sorted(foreign.items()):
        if state["foreign"].get(b) != s:
            lines.append(f"  + FOREIGN  {(b - anchor) / MiB:+9.2f} MiB  size {s / MiB:8.2f} MiB")
    for b, s in sorted(state["foreign"].items()):
        if b not in foreign:
            lines.append(f"  - FOREIGN  {(b - anchor) / MiB:+9.2f} MiB  size {s / MiB:8.2f} MiB")
    maps = mappings()
    for a, (size, perms, path) in sorted(maps.items()):
        if lo <= a < hi and state["maps"].get(a) != (size, perms, path) and size >= (1 << 20):
            lines.append(f"  + map      {(a - anchor) / MiB:+9.2f} MiB  size {size / MiB:8.2f} MiB {perms} {path}")
    for a, (size, perms, path) in sorted(state["maps"].items()):
        if lo <= a < hi and maps.get(a) != (size, perms, path) and size >= (1 << 20):
            lines.append(f"  - map      {(a - anchor) / MiB:+9.2f} MiB  size {size / MiB:8.2f} MiB {perms} {path}")
    state["foreign"], state["segs"], state["maps"] = foreign, segs, maps
    if lines:
        print(f"after {label}:", flush=True)
        print("\n".join(lines), flush=True)

# Scanning after every op costs ~60 ms (a GPT-2 small forward is thousands of ops): PROBE_SCAN_EVERY=N scans
# after every Nth op and after any op that changed memory_reserved (a segment made or released).
SCAN_EVERY = int(__import__("os").environ.get("PROBE_SCAN_EVERY", "1"))

class EveryOp(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.reserved = None
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n += 1
        if not state.get("marks_only"):
            reserved = torch.cuda.memory_reserved()
            if self.n % SCAN_EVERY == 0 or reserved != self.reserved:
                report(f"op {self.n} {func}")
            self.reserved = reserved
        return out

prog = sys.argv[1]
torch.cuda.init()
if prog == "gpt2":
    sys.path.insert(0, sys.argv[2])
    import gpt2_scenarios as g
    torch.manual_seed(1337)
    model = g.GPT(g.SMALL).to("cuda")
    report("model .to()")
    opt = g.make_optimizer(model, None)
    x = torch.randint(0, 50257, (4, 256), device="cuda")
    y = torch.randint(0, 50257, (4, 256), device="cuda")
    report("data")
    with EveryOp():
        logits, loss = model(x, y)
    report("s0_forward")
    loss.backward()
    report("s0_backward")
    opt.step()
    report("s0_step")
elif prog.startswith("gpt2:"):
    # gpt2:L,H,C,V,BLOCK,B,T,AMP,SDPA: two training steps of gpt2_scenarios.py's loop, every main-thread op
    # scanned (AMP, SDPA: 0 or 1); CUBLAS_WORKSPACE_CONFIG as the environment has it.
    sys.path.insert(0, sys.argv[2])
    import gpt2_scenarios as g
    L, H, C, V, BL, B, T, amp, sdpa = (int(v) for v in prog[5:].split(","))
    class Marks:  # every op until the first forward ends, then the marks
        def mark(self, label):
            report(label)
            state["marks_only"] = label != "data"
    with EveryOp():
        g.train(Marks(), g.Cfg(L, H, C, V, BL), B, T, None, bool(amp), sdpa=bool(sdpa))
elif prog == "seed001":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).cuda()
    report("model .cuda()")
    with EveryOp():
        x = torch.randn(256, 784, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        out = model(x)
        loss = F.cross_entropy(out, y)
    report("loss")
    loss.backward()
    report("backward")
elif prog.startswith("lt:"):
    mb = float(prog[3:])
    torch.manual_seed(0)
    n, pieces = int(mb * MiB / 4), []
    while n > 0:
        k = min(n, 1 << 20)
        pieces.append(nn.Parameter(torch.empty(k).normal_(0, 0.02)))
        n -= k
    moved = [p.to("cuda") for p in pieces]
    report("moved")
    with EveryOp():
        lin = nn.Linear(768, 768).cuda()
        x = torch.randn(1024, 768, device="cuda")
        filler = torch.empty(1 << 18, device="cuda")
        yy = lin(x)
    report("linear")
'''

if __name__ == "__main__":
    golden_gpt2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "golden", "gpt2")
    for prog in sys.argv[1:]:
        print(f"=== {prog}", flush=True)
        subprocess.run([sys.executable, "-c", CHILD, prog, os.path.abspath(golden_gpt2)])
