"""Replays the segment_alloc / segment_free events of PyTorch's recorded traces (with addresses) through a
Python model of where the CUDA driver places cudaMalloc'ed segments (memory/virtual_address_space.h), and
reports per trace whether the ORDER of live segments by address (what best fit's ties depend on) is the
recorded one at every segment event, and how many pairs of live segments are in the wrong order (summed
over events; also only among segments made after cuBLAS loaded). Only segments of one pool share blocks, so
order is compared within a pool (2 MiB segments are the small pool's, the rest the large pool's).

  python3 tools/probes/segment_placement.py [--rule lowest|lifo|bestfit] [--load none|takeN|takeN+holeH]

--rule: which free gap inside the reserved regions a segment takes: the lowest-addressed (what
virtual_address_space.cpp does today), the most recently made (lifo), or the smallest (bestfit, ties newest).
--load: what loading cuBLAS does at the first matrix product: nothing, takeN (the driver's allocations for
the library take the N most recently made gaps), +holeH (and a new 32 MiB region below all, its lowest
H MiB left free).

Traces: tests/data/pytorch_probes/gpt2/*.events (lines `<action> <size> <address> <frame>`; embedding.events
has no addresses and is skipped) and tests/data/pytorch_probes/{t0,td}/*.events.json (marks of
[action, size, address] events).

Findings (session "vas", 2026-11-23; the C++ model was left as it was):
 - lowest and lifo pick the same gap whenever regions only go down (as in the model), so they score alike
   here; lifo is what the driver does: in gpt2/small*.events the forward's 12 MiB segments took 18 leftover
   gaps of the model's 20 MiB regions in exactly the reverse of the order the gaps were made, across
   addresses that were not in order.
 - take2 explains the small-pool order in gpt2/tiny and t0/x_tiny_transformer_adamw completely (all pairs),
   and in tiny_default_workspace and td/x_tiny_transformer_adamw all but the 32 MiB workspace segments
   (never freed, so they never hold a tie); in gpt2/small* exactly the leftovers of the two newest 20 MiB
   regions were never used again after the first product. In the C++ (tried: LIFO + take2, triggered at
   the first product's workspace or before its output) it makes x_mlp_sgd_momentum_mse with default
   workspaces exact at every mark (a known exception today) but breaks x_tiny_transformer_adamw with
   default workspaces (exact today): there the driver's placement had already changed at the first
   layer_norm of block0, before any matrix product, so the trigger is not cuBLAS alone. It is not the
   random fills of the data either: in GPT-2 small the two gaps taken are those of the newest 20 MiB
   regions, the newest made by the embedding's output after torch.randint ran (loading before that
   segment scores worse: 6677 vs 5567 and 6401 vs 5329 pairs inverted among later segments). What fits
   every trace: the first kernel that is neither a copy nor a random fill (the embedding in the GPT-2 and
   tiny-transformer programs, the first addmm in x_mlp), which is where to hook library_loaded() next.
 - Not explained by any rule tried: t0/td x_mlp's post-load 2 MiB segments descend (T-606 then T-610;
   T-670, T-708, T-704); the cuBLASLt workspace's 2 MiB segment in gpt2/small_default_workspace sits in a
   hole 164 MiB below every region (take2 puts it in the newest 12 MiB gap, which shifts the 12 MiB
   segments by one: the segment made after the 20 MiB one lands below it from segment #58 on, the
   tie the default-workspace GPT-2 test excepts; +hole8..12 fixes that trace but breaks the tiny ones);
   and the 20 MiB regions of GPT-2 small's model copy come out of order, differently in two runs of the
   same program (gpt2/small.events vs small_default_workspace.events, before cuBLAS loads): no
   deterministic rule can match both.
"""
import argparse, glob, json, os

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data", "pytorch_probes")


# The mark in which each extra program runs its first matrix product (cuBLAS loads there).
FIRST_PRODUCT_MARK = {"x_mlp_sgd_momentum_mse": "loss0", "x_tiny_transformer_adamw": "block0"}


def load(path):
    """([(action, size, address)] of the segment events, index of the first one after cuBLAS loaded), or
    None when the trace has no addresses. cuBLAS loads at the first matrix product: in the gpt2 traces the
    first event from linear.py; in the extra programs' the start of FIRST_PRODUCT_MARK's mark."""
    out, loaded = [], None
    if path.endswith(".json"):
        name = os.path.basename(path).split(".")[0]
        for mark in json.load(open(path)):
            if mark["label"] == FIRST_PRODUCT_MARK[name]:
                loaded = len(out)
            for e in mark["events"]:
                if e[0].startswith("segment_"):
                    out.append((e[0], e[1], e[2]))
    else:
        for line in open(path):
            p = line.split()
            if not p or p[0] == "#":
                continue
            if loaded is None and len(p) > 3 and p[3].startswith("linear.py"):
                loaded = len(out)
            if not p[0].startswith("segment_"):
                continue
            if len(p) < 3 or not p[2].startswith("0x"):
                return None
            out.append((p[0], int(p[1]), int(p[2], 16)))
    return out, loaded


class Space:
    """The model: regions rounded up to 32 MiB reserved top-down; an allocation takes a free gap inside the
    regions when one fits (which one: `rule`), else a new region below all earlier ones, whose rest becomes
    a gap. A fresh process has gaps of 2 MiB at T and 24 MiB at T + 74 MiB; the first region ends at
    T - 414 MiB."""

    def __init__(self, rule, load_rule, T=1 << 44):
        self.rule = rule
        self.load_rule = load_rule
        self.gaps = []  # [address, size, stamp]: stamp = when the gap was made (LIFO order)
        self.clock = 0
        self._gap(T + 74 * MiB, 24 * MiB)
        self._gap(T, 2 * MiB)  # the newer: a fresh process's first 2 MiB segment lands at T
        self.bottom = T - 414 * MiB

    def _gap(self, address, size, stamp=None):
        self.clock += 1
        self.gaps.append([address, size, self.clock if stamp is None else stamp])

    def allocate(self, size):
        fits = [g for g in self.gaps if g[1] >= size]
        if fits:
            if self.rule == "lowest":
                g = min(fits, key=lambda g: g[0])
            elif self.rule == "bestfit":  # the smallest gap that fits, the newest of equal ones
                g = min(fits, key=lambda g: (g[1], -g[2]))
            else:  # lifo: the most recently made gap
                g = max(fits, key=lambda g: (g[2], -g[0]))
            address = g[0]
            g[0] += size
            g[1] -= size
            if g[1] == 0:
                self.gaps.remove(g)
            return address
        region = -(-size // (32 * MiB)) * 32 * MiB
        self.bottom -= region
        if region > size:
            self._gap(self.bottom + size, region - size)
        return self.bottom

    def library_loaded(self):
        """cuBLAS loads: the driver's own allocations for it take free gaps."""
        if self.load_rule == "none":
            return
        rule, _, hole = self.load_rule.partition("+hole")
        if rule.startswith("take"):  # take<N>: the N most recently made gaps, whole
            n = int(rule[4:])
            for g in sorted(self.gaps, key=lambda g: -g[2])[:n]:
                self.gaps.remove(g)
        if hole:  # +hole<H>: and a new 32 MiB region below all, its lowest H MiB left free
            self.bottom -= 32 * MiB
            self._gap(self.bottom, int(hole) * MiB)

    def release(self, address, size):
        # merge with neighbours; the merged gap counts as new
        lo, hi = address, address + size
        for g in list(self.gaps):
            if g[0] + g[1] == lo:
                lo = g[0]; self.gaps.remove(g)
            elif g[0] == hi:
                hi = g[0] + g[1]; self.gaps.remove(g)
        self._gap(lo, hi - lo)


def check(events, loaded, rule, load_rule):
    """(number of segment events, events where the live order differs, first such event's index, detail,
    pairs of live same-pool segments in the wrong order summed over events, pairs in all)."""
    space = Space(rule, load_rule)
    live = {}  # recorded address -> model address
    sizes = {}
    bad, first, detail = 0, None, ""
    inverted = pairs = inverted_after = pairs_after = 0
    made = {}  # recorded address -> index of its segment_alloc
    for i, (action, size, address) in enumerate(events):
        if i == loaded:
            space.library_loaded()
        if action == "segment_alloc":
            live[address] = space.allocate(size)
            made[address] = i
            sizes[address] = size
        else:
            space.release(live.pop(address), size)
            sizes.pop(address)
        # Only segments of one pool share blocks (2 MiB segments are the small pool's, the rest the large
        # pool's), so only the order within a pool can decide a tie.
        pool = [a for a in live if (sizes[a] == 2 * MiB) == (size == 2 * MiB)]
        want = sorted(pool, key=lambda a: a)
        got = sorted(pool, key=lambda a: live[a])
        rank = {a: k for k, a in enumerate(got)}
        for x in range(len(want)):
            for y in range(x + 1, len(want)):
                wrong = rank[want[x]] > rank[want[y]]
                pairs += 1
                inverted += wrong
                if loaded is not None and min(made[want[x]], made[want[y]]) >= loaded:
                    pairs_after += 1
                    inverted_after += wrong
        if want != got:
            bad += 1
            if first is None:
                first = i
                new = address
                rank_want, rank_got = want.index(new) if new in live else -1, got.index(new) if new in live else -1
                detail = (f"segment #{i} ({size // MiB} MiB) is {rank_want}th from the bottom in PyTorch, "
                          f"{rank_got}th in the model")
    return len(events), bad, first, detail, inverted, pairs, inverted_after, pairs_after


def traces():
    paths = sorted(glob.glob(os.path.join(DATA, "gpt2", "*.events")))
    paths += sorted(glob.glob(os.path.join(DATA, "t0", "*.events.json")))
    paths += sorted(glob.glob(os.path.join(DATA, "td", "*.events.json")))
    for p in paths:
        loaded = load(p)
        if loaded is not None:
            yield (os.path.relpath(p, DATA),) + loaded


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rule", default="lifo", choices=["lowest", "lifo", "bestfit"])
    ap.add_argument("--load", default="take2", help="none | takeN")
    args = ap.parse_args()
    for name, ev, loaded in traces():
        n, bad, first, detail, inverted, pairs, inverted_after, pairs_after = check(ev, loaded, args.rule, args.load)
        status = "order matches at every event" if bad == 0 else f"differs at {bad}/{n} events, first #{first}: {detail}"
        print(f"{name:45s} {n:4d} segment events, cuBLAS from #{loaded}; pairs inverted {inverted}/{pairs}, "
              f"both made after cuBLAS loaded {inverted_after}/{pairs_after}; {status}")
