#!/usr/bin/env python3
"""Where PyTorch's segments sat against where bytegrad's placement model put them, segment by segment.

  python3 tools/probes/compare_segments.py PYTORCH_EVENTS BYTEGRAD_MEMORY_VIZ.json

PYTORCH_EVENTS: a `.segments` file of gpt2_generated.py --segments, or any `.events[.gz]` file in
gpt2_memory_events.py's line format with addresses (`segment_alloc SIZE 0xADDR FRAME`, `# mark LABEL ...`).
BYTEGRAD_MEMORY_VIZ.json: `bytegrad-estimate gpt2 ... --memory-viz FILE` of the same program on meta (its
segment addresses are the placement model's, memory/virtual_address_space.h).

Best fit breaks ties between equal free blocks by address, so what decides a figure is the order of the
segments of one pool (small: 2 MiB segments for requests up to 1 MiB; large: the rest), not their absolute
addresses. The segments are matched by creation order (the two sides make the same requests, so the same
segments in the same order: the script stops with a message where the sizes differ). Prints each segment's
address relative to the first one on both sides and the phase (mark) it was made in, then, for each pool,
the pairs of segments alive at the same time whose order differs, the first few of them by name.
"""
import gzip
import json
import sys

MiB = 1 << 20


def pytorch_segments(path):
    """[(size, address, mark, frame, freed_at_index or None)] in creation order."""
    opener = gzip.open if path.endswith(".gz") else open
    segments, alive, mark, events = [], {}, "start", 0
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("# mark"):
                mark = line.split()[2]
                continue
            if line.startswith("#") or not line.strip():
                continue
            parts = line.split(" ", 3)
            action, size, address = parts[0], int(parts[1]), int(parts[2], 16)
            frame = parts[3].strip() if len(parts) > 3 else "-"
            events += 1
            if action == "segment_alloc":
                alive[address] = len(segments)
                segments.append(dict(size=size, address=address, mark=mark, frame=frame, freed=None, made=events))
            elif action == "segment_free" and address in alive:
                segments[alive.pop(address)]["freed"] = events
            elif action == "alloc" and segments and segments[-1]["made"] == events - 1:
                segments[-1]["request"] = size
    return segments


def bytegrad_segments(path):
    trace = json.load(open(path))["device_traces"][0]
    segments, alive = [], {}
    for n, e in enumerate(trace, 1):
        if e["action"] == "segment_alloc":
            alive[e["addr"]] = len(segments)
            name = e["frames"][0]["name"] if e.get("frames") else "-"
            segments.append(dict(size=e["size"], address=e["addr"], frame=name, freed=None, made=n))
        elif e["action"] == "segment_free" and e["addr"] in alive:
            segments[alive.pop(e["addr"])]["freed"] = n
        elif e["action"] == "alloc" and segments and segments[-1]["made"] == n - 1:
            segments[-1]["request"] = e["size"]
    return segments


def pool_of(segment):
    return "small" if segment["size"] == 2 * MiB and segment.get("request", 0) <= MiB else "large"


def overlap(a, b):
    """Whether two segments (same side) were alive at the same time."""
    a_end = a["freed"] if a["freed"] is not None else float("inf")
    b_end = b["freed"] if b["freed"] is not None else float("inf")
    return a["made"] < b_end and b["made"] < a_end


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    want, got = pytorch_segments(argv[0]), bytegrad_segments(argv[1])
    n = min(len(want), len(got))
    for i in range(n):
        if want[i]["size"] != got[i]["size"]:
            print(f"segment {i}: PyTorch made {want[i]['size']} bytes, bytegrad {got[i]['size']}: the requests "
                  "differ from here, compare the events first (compare_gpt2_events.py)")
            n = i
            break
    if len(want) != len(got):
        print(f"PyTorch made {len(want)} segments, bytegrad {len(got)}: comparing the first {n}")
    p0, b0 = want[0]["address"], got[0]["address"]
    print(f"{'#':>4} {'pool':>5} {'MiB':>5} {'PyTorch':>10} {'bytegrad':>10}  mark: PyTorch's frame")
    for i in range(n):
        w, g = want[i], got[i]
        print(f"{i:4} {pool_of(w):>5} {w['size'] / MiB:5.0f} {(w['address'] - p0) / MiB:10.1f} "
              f"{(g['address'] - b0) / MiB:10.1f}  {w['mark']}: {w['frame']}")
    for pool in ("small", "large"):
        index = [i for i in range(n) if pool_of(want[i]) == pool]
        pairs = [(i, j) for a, i in enumerate(index) for j in index[a + 1:]
                 if overlap(want[i], want[j]) and overlap(got[i], got[j])]
        wrong = [(i, j) for i, j in pairs
                 if (want[i]["address"] < want[j]["address"]) != (got[i]["address"] < got[j]["address"])]
        print(f"{pool} pool: {len(index)} segments, {len(pairs)} pairs alive together, {len(wrong)} in the other "
              f"order" + (": " + ", ".join(f"{i}/{j}" for i, j in wrong[:12]) if wrong else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
