#!/usr/bin/env python3
"""Where the generated sweep's segments land around the first small segment (issue 31's placement question).

  python3 tools/probes/segment_stretch.py SEGMENTS_DIR [FLOOR_JSON]

SEGMENTS_DIR: a folder with x0/ and xd/ holding `<case>.segments[.gz]` files of gpt2_generated.py --segments
(docs/evidence/generated_segments/ keeps the H100 recording of seed 31, 64 cases). FLOOR_JSON: the generated
sweep's floor.json (its exact_runs: which runs bytegrad is exact on today; by default the one in
tests/data/pytorch_probes/gpt2/generated/).

Addresses are taken relative to A, the process's first small-pool segment (PyTorch's first 2 MiB segment for
requests up to 1 MiB), which the placement model anchors on (memory/virtual_address_space.h: the first region
ends at A - 414 MiB). For each run it prints where `.to()`'s segments went (inside [A - 414 MiB, A): "in",
below A - 414 MiB: "below", above A: "above", which is the 24 MiB gap at A + 74 MiB or holes between host
malloc arenas), the largest `.to()` segment and its place, and the first segment made after `.to()` that
lands in [A - 414 MiB, A) with the mark before it and its offset. Then counts by pattern:
  stretch: .to() put nothing in [A - 414, A) and the first later segment there sits at A - 414 MiB plus at
           most the driver's own first allocations (10 MiB kernel stack, 64 MiB cuBLAS handle): the whole
           stretch was free for the forward, lowest address first;
  top:     .to() put a segment right below A (A - size): the stretch's top was free already during .to().
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_segments  # noqa: E402

MiB = 1 << 20
STRETCH = 414  # MiB below A


def anchor(segments):
    return next(s["address"] for s in segments if s["size"] == 2 * MiB and s.get("request", 0) <= MiB)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    folder = argv[0]
    floor_path = argv[1] if len(argv) > 1 else os.path.join(HERE, "..", "..", "tests", "data", "pytorch_probes",
                                                             "gpt2", "generated", "floor.json")
    exact = set(json.load(open(floor_path))["exact_runs"]) if os.path.exists(floor_path) else set()
    counts = {}
    for sub in ("x0", "xd"):
        d = os.path.join(folder, sub)
        if not os.path.isdir(d):
            print(f"segment_stretch: no folder {d}", file=sys.stderr)
            return 2
        for f in sorted(os.listdir(d)):
            if not (f.endswith(".segments") or f.endswith(".segments.gz")):
                continue
            name = f.split(".segments")[0]
            segments = compare_segments.pytorch_segments(os.path.join(d, f))
            a = anchor(segments)

            def rel(s):
                return (s["address"] - a) // MiB

            moved = [s for s in segments if s["mark"] == "start"]
            later = [s for s in segments if s["mark"] != "start"]
            inside = [s for s in moved if -STRETCH <= rel(s) < 0]
            below = sum(1 for s in moved if rel(s) < -STRETCH)
            above = sum(1 for s in moved if rel(s) > 0)
            big = max(moved, key=lambda s: s["size"])
            first = next((s for s in later if -STRETCH <= rel(s) < 0), None)
            if inside:
                pattern = "top"
            elif first is not None and rel(first) <= -STRETCH + 74:
                pattern = "stretch"
            else:
                pattern = "other"
            key = f"{name}/{sub}"
            c = counts.setdefault(pattern, [0, 0])
            c[0] += 1
            c[1] += key in exact
            print(f"{key:62} {'exact' if key in exact else '     '} {pattern:7} .to() {len(moved):2} segments "
                  f"{sum(s['size'] for s in moved) // MiB:4} MiB in {len(inside)} below {below:2} above {above:2}; "
                  f"largest {big['size'] // MiB:3} MiB at {rel(big):+5}; first later in stretch: " +
                  (f"{rel(first):+5} after mark {first['mark']}" if first else "none"))
    for pattern, (n, e) in sorted(counts.items()):
        print(f"{pattern}: {n} runs, {e} of them exact today")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
