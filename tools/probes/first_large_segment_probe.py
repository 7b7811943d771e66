#!/usr/bin/env python3
"""Where a fresh process's first segment goes when it is too large for the gap at T + 74 MiB (issue 31).

The generated sweep's runs whose first `.to()` copy (the embedding) makes a segment of 26-126 MiB put it at
the highest 32 MiB boundary below T (the first small segment) that holds it, in the hole at the top of the
stretch the driver holds (docs/status.md), except c043, whose 32 MiB segment went to a new region in every
recorded process. This asks the driver directly: in a fresh process per size, one request of SIZE MiB less
768 KiB (a segment of SIZE MiB, as nanoGPT's embedding copy), then a small one (the 2 MiB segment T), and
prints where the large segment sits relative to T.

  python3 tools/probes/first_large_segment_probe.py [--pool] [--repeat N] [SIZE_MIB ...]   (default: 26..160)

--pool: CPU work on PyTorch's thread pool first (a causal mask's tril, as nanoGPT's slow attention builds).

Each line: size, offset from T in MiB, and whether it sat in the hole (the highest 32 MiB boundary at or
below T - size), elsewhere below T, or above T (a new region in a hole of the host's map).
"""
import json
import os
import subprocess
import sys

MiB = 1 << 20
CHILD = r"""
import json, sys, torch
size = int(sys.argv[1])
if sys.argv[2] == "pool":
    torch.ones(2048, 2048).tril()  # starts PyTorch's CPU thread pool (its malloc arenas), as slow attention's mask
big = torch.empty(size - 768 * 1024, dtype=torch.uint8, device="cuda")
small = torch.empty(256, dtype=torch.uint8, device="cuda")
print(json.dumps(dict(big=big.data_ptr(), small=small.data_ptr(),
                      segments=[(s["total_size"], s["address"]) for s in torch.cuda.memory_snapshot()])))
"""


def run(size_mib, pool):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("PYTORCH_ALLOC_CONF", None)
    out = subprocess.run([sys.executable, "-c", CHILD, str(size_mib * MiB), "pool" if pool else "-"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return None, out.stderr[-500:]
    d = json.loads(out.stdout.strip().splitlines()[-1])
    segs = dict((a, s) for s, a in d["segments"])
    big = max(a for a in segs if a <= d["big"])
    small = max(a for a in segs if a <= d["small"])
    return (big, segs[big], small), None


def main(argv):
    repeat, pool = 1, False
    if argv[:1] == ["--pool"]:
        pool, argv = True, argv[1:]
    if argv[:1] == ["--repeat"]:
        repeat, argv = int(argv[1]), argv[2:]
    sizes = [int(a) for a in argv] or [26, 30, 32, 34, 38, 42, 62, 64, 66, 90, 96, 126, 128, 130, 148, 160]
    for size in sizes:
        for r in range(repeat):
            got, err = run(size, pool)
            if got is None:
                print(f"{size:4d} MiB: failed: {err}")
                continue
            big, seg_bytes, t = got
            off = (big - t) // MiB
            boundary = (t - seg_bytes) // (32 * MiB) * (32 * MiB)
            where = ("hole (highest 32 MiB boundary below T)" if big == boundary else
                     "above T" if big > t else "below T, not the hole")
            print(f"{size:4d} MiB (segment {seg_bytes // MiB} MiB), T mod 32 MiB = {(t // MiB) % 32:2d}: "
                  f"at T{off:+d} MiB, {where}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
