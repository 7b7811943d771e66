#!/usr/bin/env python3
"""Does host work before `.to()` decide where `.to()`'s regions go? (issue 31; docs/status.md)

The placement model follows the host's address map for the regions `.to()` reserves before the first kernel
launch: into holes above the first small segment A where the program's host work left them, else below the
stretch (CachingAllocator::set_host_map_holes). The recordings sort by attention: nanoGPT's slow attention
(whose constructor runs torch.ones + torch.tril over block x block on the CPU) gives holes, SDPA none. This
probe builds the same SDPA model in fresh processes, with and without such CPU work first, and prints where
each `.to()` segment outside [A, A + 98 MiB) went, as tools/probes/to_regions.py does:
  A: above A + 98 MiB (a host-map hole), H: in [A - 414 MiB, A), B: below A - 414 MiB.

  python3 tools/probes/host_map_probe.py [L,H,C,V,BLOCK] [REPEATS]     (default GPT-2 small, 2)

Variants: none; ones (torch.ones(1024, 1024) on the CPU first); tril (torch.tril of it, as the slow attention
does); small (torch.ones(64, 64): below PyTorch's parallel grain of 32768 elements); threads1 (ones with
torch.set_num_threads(1), so no thread pool starts).
"""
import os
import subprocess
import sys

CHILD = r'''
import sys, torch
sys.path.insert(0, sys.argv[3])
import gpt2_scenarios as g
variant = sys.argv[1]
L, H, C, V, BL = (int(v) for v in sys.argv[2].split(","))
if variant == "threads1":
    torch.set_num_threads(1)
if variant in ("ones", "threads1"):
    torch.ones(1024, 1024)
elif variant == "tril":
    torch.tril(torch.ones(1024, 1024))
elif variant == "small":
    torch.ones(64, 64)
torch.manual_seed(1337)
model = g.GPT(g.Cfg(L, H, C, V, BL), sdpa=True).to("cuda")
MiB = 1 << 20
segs = sorted((s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot())
a = next(addr for addr, size in segs if size == 2 * MiB)
out = ""
for addr, size in segs:
    r = (addr - a) // MiB
    if 0 <= r < 98:
        continue
    out += "A" if r > 0 else ("H" if r >= -414 else "B")
print(variant, "segments", len(segs), "letters(by address)", out or "-")
'''


def main():
    cfg = sys.argv[1] if len(sys.argv) > 1 else "12,12,768,50257,1024"
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    golden = os.path.join(here, "..", "..", "shared", "golden", "gpt2")
    if not os.path.exists(golden):
        golden = os.path.join(here, "..", "..", "..", "shared", "golden", "gpt2")
    for _ in range(repeats):
        for variant in ("none", "ones", "tril", "small", "threads1"):
            subprocess.run([sys.executable, "-c", CHILD, variant, cfg, os.path.abspath(golden)], check=False)


if __name__ == "__main__":
    main()
