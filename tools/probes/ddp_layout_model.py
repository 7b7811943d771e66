#!/usr/bin/env python3
"""Tests a placement model of a DDP process's segments against PyTorch's recordings with addresses (issue 27;
docs/evidence/ddp_addresses/README.md, "Session 26").

  python3 ddp_layout_model.py [--smallest] REC.json ...   each recording: model layout vs recorded, figures
  python3 ddp_layout_model.py --log PROBE.log             ddp_driver_probe.py's log: the `.to()` remainders

The model, read off ddp_driver_probe.py's logs (two ranks) and the offsets of ten recorded processes:
- the segments made before the communicator (`.to()`'s, S0-S21) are where the recording put them (the host's
  address map decides that; not modelled), and every free range among them is taken when the communicator is
  made (DDP's first broadcast): no later segment lands there;
- from then on each segment takes the lowest free range that fits (--smallest: the smallest, lowest of equals); the free ranges, relative to B (where the
  first broadcast buffer, S22, lands) are [B-10, B), [B, B+690) and [B+704, B+1208) MiB, plus any 32 MiB slot
  above them that the host's map left free (read from the recording: where a later segment sat above B+1208);
  when none fits, a new region rounded up to 32 MiB below B-704 MiB and below every earlier one;
- the driver's allocations at the first matrix product (cuBLAS's 64 MiB and a 2 MiB chunk, before S25) and the
  autograd thread's cuBLAS handle (64 MiB, after S48) take their place by the same rule;
- S34, the forward's 12 MiB segment that every process puts far below all others (beside NCCL's 14 pairs of
  10 + 2 MiB made meanwhile), is put below all others.
For each recording: the segments whose modelled address differs from the recorded one (relative to B), whether
the address order differs, and the figures ddp_placement.py's best-fit replay gives over the recording's
requests with the modelled order, mark by mark (= where they equal the recorded ones).
"""
import json
import re
import sys

import ddp_placement as dp

MB = 1 << 20
REGION = 32  # MiB
FREE_AFTER_COMMUNICATOR = [(-10, 0), (0, 690), (704, 1208)]  # MiB relative to B
REGIONS_BELOW = -704
FAR_SEGMENT = 34
TO_SEGMENTS = 22


def segments(trace):
    return [(e[3], e[1]) for e in trace if e[0] == "segment_alloc"]


def model(segs, rule="lowest"):
    """Modelled addresses (MiB relative to B) of segments TO_SEGMENTS.., and their failures to match."""
    base = segs[TO_SEGMENTS][0]
    rel = [((a - base) / MB, s / MB) for a, s in segs]
    gaps = [list(g) for g in FREE_AFTER_COMMUNICATOR]
    # 32 MiB slots above the free ranges that the recording shows free (the host's address map).
    for a, s in rel[TO_SEGMENTS:]:
        if FREE_AFTER_COMMUNICATOR[-1][1] <= a < 1e6:
            lo = a // REGION * REGION
            if not any(g[0] <= lo < g[1] for g in gaps):
                gaps.append([lo, lo + REGION])
    bottom = REGIONS_BELOW

    def take(size):
        nonlocal bottom
        fits = [g for g in gaps if g[1] - g[0] >= size]
        # lowest: the lowest free range that fits; smallest: the smallest, equal sizes by address
        key = (lambda g: g[0]) if rule == "lowest" else (lambda g: (g[1] - g[0], g[0]))
        if fits:
            g = min(fits, key=key)
            a = g[0]
            g[0] += size
            if g[0] == g[1]:
                gaps.remove(g)
            return a
        region = -(-size // REGION) * REGION
        bottom -= region
        if region > size:
            gaps.append([bottom + size, bottom + region])
        return bottom

    addr = {i: a for i, (a, _) in enumerate(rel[:TO_SEGMENTS])}
    for i in range(TO_SEGMENTS, len(rel)):
        size = rel[i][1]
        if i == 25:  # the first matrix product: cuBLAS's workspace and a 2 MiB chunk
            take(64)
            take(2)
        if i == FAR_SEGMENT:
            addr[i] = -1e9
            continue
        addr[i] = take(size)
        if i == 48:  # the autograd thread's first matrix product
            take(64)
    misses = [(i, rel[i][0], addr[i]) for i in range(TO_SEGMENTS, len(rel))
              if i != FAR_SEGMENT and addr[i] != rel[i][0]]
    return addr, rel, misses


def check(path, rule):
    trace, marks = dp.load(path)
    segs = segments(trace)
    addr, rel, misses = model(segs, rule)
    n = len(segs)
    order = sorted(range(n), key=lambda k: addr[k])
    recorded_order = sorted(range(n), key=lambda k: rel[k][0])
    seg_addr = [0] * n
    for pos, k in enumerate(order):
        seg_addr[k] = (pos + 1) << 32
    out, early, stuck = dp.what_if(trace, marks, seg_addr)
    want = {m["label"]: m for m in marks}
    print(f"# {path}: {n} segments, {len(misses)} placed elsewhere than recorded"
          + (f" (first: S{misses[0][0]} at B{misses[0][1]:+.0f}, model B{misses[0][2]:+.0f} MiB)" if misses else "")
          + f"; address order {'the same' if order == recorded_order else 'differs'}")
    line = []
    for label, (allocated, inactive) in out.items():
        m = want[label]
        same = (allocated, inactive) == (m["allocated"], m["inactive_split"])
        line.append(f"{label} {'=' if same else inactive}")
    print("  " + ", ".join(line) + (f"; segments made early from entry {early[0]}" if early else "")
          + (f"; stuck at entry {stuck}" if stuck is not None else ""))


def read_log(path):
    """Per `.to()` 20 MiB segment: its 12 MiB remainder and how much of it the foreign allocations hold."""
    segs, foreign, when = [], [], None
    for line in open(path):
        m = re.match(r"after (.*):", line)
        if m:
            when = m.group(1)
            continue
        m = re.match(r"\s+\+ (segment|FOREIGN)\s+([+-][\d.]+) MiB\s+size\s+([\d.]+) MiB", line)
        if m:
            (segs if m.group(1) == "segment" else foreign).append((float(m.group(2)), float(m.group(3)), when))
    first_wave = [f for f in foreign if f[2] == foreign[0][2]]
    sizes = {}
    for f in first_wave:
        sizes[f[1]] = sizes.get(f[1], 0) + 1
    print(f"# {path}: foreign allocations first seen {first_wave[0][2]}: {len(first_wave)}, "
          f"{sum(f[1] for f in first_wave):.2f} MiB, by size {dict(sorted(sizes.items()))}")
    for i, (a, s, w) in enumerate(segs[:TO_SEGMENTS]):
        end = a + (REGION if s == 20 else 160)
        if s not in (20, 148):
            continue
        held = sum(min(end, fa + fs) - max(a + s, fa) for fa, fs, _ in first_wave if fa < end and fa + fs > a + s)
        pieces = [fa for fa, fs, _ in first_wave if a + s <= fa < end]
        print(f"  S{i:<2} {a:+7.0f} ({w}): remainder {a + s:+.0f}..{end:+.0f} MiB, foreign {held:4.1f} MiB"
              + (f" at {pieces[0]:+.0f}..{pieces[-1] + 2:+.0f}" if pieces else ""))


def main(argv):
    if argv[:1] == ["--log"]:
        for path in argv[1:]:
            read_log(path)
        return
    rule = "lowest"
    if argv[:1] == ["--smallest"]:
        rule, argv = "smallest", argv[1:]
    for path in argv:
        check(path, rule)


if __name__ == "__main__":
    main(sys.argv[1:])
