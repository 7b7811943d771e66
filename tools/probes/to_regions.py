#!/usr/bin/env python3
"""Where `.to()`'s segments went in each run of the generated sweep, against the first small segment A.

  python3 tools/probes/to_regions.py SEGMENTS_DIR [CONFIGS_JSON]

SEGMENTS_DIR: x0/ and xd/ with `<case>.segments[.gz]` files of gpt2_generated.py --segments (the H100
recording is docs/evidence/generated_segments/). For every `.to()` segment not in the driver's first gaps
([A, A + 98 MiB): A itself and the 24 MiB gap at A + 74 MiB) it prints one letter in creation order:
  A  above A + 98 MiB: a hole in the host's address map (between malloc arenas or where freed host memory was);
  H  in [A - 414 MiB, A): the hole at the top of the stretch;
  B  below A - 414 MiB: a new region below the stretch.
and the case's attention (the slow one registers a causal-mask buffer per layer on the CPU; SDPA does not).
The placement model (memory/virtual_address_space.h) puts every such region below A - 414 MiB and the stretch
below all of them, which gives the order of "A" runs; "B" runs have the stretch above them. The model follows
"A" where the program's host work left holes in the address map (slow attention) and "B" where it left none
(SDPA): CachingAllocator::set_host_map_holes; EarlyRegions::reversed gives the other (memory/raw_memory.h).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_segments  # noqa: E402

MiB = 1 << 20


def letters(path):
    segments = compare_segments.pytorch_segments(path)
    a = next(s["address"] for s in segments if s["size"] == 2 * MiB)
    out = ""
    for s in segments:
        if s["mark"] != "start":
            continue
        r = (s["address"] - a) // MiB
        if 0 <= r < 98:
            continue
        out += "A" if r > 0 else ("H" if r >= -414 else "B")
    return out or "-"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    folder = argv[0]
    configs = argv[1] if len(argv) > 1 else os.path.join(HERE, "..", "..", "tests", "data", "pytorch_probes", "gpt2",
                                                         "generated", "configs.json")
    cfg = {c["name"]: c["config"] for c in json.load(open(configs))["cases"]}
    names = sorted({f.split(".segments")[0] for f in os.listdir(os.path.join(folder, "x0")) if ".segments" in f})
    for name in names:
        row = []
        for sub in ("x0", "xd"):
            for ext in (".segments.gz", ".segments"):
                p = os.path.join(folder, sub, name + ext)
                if os.path.exists(p):
                    row.append(letters(p))
                    break
            else:
                row.append("?")
        att = cfg.get(name, {}).get("attention", "?")
        print(f"{name:56s} x0 {row[0]:28s} xd {row[1]:28s} attention {att}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
