#!/usr/bin/env python3
"""Replays an allocator trace that carries addresses (ddp_probe.py's recordings with a fourth field, or
bytegrad's BYTEGRAD_DDP_TRACE files) through PyTorch's block rules and says where each request went.

  python3 ddp_placement.py TRACE [--upto MARK] [--blocks]          one trace: segments, then every tie
  python3 ddp_placement.py A B [--upto MARK]                       two traces of one program: the first
                                                                   requests that landed in different places
  python3 ddp_placement.py REC --layout L [--place Sk<Sj|Sk>Sj ...] [--upto MARK]
      what if REC's requests had met L's segment layout (each segment k of REC at the address-order place
      of segment k of L), with segment k moved just below (<) or above (>) segment j: best fit replayed
      over REC's requests, allocated and inactive_split at each mark (segments made where REC made them,
      so only up to where the layouts would make them at other moments: a segment made while a free block
      fits is flagged)

TRACE is a recording (.json, with "marks" and a "trace" of [action, size, stream, address]) or a text file of
lines `action size stream address [tag]` (bytegrad's: tests/distributed/ddp_programs.cpp's run_alone with
BYTEGRAD_DDP_TRACE=PREFIX). Segments are named by creation order (S0, S1, ...), so two processes' layouts
compare even though their addresses differ. For every request the replay checks that the block the trace
used is the one best fit gives (the smallest free block of the pool and stream that fits, equal sizes by
address) and lists the ties: requests with equal candidates in more than one segment, with the segment that
won and the others, in address order. Marks are found in a recording's trace by their allocated and reserved
bytes and segment count, and the replayed inactive_split is checked against the recorded one.
"""
import json
import sys

MB = 1 << 20
SMALL = MB  # requests up to this go to the small pool


def round_size(size):
    return 512 if size < 512 else (size + 511) // 512 * 512


def load(path):
    if path.endswith(".json"):
        doc = json.load(open(path))
        return doc["trace"], doc["marks"]
    trace = []
    for line in open(path):
        f = line.split()
        if not f:
            continue
        trace.append([f[0], int(f[1]), int(f[2]), int(f[3])])
    return trace, None


class Replay:
    def __init__(self):
        self.segments = []  # [address, size, pool, stream]
        self.blocks = {}  # address -> [size, free, segment index]
        self.allocated = 0
        self.reserved = 0
        self.requests = []  # per alloc: dict

    def segment_of(self, addr):
        for i, (a, s, _, _) in enumerate(self.segments):
            if a <= addr < a + s:
                return i
        raise ValueError(f"address {addr:#x} in no segment")

    def free_blocks(self, pool, stream):
        return [(b[0], a) for a, b in self.blocks.items()
                if b[1] and self.segments[b[2]][2] == pool and self.segments[b[2]][3] == stream]

    def segment_alloc(self, size, stream, addr, pool):
        self.segments.append([addr, size, pool, stream])
        self.blocks[addr] = [size, True, len(self.segments) - 1]
        self.reserved += size

    def alloc(self, index, size, stream, addr, new_segment):
        need = round_size(size)
        pool = "small" if need <= SMALL else "large"
        host = None
        for a, b in self.blocks.items():
            if b[1] and a <= addr < a + b[0]:
                host = a
        if host is None or host != addr:
            raise ValueError(f"entry {index}: alloc {size} at {addr:#x} is not at the start of a free block")
        cands = [c for c in self.free_blocks(pool, stream) if c[0] >= need]
        best = min(cands)
        fits = sorted(c for c in cands if c[0] == best[0])
        seg = self.blocks[addr][2]
        tie_segments = sorted({self.blocks[a][2] for _, a in fits})
        self.requests.append({
            "index": index, "size": size, "block": need, "pool": pool, "address": addr, "segment": seg,
            "offset": addr - self.segments[seg][0], "took": self.blocks[addr][0], "new_segment": new_segment,
            "best": best[1] == addr, "candidates": fits, "tie_segments": tie_segments,
        })
        block = self.blocks[addr]
        rest = block[0] - need
        split = rest >= 512 if pool == "small" else rest > SMALL
        if split:
            self.blocks[addr + need] = [rest, True, block[2]]
            block[0] = need
        block[1] = False
        self.allocated += block[0]

    def free(self, addr):
        block = self.blocks[addr]
        block[1] = True
        self.allocated -= block[0]
        # merge with the free neighbours in the same segment
        prev = [a for a, b in self.blocks.items() if b[1] and b[2] == block[2] and a + b[0] == addr]
        nxt = addr + block[0]
        if nxt in self.blocks and self.blocks[nxt][1] and self.blocks[nxt][2] == block[2]:
            block[0] += self.blocks.pop(nxt)[0]
        if prev:
            self.blocks[prev[0]][0] += self.blocks.pop(addr)[0]

    def inactive_split(self):
        return sum(b[0] for a, b in self.blocks.items() if b[1] and b[0] != self.segments[b[2]][1])

    def state(self):
        return (self.allocated, self.reserved, len(self.segments))


def replay(trace, marks=None, upto=None):
    r = Replay()
    at = {}  # mark label -> trace index after which it was taken
    want = [m for m in marks or []]
    mi = 0
    pending_segment = None

    def check_marks(i):
        nonlocal mi
        while mi < len(want) and (want[mi]["allocated"], want[mi]["reserved"], want[mi]["segments"]) == r.state():
            at[want[mi]["label"]] = (i, r.inactive_split())
            mi += 1

    check_marks(-1)
    for i, e in enumerate(trace):
        action, size, stream, addr = e[0], e[1], e[2], e[3]
        if action == "segment_alloc":
            pending_segment = (size, stream, addr)
            continue
        if action == "alloc":
            new = False
            if pending_segment:
                ssize, sstream, saddr = pending_segment
                pool = "small" if ssize == 2 * MB and round_size(size) <= SMALL else "large"
                r.segment_alloc(ssize, sstream, saddr, pool)
                pending_segment = None
                new = True
            r.alloc(i, size, stream, addr, new)
        elif action == "free_completed":
            r.free(addr)
        check_marks(i)
        if upto and upto in at:
            break
    return r, at


def describe_one(path, upto, show_blocks):
    trace, marks = load(path)
    r, at = replay(trace, marks, upto)
    print(f"# {path}")
    recorded = {m["label"]: m["inactive_split"] for m in marks or []}
    for label, (i, inactive) in at.items():
        same = "" if recorded.get(label) == inactive else f" (RECORDED {recorded.get(label)})"
        print(f"mark {label}: after entry {i}, inactive_split {inactive}{same}")
    print(f"{len(r.segments)} segments (creation order: address, size, pool):")
    for k, (a, s, p, st) in enumerate(r.segments):
        print(f"  S{k}: {a:#x} {s} {p} stream {st}")
    bad = [q for q in r.requests if not q["best"]]
    print(f"{len(r.requests)} requests, {len(bad)} not best fit by address")
    for q in bad[:20]:
        print(f"  NOT BEST entry {q['index']} size {q['size']} -> S{q['segment']}+{q['offset']}, candidates "
              f"{[(s, hex(a)) for s, a in q['candidates']]}")
    ties = [q for q in r.requests if len(q["tie_segments"]) > 1]
    print(f"{len(ties)} ties between segments:")
    for q in ties:
        order = sorted(q["tie_segments"], key=lambda s: r.segments[s][0])
        print(f"  entry {q['index']} size {q['size']} block {q['block']} ({q['took']} free): S{q['segment']}"
              f"+{q['offset']} of {['S%d' % s for s in order]} (address order)")
    if show_blocks:
        for k, (a, s, p, st) in enumerate(r.segments):
            bl = sorted((ba - a, b[0], "free" if b[1] else "used") for ba, b in r.blocks.items() if b[2] == k)
            print(f"  S{k} {p}: {bl}")
    return r, at


def compare(path_a, path_b, upto):
    ta, ma = load(path_a)
    tb, mb = load(path_b)
    ra, _ = replay(ta, ma, upto)
    rb, _ = replay(tb, mb or ma, upto)
    n = min(len(ra.requests), len(rb.requests))
    shown = 0
    for k in range(n):
        a, b = ra.requests[k], rb.requests[k]
        if a["size"] != b["size"]:
            print(f"request {k}: sizes differ ({a['size']} at entry {a['index']}, {b['size']} at entry {b['index']})")
            break
        if (a["segment"], a["offset"]) != (b["segment"], b["offset"]):
            def side(r, q):
                order = sorted(q["tie_segments"], key=lambda s: r.segments[s][0])
                return (f"S{q['segment']}+{q['offset']} (free {q['took']}; equal candidates in "
                        f"{['S%d' % s for s in order]} by address)")
            print(f"request {k} (entries {a['index']}/{b['index']}) size {a['size']}: A {side(ra, a)}; B {side(rb, b)}")
            shown += 1
            if shown >= 12:
                break
    print(f"compared {n} requests; A has {len(ra.requests)}, B {len(rb.requests)}")


def what_if(trace, marks, seg_addr, upto=None):
    """Best fit over the trace's requests with segment k at seg_addr[k]: {mark: (allocated, inactive_split)},
    the entries where a segment was made although a free block fit, and the entry where nothing fit and the
    recording made no segment (None if none)."""
    r_marks = replay(trace, marks, upto)[1]
    stops = {}
    for label, (i, _) in r_marks.items():
        stops.setdefault(i, []).append(label)
    segs, blocks, ident, pending, early, out = [], {}, {}, None, [], {}
    for i, e in enumerate(trace):
        action = e[0]
        if action == "segment_alloc":
            pending = e
        elif action == "alloc":
            need = round_size(e[1])
            pool = "small" if need <= SMALL else "large"
            cands = [(b[0], a) for a, b in blocks.items()
                     if b[1] and segs[b[2]][2] == pool and segs[b[2]][3] == e[2] and b[0] >= need]
            if pending:
                k = len(segs)
                segs.append((seg_addr[k], pending[1], pool, e[2]))
                blocks[seg_addr[k]] = [pending[1], True, k]
                pending = None
                if cands:
                    early.append(i)
                addr = seg_addr[k]
            elif cands:
                addr = min(cands)[1]
            else:
                return out, early, i  # nothing fits where the recording made no segment
            b = blocks[addr]
            rest = b[0] - need
            if rest >= 512 if pool == "small" else rest > SMALL:
                blocks[addr + need] = [rest, True, b[2]]
                b[0] = need
            b[1] = False
            ident[e[3]] = addr
        elif action == "free_completed":
            addr = ident.pop(e[3])
            b = blocks[addr]
            b[1] = True
            nxt = addr + b[0]
            if nxt in blocks and blocks[nxt][1] and blocks[nxt][2] == b[2]:
                b[0] += blocks.pop(nxt)[0]
            for pa, pb in blocks.items():
                if pb[1] and pb[2] == b[2] and pa + pb[0] == addr:
                    pb[0] += blocks.pop(addr)[0]
                    break
        for label in stops.get(i, []):
            out[label] = (sum(b[0] for b in blocks.values() if not b[1]),
                          sum(b[0] for b in blocks.values() if b[1] and b[0] != segs[b[2]][1]))
        if upto in stops.get(i, []):
            break
    return out, early, None


def layout_order(trace, count):
    """Segment indices 0..count-1 of a trace, lowest address first."""
    addrs = [e[3] for e in trace if e[0] == "segment_alloc"][:count]
    return sorted(range(len(addrs)), key=lambda k: addrs[k])


def main_what_if(rec, layout, places, upto):
    trace, marks = load(rec)
    count = sum(1 for e in trace if e[0] == "segment_alloc")
    order = layout_order(load(layout)[0], count)
    if len(order) < count:
        order += list(range(len(order), count))  # segments the layout never made: above the others
    for place in places:
        below = "<" in place
        k, j = (int(x.strip().lstrip("S")) for x in place.split("<" if below else ">"))
        order.remove(k)
        order.insert(order.index(j) + (0 if below else 1), k)
    seg_addr = [0] * count
    for pos, k in enumerate(order):
        seg_addr[k] = (pos + 1) << 32  # apart enough that no segment reaches the next
    out, early, stuck = what_if(trace, marks, seg_addr, upto)
    recorded = {m["label"]: m for m in marks}
    print(f"# {rec}'s requests over {layout}'s layout" + (f", {' '.join(places)}" if places else ""))
    print("address order: " + " ".join(f"S{k}" for k in order))
    for label, (allocated, inactive) in out.items():
        m = recorded[label]
        same = "same" if (allocated, inactive) == (m["allocated"], m["inactive_split"]) else "differs"
        print(f"mark {label}: allocated {allocated} inactive_split {inactive}   (recorded {m['allocated']} "
              f"{m['inactive_split']}: {same})")
    if early:
        print(f"from entry {early[0]} on segments are made where a free block fits: later marks are not this layout's")
    if stuck is not None:
        print(f"stopped at entry {stuck}: nothing fits where the recording made no segment")


def main(argv):
    upto = None
    if "--upto" in argv:
        k = argv.index("--upto")
        upto = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    show_blocks = "--blocks" in argv
    argv = [a for a in argv if a != "--blocks"]
    layout, places = None, []
    while "--layout" in argv or "--place" in argv:
        k = argv.index("--layout") if "--layout" in argv else argv.index("--place")
        if argv[k] == "--layout":
            layout = argv[k + 1]
        else:
            places.append(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    if layout:
        main_what_if(argv[0], layout, places, upto)
    elif len(argv) == 1:
        describe_one(argv[0], upto, show_blocks)
    elif len(argv) == 2:
        compare(argv[0], argv[1], upto)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
