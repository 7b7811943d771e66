#!/usr/bin/env python3
"""Records, in real PyTorch on a CUDA GPU, what the caching allocator does with torch.cuda.MemPool (issue 26).

Usage: python3 mempool_probe.py OUT.jsonl [PROGRAM...]
Each program runs in a fresh process (a clean allocator) and writes one JSON object:
  {"program", "marks": [{"label", "allocated", "reserved", "active", "inactive_split", "num_sync_all_streams",
   "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
   "segments": [[pool, stream, size, allocated_size, is_expandable, blocks], ...],
   "pools": {name: {"use_count", "segments"}}}], "errors": [text, ...],
   "trace": [[action, offset, size, stream], ...]}
Pools are numbered by first appearance in a snapshot (0: the default pool), streams likewise (0: default).
Offsets are relative to the lowest segment address the program saw.
"""
import json
import subprocess
import sys

import torch

DEV = "cuda"
MiB = 1 << 20


class Recorder:
    def __init__(self):
        self.marks = []
        self.errors = []
        self.pools = {}  # name -> MemPool, for use_count and snapshot per mark
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=1000000, context=None, stacks="python")
        self.start = len(torch.cuda.memory._snapshot()["device_traces"][0])

    def watch(self, name, pool):
        self.pools[name] = pool

    def forget(self, name):
        self.pools.pop(name, None)

    def mark(self, label):
        st = torch.cuda.memory_stats()
        segs = torch.cuda.memory._snapshot()["segments"]
        self.marks.append({
            "label": label,
            "allocated": st.get("allocated_bytes.all.current", 0),
            "reserved": st.get("reserved_bytes.all.current", 0),
            "active": st.get("active_bytes.all.current", 0),
            "inactive_split": st.get("inactive_split_bytes.all.current", 0),
            "num_sync_all_streams": st.get("num_sync_all_streams", 0),
            "num_alloc_retries": st.get("num_alloc_retries", 0),
            "num_ooms": st.get("num_ooms", 0),
            "num_device_alloc": st.get("num_device_alloc", 0),
            "num_device_free": st.get("num_device_free", 0),
            "segments": [[list(s["segment_pool_id"]), s["stream"], s["total_size"], s["allocated_size"],
                          s["is_expandable"], len(s["blocks"])] for s in sorted(segs, key=lambda s: s["address"])],
            "pools": {name: {"use_count": p.use_count(), "segments": len(p.snapshot())}
                      for name, p in self.pools.items()},
        })

    def error(self, e):
        self.errors.append(str(e).split(" If reserved but unallocated")[0])

    def finish(self, program):
        trace = torch.cuda.memory._snapshot()["device_traces"][0][self.start:]
        torch.cuda.memory._record_memory_history(enabled=None)
        pools = {(0, 0): 0}
        streams = {0: 0}
        for m in self.marks:
            for seg in m["segments"]:
                pools.setdefault(tuple(seg[0]), len(pools))
                streams.setdefault(seg[1], len(streams))
        for e in trace:
            streams.setdefault(e.get("stream", 0), len(streams))
        for m in self.marks:
            for seg in m["segments"]:
                seg[0] = pools[tuple(seg[0])]
                seg[1] = streams[seg[1]]
        addrs = [e["addr"] for e in trace if e["action"] in ("segment_alloc", "segment_map")]
        base = min(addrs) if addrs else 0
        events = [[e["action"], e.get("addr", 0) - base if e.get("addr") else 0, e.get("size", 0),
                   streams[e.get("stream", 0)]] for e in trace if e["action"] != "snapshot"]
        return {"program": program, "marks": self.marks, "errors": self.errors, "trace": events}


PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


def limit_memory(extra_mib):
    """Caps the allocator at what it holds now plus extra_mib (1 MiB of headroom against rounding)."""
    total = torch.cuda.get_device_properties(0).total_memory
    allowed = torch.cuda.memory_reserved() + (extra_mib + 1) * MiB
    torch.cuda.set_per_process_memory_fraction(allowed / total)


@program
def pool_basic(r):
    """A pool's blocks serve only the pool; the default pool never takes them; use_count inside/outside."""
    pool = torch.cuda.MemPool()
    r.watch("pool", pool)
    r.mark("pool made")
    x = torch.empty(MiB, device=DEV)  # 4 MiB default
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(MiB, device=DEV)  # 4 MiB in the pool's large pool
        small = torch.empty(1000, device=DEV)  # 4000 B in the pool's small pool
        r.mark("inside: 4 MiB and 4000 B in the pool")
    r.mark("outside")
    del a, small
    r.mark("pool blocks freed")
    b = torch.empty(4 * MiB, device=DEV)  # 16 MiB default: fits the default segment's 16 MiB tail
    c = torch.empty(4 * MiB, device=DEV)  # 16 MiB default: a new default segment, never the pool's
    r.mark("default 16 MiB twice")
    with torch.cuda.use_mem_pool(pool):
        d = torch.empty(MiB, device=DEV)
    r.mark("pool again: reuses its block")
    del d
    torch.cuda.empty_cache()
    r.mark("empty_cache: live pool keeps its segments")
    r.forget("pool")
    del pool
    r.mark("del pool: its free segments released")
    del x, b, c
    torch.cuda.empty_cache()
    r.mark("end")


@program
def pool_outlives_tensor(r):
    """Deleting a pool whose block is alive: the segment stays until the block is freed and the cache emptied."""
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(5 * MiB, device=DEV)  # 20 MiB: own segment
        y = torch.empty(256, device=DEV)
    del y
    del pool
    r.mark("pool deleted, x alive")
    del x
    r.mark("x freed into the released pool")
    torch.cuda.empty_cache()
    r.mark("empty_cache")


@program
def empty_cache_inside_context(r):
    """empty_cache while a pool context is active releases nothing of the default pool."""
    pool = torch.cuda.MemPool()
    r.watch("pool", pool)
    x = torch.empty(MiB, device=DEV)
    del x  # a free default segment
    with torch.cuda.use_mem_pool(pool):
        y = torch.empty(MiB, device=DEV)
        del y
        torch.cuda.empty_cache()
        r.mark("empty_cache inside the context")
    torch.cuda.empty_cache()
    r.mark("empty_cache outside, pool alive")
    r.forget("pool")
    del pool
    r.mark("pool deleted")


@program
def nested_pools(r):
    """Nested contexts: the innermost pool wins; leaving it returns to the outer one."""
    p1, p2, p3 = torch.cuda.MemPool(), torch.cuda.MemPool(), torch.cuda.MemPool()
    for name, p in (("p1", p1), ("p2", p2), ("p3", p3)):
        r.watch(name, p)
    data = []
    with torch.cuda.use_mem_pool(p1):
        data.append(torch.empty(5 * MiB, device=DEV))
        with torch.cuda.use_mem_pool(p2):
            data.append(torch.empty(5 * MiB, device=DEV))
            with torch.cuda.use_mem_pool(p3):
                data.append(torch.empty(5 * MiB, device=DEV))
                r.mark("innermost")
            data.append(torch.empty(5 * MiB, device=DEV))
        data.append(torch.empty(5 * MiB, device=DEV))
    r.mark("after")
    data.clear()
    r.mark("freed")


@program
def no_split_pool(r):
    """MemPool(no_split=True): a block never splits its segment."""
    split, nosplit = torch.cuda.MemPool(), torch.cuda.MemPool(no_split=True)
    r.watch("split", split)
    r.watch("no_split", nosplit)
    keep = []
    for _ in range(2):
        with torch.cuda.use_mem_pool(split):
            keep.append(torch.empty(MiB, device=DEV))
        with torch.cuda.use_mem_pool(nosplit):
            keep.append(torch.empty(MiB, device=DEV))
        r.mark("4 MiB in each pool")
    with torch.cuda.use_mem_pool(nosplit):
        keep.append(torch.empty(100, device=DEV))
    r.mark("400 B in the no-split pool")
    keep.clear()
    r.mark("freed")


@program
def use_on_oom(r):
    """A use_on_oom pool's free blocks serve default requests that would otherwise run out of memory."""
    pool_no = torch.cuda.MemPool()
    pool_use = torch.cuda.MemPool(use_on_oom=True)
    r.watch("no", pool_no)
    r.watch("use", pool_use)
    limit_memory(80)
    with torch.cuda.use_mem_pool(pool_no):
        a = torch.empty(10 * MiB, device=DEV)
    with torch.cuda.use_mem_pool(pool_use):
        b = torch.empty(10 * MiB, device=DEV)
    r.mark("40 MiB in each pool")
    try:
        c = torch.empty(10 * MiB, device=DEV)
    except torch.OutOfMemoryError as e:
        r.error(e)
    r.mark("default 40 MiB: out of memory")
    del a, b
    c = torch.empty(int(7.5 * MiB), device=DEV)
    r.mark("default 30 MiB: served by the use_on_oom pool")
    try:
        d = torch.empty(int(7.5 * MiB), device=DEV)
    except torch.OutOfMemoryError as e:
        r.error(e)
    r.mark("another 30 MiB: out of memory")
    del c
    with torch.cuda.use_mem_pool(pool_use):
        e = torch.empty(5 * MiB, device=DEV)
    r.mark("pool_use 20 MiB")
    del e
    r.forget("no")
    r.forget("use")
    del pool_no, pool_use
    torch.cuda.set_per_process_memory_fraction(1.0)
    r.mark("end")


@program
def use_on_oom_order(r):
    """Whether the fallback to a use_on_oom pool comes before or after the cache is flushed."""
    pool_use = torch.cuda.MemPool(use_on_oom=True)
    r.watch("use", pool_use)
    limit_memory(80)
    with torch.cuda.use_mem_pool(pool_use):
        b = torch.empty(10 * MiB, device=DEV)  # 40 MiB segment
    del b
    x = torch.empty(MiB, device=DEV)
    del x  # a free 20 MiB default segment
    r.mark("free: 40 MiB in the pool, 20 MiB default")
    c = torch.empty(int(7.5 * MiB), device=DEV)  # 30 MiB: 40 + 20 + 30 > 80
    r.mark("default 30 MiB")
    del c
    r.forget("use")
    del pool_use
    torch.cuda.set_per_process_memory_fraction(1.0)


@program
def oom_message_private_pool(r):
    """The out-of-memory message counts the free bytes held in private pools."""
    pool = torch.cuda.MemPool()
    r.watch("pool", pool)
    limit_memory(60)
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(5 * MiB, device=DEV)  # 20 MiB
        s = torch.empty(1000, device=DEV)
    del a
    keep = torch.empty(5 * MiB, device=DEV)  # 20 MiB default
    r.mark("pool holds a free 20 MiB segment")
    try:
        z = torch.empty(10 * MiB, device=DEV)
    except torch.OutOfMemoryError as e:
        r.error(e)
    r.mark("after the out-of-memory error")
    del keep, s
    r.forget("pool")
    del pool
    torch.cuda.set_per_process_memory_fraction(1.0)


@program
def pool_side_stream(r):
    """A pool's blocks still belong to their stream."""
    pool = torch.cuda.MemPool()
    r.watch("pool", pool)
    s = torch.cuda.Stream()
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(MiB, device=DEV)
        with torch.cuda.stream(s):
            b = torch.empty(MiB, device=DEV)
    r.mark("pool block on each stream")
    del a, b
    with torch.cuda.use_mem_pool(pool):
        with torch.cuda.stream(s):
            c = torch.empty(MiB, device=DEV)
    r.mark("side stream reuses its own pool block")
    del c
    r.forget("pool")
    del pool
    torch.cuda.synchronize()
    r.mark("pool deleted")


@program
def pool_expandable(r):
    """With expandable segments on: does a MemPool without an allocator get expandable segments?"""
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    pool = torch.cuda.MemPool()
    r.watch("pool", pool)
    with torch.cuda.use_mem_pool(pool):
        a = torch.empty(MiB, device=DEV)
    b = torch.empty(MiB, device=DEV)
    r.mark("4 MiB in the pool and in the default pool")
    del a
    r.forget("pool")
    del pool
    r.mark("pool deleted")
    del b
    torch.cuda.empty_cache()
    torch.cuda.memory._set_allocator_settings("expandable_segments:False")


@program
def pool_ids(r):
    """Ids: (0, n), counting up across MemPool() and graph_pool_handle()."""
    ids = [tuple(torch.cuda.MemPool().id), tuple(torch.cuda.graph_pool_handle()),
           tuple(torch.cuda.MemPool().id)]
    r.errors.append(json.dumps([[i[0], i[1] - ids[0][1]] for i in ids]))
    p = torch.cuda.MemPool()
    r.errors.append(f"allocator {p.allocator} use_count {p.use_count()}")
    try:
        torch.cuda.memory._cuda_endAllocateToPool(0, p.id) if hasattr(torch.cuda.memory, "_cuda_endAllocateToPool") \
            else torch._C._cuda_endAllocateToPool(0, p.id)
    except Exception as e:  # noqa: BLE001
        r.errors.append(f"end without begin: {type(e).__name__}: {e}")


@program
def record_stream_free_in_scope(r):
    """A block used on a busy side stream, freed inside a pool scope: its events wait until no scope is open."""
    pool = torch.cuda.MemPool()
    r.watch("pool", pool)
    s = torch.cuda.Stream()
    torch.ones(1, device=DEV).add_(1)  # load the kernels first: a lazy load waits for busy streams
    with torch.cuda.stream(s):
        torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    x = torch.empty(MiB, device=DEV)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(2_000_000_000)  # ~1 s
        x.add_(1)
    x.record_stream(s)
    with torch.cuda.use_mem_pool(pool):
        del x
        r.mark("x freed inside a scope")
        y = torch.empty(MiB, device=DEV)
        r.mark("malloc inside the scope")
    z = torch.empty(MiB, device=DEV)
    r.mark("malloc after the scope, side stream busy")
    torch.cuda.synchronize()
    w = torch.empty(MiB, device=DEV)
    r.mark("malloc after synchronize")
    del y, z, w
    r.forget("pool")
    del pool
    r.mark("end")


def run_one(name, out_path):
    torch.cuda.empty_cache()
    torch.cuda.reset_accumulated_memory_stats()
    torch.cuda.reset_peak_memory_stats()
    r = Recorder()
    PROGRAMS[name](r)
    torch.cuda.synchronize()
    result = r.finish(name)
    with open(out_path, "a") as f:
        f.write(json.dumps(result) + "\n")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--child":
        run_one(args[1], args[2])
        return
    out_path = args[0]
    names = args[1:] or list(PROGRAMS)
    open(out_path, "w").close()
    print("torch", torch.__version__)
    for name in names:
        subprocess.run([sys.executable, __file__, "--child", name, out_path], check=False)


if __name__ == "__main__":
    main()
