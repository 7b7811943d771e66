#!/usr/bin/env python3
"""Where `.to()`'s new regions went against how much CPU parameter storage `.to()` had freed by then.

  python3 tools/probes/freed_host_span.py [RUN ...]     RUN: workspace/case, e.g. xd/c059 (default: every run)

Reads docs/evidence/generated_segments/ (gpt2_generated.py --segments: every segment's address, the request
that made it, the mark). For each segment made during `.to()` (mark `start`) it finds the parameter whose copy
opened it by replaying nanoGPT's parameters in `Module._apply`'s order through the caching allocator's pools
(small: 2 MiB segments for requests up to 1 MiB; large: 20 MiB below 10 MiB, else the request rounded to
2 MiB; best fit over the segments' free tails), and prints the segment's address relative to T (the first
small segment) beside the MiB of parameter storage freed before it: each parameter's CPU tensor is freed as
`.to()` replaces it, and glibc returns blocks of 128 KiB or more (its first mmap threshold; the parameters
are allocated before anything is freed) to the kernel at once (munmap), page-rounded with a 16-byte header.
Those blocks were mapped one after another, top-down, before the CUDA context, so what `.to()` frees is one
growing hole above T. The summary: for the 20 MiB segments made where the host map has no arena holes (SDPA
runs: no causal mask built on the CPU, docs/status.md), how many went above T (into that hole) against the
MiB freed and not yet taken by earlier segments there (20 MiB each).
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_segments as cs  # noqa: E402

EVIDENCE = "docs/evidence/generated_segments"
MiB = 1 << 20


def parameters(cfg):
    """nanoGPT's parameters in `.to()`'s order (module tree depth first), bytes each; lm_head tied to wte."""
    V, C, L, block = cfg["vocab"], cfg["n_embd"], cfg["n_layer"], cfg["block"]
    p = [("wte", V * C), ("wpe", block * C)]
    for i in range(L):
        p += [(f"h{i}.ln_1.w", C), (f"h{i}.ln_1.b", C), (f"h{i}.c_attn.w", 3 * C * C), (f"h{i}.c_attn.b", 3 * C),
              (f"h{i}.attn.c_proj.w", C * C), (f"h{i}.attn.c_proj.b", C), (f"h{i}.ln_2.w", C), (f"h{i}.ln_2.b", C),
              (f"h{i}.c_fc.w", 4 * C * C), (f"h{i}.c_fc.b", 4 * C), (f"h{i}.mlp.c_proj.w", 4 * C * C),
              (f"h{i}.mlp.c_proj.b", C)]
    p += [("ln_f.w", C), ("ln_f.b", C)]
    return [(name, 4 * n) for name, n in p]


def opened_segments(params):
    """[(segment bytes, parameter that opened it, MiB of mmapped parameter storage freed before)]."""
    free_tails = {"small": [], "large": []}
    opened, freed = [], 0
    for name, nbytes in params:
        rounded = (nbytes + 511) // 512 * 512
        pool = "small" if rounded <= MiB else "large"
        tails = free_tails[pool]
        fitting = [i for i, tail in enumerate(tails) if tail >= rounded]
        if fitting:
            best = min(fitting, key=lambda i: tails[i])
            tails[best] -= rounded
        else:
            size = 2 * MiB if pool == "small" else (20 * MiB if rounded < 10 * MiB else
                                                   (rounded + 2 * MiB - 1) // (2 * MiB) * 2 * MiB)
            tails.append(size - rounded)
            opened.append((size, name, freed / MiB))
        if nbytes >= 128 * 1024:
            freed += (nbytes + 16 + 4095) // 4096 * 4096
    return opened


def run(path):
    cfg = json.load(open(path.replace(".segments.gz", ".json")))["config"]
    made = [s for s in cs.pytorch_segments(path) if s["mark"] == "start"]
    small = [s for s in made if s["size"] == 2 * MiB]
    if not small:
        return cfg, []
    t = small[0]["address"]
    rows = []
    for seg, (size, name, freed) in zip(made, opened_segments(parameters(cfg))):
        if seg["size"] != size:
            break  # the replay parted from the recording: stop there
        rows.append((size, name, freed, (seg["address"] - t) / MiB))
    return cfg, rows


def main(argv):
    runs = argv or sorted(p[len(EVIDENCE) + 1:].split("_")[0] for p in glob.glob(f"{EVIDENCE}/x*/c*.segments.gz"))
    buckets = {}
    for name in runs:
        path = glob.glob(f"{EVIDENCE}/{name}_*.segments.gz")[0]
        cfg, rows = run(path)
        print(name, cfg["attention"], " ".join(f"{s >> 20}@{a:+.0f}[{p} {f:.0f}]" for s, p, f, a in rows))
        if cfg["attention"] != "sdpa":
            continue
        taken = 0  # MiB of the hole the segments above T took so far
        for size, _, freed, address in rows:
            if size != 20 * MiB or address == 74.0:  # the gap at T + 74 MiB is the driver's, not a new region
                continue
            key = min(max(int((freed - taken) // 8) * 8, 8), 72)
            above, total = buckets.get(key, (0, 0))
            buckets[key] = (above + (address > 98), total + 1)
            if address > 98:
                taken += 20
    print("\nSDPA runs, new 20 MiB segments during .to(): above T + 98 MiB / all, by MiB freed and not yet taken")
    for key in sorted(buckets):
        above, total = buckets[key]
        print(f"  {key:3d}{'+' if key == 72 else '-' + str(key + 7)} MiB: {above} of {total} above")


if __name__ == "__main__":
    main(sys.argv[1:])
