#!/usr/bin/env python3
"""Where does the CUDA driver put cudaMalloc'ed segments once the process has copied from pageable host
memory? memory/virtual_address_space.h models a fresh process's placement (regions rounded up to 32 MiB,
reserved top-down); GPT-2's model copy (`.to()` of CPU-built parameters) breaks it: its 20 MiB segments land
128 MiB apart, above the anchor.

Each experiment runs in a fresh process (PYTORCH_NO_CUDA_MEMORY_CACHING=1, so torch.empty is one
cudaMalloc) and prints, per step, the segment's offset from the anchor in MiB and every change to the
process's address map (/proc/self/maps) that the step made; gpt2* runs GPT-2 small's `.to()` (and, with
fwd, the first training forward) with the caching allocator and prints the segments as made.

  python3 tools/probes/driver_placement_probe.py [--trace] [EXPERIMENT...]     (default: all)

--trace runs each child under tools/probes/mmap_trace.c (built first as /tmp/mmap_trace.so: see its header)
and prints its log of mmap/munmap/cudaMalloc/cudaMemcpyAsync calls, with `## begin/end STEP` markers; with
MMAP_TRACE_MAPS=1 also the anonymous mappings of 1 MiB or more at each call.

Findings (H100, driver 580.159.04, PyTorch 2.11, 16 CPU cores; outputs in
docs/evidence/driver_placement/):
 - The driver reserves address space for a new region with mmap(NULL, R + 32 MiB - 4 KiB, PROT_NONE), R the
   request rounded up to 32 MiB, and unmaps the unaligned low part: a 32 MiB-aligned region at the top of
   the highest free gap of the process's address space (the kernel's top-down mmap). Freed regions are
   unmapped whole.
 - The first CPU work on PyTorch's intra-op thread pool (here the fill of the copy's source tensor, in
   GPT-2 the CPU initialisation of the model) creates one glibc malloc arena per pool thread: 64 MiB
   aligned heaps, each made by mapping 128 MiB and trimming, so the arenas sit 128 MiB apart with 64 MiB
   holes between them, among the threads' 8 MiB stacks. Later regions fall into those holes, one per hole
   (the 32 MiB left below a region cannot take another R + 32 MiB - 4 KiB mapping). That is the 128 MiB
   spacing, and where the copy's segments go depends on where the threads' arenas and stacks went.
 - That layout depends on thread timing: three fresh runs of the same GPT-2 small `.to()` (gpt2-a,
   gpt2fwd-b, gpt2fwd-c) placed its 20 MiB segments at three different address orders, and the forward's
   12 MiB segments, which reuse the leftovers of those regions (the driver's own free ranges are reused
   newest first), inherit the difference. No deterministic model can reproduce addresses that PyTorch
   itself does not reproduce; the figures that depend on them (best fit's ties between equal free blocks
   in different segments) can differ between two PyTorch runs of one program, though most programs'
   marks do not (g_gpt2_small_fp32's were equal in 6 runs).
 - Copies of 64 KiB made no arenas (pageable:0.0625 keeps the fresh process's 32 MiB spacing).
"""
import os, subprocess, sys, json

MiB = 1 << 20


def maps():
    out = {}
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            out[(lo, hi)] = (p[1], p[5] if len(p) > 5 else "")
    return out


def diff(before, after, anchor):
    lines = []
    for k in sorted(set(after) - set(before)):
        lines.append(f"    + {(k[0]-anchor)/MiB:+.1f} MiB size {(k[1]-k[0])/MiB:.3f} MiB {after[k][0]} {after[k][1]}")
    for k in sorted(set(before) - set(after)):
        lines.append(f"    - {(k[0]-anchor)/MiB:+.1f} MiB size {(k[1]-k[0])/MiB:.3f} MiB {before[k][0]} {before[k][1]}")
    return lines


def marker(text):
    path = os.environ.get("MMAP_TRACE_FILE")
    if path:
        with open(path, "a") as f:
            f.write(f"## {text}\n")


def child(name):
    import torch
    torch.cuda.init()
    torch.empty(0, device="cuda")
    live = []
    anchor = None
    log = []

    def step(label, fn):
        nonlocal anchor
        marker(f"begin {label}")
        b = maps()
        r = fn()
        torch.cuda.synchronize()
        a = maps()
        if anchor is None and r is not None:
            anchor = r.data_ptr()
        off = "" if r is None else f" @ {(r.data_ptr() - anchor) / MiB:+.1f}"
        marker(f"end {label}{off}")
        log.append(f"  {label}{off}")
        log.extend(diff(b, a, anchor or 0))
        return r

    def alloc(n):
        t = step(f"alloc {n/MiB:g}M", lambda: torch.empty(n, dtype=torch.uint8, device="cuda"))
        live.append(t)
        return t

    def copy(t, n, pinned=False):
        src = torch.ones(n, dtype=torch.uint8)
        if pinned:
            src = src.pin_memory()
        step(f"copy {n/MiB:g}M {'pinned' if pinned else 'pageable'}", lambda: t[:n].copy_(src))

    kind, _, arg = name.partition(":")
    if kind == "plain":  # 20 MiB segments, no copies
        for _ in range(8):
            alloc(20 * MiB)
    elif kind in ("pageable", "pinned"):  # each 20 MiB segment filled by a copy of arg MiB
        for _ in range(8):
            t = alloc(20 * MiB)
            copy(t, int(float(arg) * MiB), pinned=kind == "pinned")
    elif kind == "gptlike":  # the first parameters of GPT-2 small's .to(): 148 MiB wte, then 20 MiB segments
        t = alloc(148 * MiB)
        copy(t, 154389504 // MiB * MiB)
        for _ in range(10):
            t = alloc(20 * MiB)
            copy(t, 9 * MiB)
    elif kind == "copyfirst":  # one pageable copy of arg MiB into a small segment, then plain 20 MiB ones
        t = alloc(2 * MiB)
        big = alloc(int(float(arg) * MiB)) if float(arg) > 2 else t
        copy(big, int(float(arg) * MiB))
        for _ in range(8):
            alloc(20 * MiB)
    print(name)
    print("\n".join(log))


def gpt2_child(label):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "golden", "gpt2"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "golden"))
    import gpt2_scenarios as g
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    torch.manual_seed(1337)
    model = g.GPT(g.SMALL, False)
    b = maps()
    marker("begin to")
    model = model.to("cuda")
    marker("end to")
    torch.cuda.synchronize()
    a = maps()
    if "fwd" in label:  # and the first training forward (gpt2_scenarios.train's), kernels loading on first use
        opt = g.make_optimizer(model, None)
        x = torch.randint(0, g.SMALL.vocab, (4, 256), device="cuda")
        y = torch.randint(0, g.SMALL.vocab, (4, 256), device="cuda")
        marker("begin forward")
        logits, loss = model(x, y)
        torch.cuda.synchronize()
        marker("end forward")
        a = maps()
    snap = torch.cuda.memory._snapshot()
    segs = []
    for e in snap["device_traces"][0]:
        if e["action"] == "segment_alloc":
            segs.append((e["addr"], e["size"]))
    base = segs[0][0]
    print(label, " ".join(f"{s//MiB}M@{(x-base)//MiB}" for x, s in segs))
    for line in diff(b, a, base):
        print(line)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--child":
        if args[1].startswith("gpt2"):
            gpt2_child(args[1])
        else:
            child(args[1])
        return
    trace = "--trace" in args
    args = [a for a in args if a != "--trace"]
    names = args or ["plain", "pageable:9", "pinned:9", "pageable:1", "pageable:20", "pageable:0.0625",
                     "gptlike", "copyfirst:148", "copyfirst:1", "gpt2-a", "gpt2-b", "gpt2-c", "gpt2-a-x0",
                     "gpt2-b-x0"]
    for n in names:
        env = dict(os.environ)
        if n.startswith("gpt2"):
            if n.endswith("x0"):
                env["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"
        else:
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        log = f"/tmp/mmap_trace_{n.replace(':', '_')}.log"
        if trace:
            if os.path.exists(log):
                os.remove(log)
            env["LD_PRELOAD"] = "/tmp/mmap_trace.so"
            env["MMAP_TRACE_FILE"] = log
        r = subprocess.run([sys.executable, __file__, "--child", n], env=env, capture_output=True, text=True)
        print(r.stdout, end="")
        if trace and os.path.exists(log):
            print(f"=== trace {n}")
            print(open(log).read(), end="")
        if r.returncode:
            print(f"{n}: exit {r.returncode}\n{r.stderr[-3000:]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
