#!/usr/bin/env python3
"""Records, in real PyTorch on a CUDA GPU, what the caching allocator does with side streams (issue 26).

Usage: python3 stream_probe.py OUT.jsonl [PROGRAM...] [--repeat N]
Each program runs in a fresh process (a clean allocator) and writes one JSON object per run:
  {"program", "run", "marks": [{"label", "allocated", "reserved", "active", "inactive_split",
   "num_sync_all_streams", "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
   "segments": [[stream, size, allocated_size], ...]}],
   "trace": [[action, offset, size, stream], ...]}
Streams are numbered by first appearance (0: the default stream). Offsets are relative to the lowest
segment address the program saw, so two runs compare. A side stream is kept busy with torch.cuda._sleep
where a program needs work still queued on it: that makes "the event has not completed" deterministic.
--repeat N runs every program N times, to see which figures depend on the GPU's timing.
"""
import json
import subprocess
import sys
import time

import torch

DEV = "cuda"
MiB = 1 << 20
BUSY_CYCLES = 2_000_000_000  # ~1 s on an H100: far longer than the host needs to reach the next malloc


class Recorder:
    def __init__(self):
        self.marks = []
        torch.cuda.synchronize()
        # No stack frames: a snapshot with frames takes long enough to let a busy stream finish between marks.
        torch.cuda.memory._record_memory_history(max_entries=1000000, context=None, stacks="python")
        self.t0 = time.perf_counter()
        self.start = len(torch.cuda.memory._snapshot()["device_traces"][0])

    def mark(self, label):
        host_ms = (time.perf_counter() - self.t0) * 1e3
        st = torch.cuda.memory_stats()
        segs = torch.cuda.memory._snapshot()["segments"]
        self.marks.append({
            "label": label,
            "host_ms": round(host_ms, 1),  # when the mark was taken: compare with BUSY_CYCLES' duration
            "allocated": st.get("allocated_bytes.all.current", 0),
            "reserved": st.get("reserved_bytes.all.current", 0),
            "active": st.get("active_bytes.all.current", 0),
            "inactive_split": st.get("inactive_split_bytes.all.current", 0),
            "num_sync_all_streams": st.get("num_sync_all_streams", 0),
            "num_alloc_retries": st.get("num_alloc_retries", 0),
            "num_ooms": st.get("num_ooms", 0),
            "num_device_alloc": st.get("num_device_alloc", 0),
            "num_device_free": st.get("num_device_free", 0),
            "segments": sorted([[s["stream"], s["total_size"], s["allocated_size"]] for s in segs]),
        })

    def finish(self, program, run):
        trace = torch.cuda.memory._snapshot()["device_traces"][0][self.start:]
        torch.cuda.memory._record_memory_history(enabled=None)
        streams = {0: 0}
        for m in self.marks:
            for seg in m["segments"]:
                streams.setdefault(seg[0], len(streams))
        for e in trace:
            streams.setdefault(e.get("stream", 0), len(streams))
        for m in self.marks:
            m["segments"] = sorted([[streams[s], size, used] for s, size, used in m["segments"]])
        addrs = [e["addr"] for e in trace if e["action"] == "segment_alloc"]
        base = min(addrs) if addrs else 0
        events = []
        for e in trace:
            if e["action"] == "snapshot":
                continue
            events.append([e["action"], e.get("addr", 0) - base if e.get("addr") else 0, e.get("size", 0),
                           streams[e.get("stream", 0)]])
        return {"program": program, "run": run, "marks": self.marks, "trace": events}


busy_cycles = BUSY_CYCLES


def busy(stream):
    with torch.cuda.stream(stream):
        torch.cuda._sleep(busy_cycles)


PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


@program
def cross_stream_free_busy(r):
    """A block used on a busy side stream and freed: not reusable until the side stream's work is done."""
    s = torch.cuda.Stream()
    x = torch.empty(MiB, device=DEV)  # 4 MiB, default stream
    r.mark("x 4 MiB")
    s.wait_stream(torch.cuda.current_stream())
    busy(s)
    with torch.cuda.stream(s):
        y = x * 2  # allocated on s, reads x on s
    x.record_stream(s)
    del x
    r.mark("del x, event pending")
    z = torch.empty(MiB, device=DEV)
    r.mark("z 4 MiB while pending")
    torch.cuda.synchronize()
    r.mark("synchronize")
    w = torch.empty(MiB, device=DEV)
    r.mark("w 4 MiB after synchronize")
    del y, z, w
    r.mark("end")


@program
def stream_owned_cache(r):
    """A block freed on a side stream serves only that stream: the default stream makes its own segment."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.empty(MiB, device=DEV)
        small = torch.empty(1000, device=DEV)
    r.mark("x 4 MiB and 4000 B on side stream")
    del x, small
    r.mark("freed on side stream")
    y = torch.empty(MiB, device=DEV)
    tiny = torch.empty(1000, device=DEV)
    r.mark("same sizes on default stream")
    with torch.cuda.stream(s):
        x2 = torch.empty(MiB, device=DEV)
    r.mark("side stream again: reuses its block")
    del y, tiny, x2
    torch.cuda.empty_cache()
    r.mark("empty_cache")


@program
def empty_cache_pending(r):
    """empty_cache waits for pending events (synchronize_and_free_events), then releases the segment."""
    s = torch.cuda.Stream()
    x = torch.empty(5 * MiB, device=DEV)  # 20 MiB, its own segment
    s.wait_stream(torch.cuda.current_stream())
    busy(s)
    with torch.cuda.stream(s):
        x.add_(1)
    x.record_stream(s)
    del x
    r.mark("del x, event pending")
    torch.cuda.empty_cache()
    r.mark("empty_cache")


@program
def oom_retry_pending(r):
    """A malloc that cannot grow frees pending blocks (synchronize_and_free_events) and retries."""
    s = torch.cuda.Stream()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    limit = 64 * MiB
    torch.cuda.set_per_process_memory_fraction(limit / total)
    x = torch.empty(10 * MiB, device=DEV)  # 40 MiB
    s.wait_stream(torch.cuda.current_stream())
    busy(s)
    with torch.cuda.stream(s):
        x.add_(1)
    x.record_stream(s)
    del x
    r.mark("del x 40 MiB, event pending")
    y = torch.empty(10 * MiB, device=DEV)
    r.mark("y 40 MiB: retry after freeing pending")
    del y
    torch.cuda.set_per_process_memory_fraction(1.0)
    r.mark("end")


@program
def prefetch_synchronized(r):
    """Side-stream prefetch of batches (allocated on the side stream, used on the default stream)."""
    s = torch.cuda.Stream()
    host = torch.randn(MiB).pin_memory()
    for i in range(3):
        with torch.cuda.stream(s):
            batch = host.to(DEV, non_blocking=True)
        torch.cuda.current_stream().wait_stream(s)
        batch.record_stream(torch.cuda.current_stream())
        out = batch * 2
        del batch
        r.mark(f"step {i}: batch freed, out live")
        del out
        torch.cuda.synchronize()
        r.mark(f"step {i}: synchronized")


@program
def prefetch_overlapped(r):
    """The same prefetch without synchronizing: the next batch's malloc on the side stream may or may not
    see the default stream's event completed (timing: run with --repeat)."""
    s = torch.cuda.Stream()
    host = torch.randn(MiB).pin_memory()
    with torch.cuda.stream(s):
        nxt = host.to(DEV, non_blocking=True)
    for i in range(4):
        torch.cuda.current_stream().wait_stream(s)
        batch = nxt
        batch.record_stream(torch.cuda.current_stream())
        busy(torch.cuda.current_stream())
        out = batch * 2
        with torch.cuda.stream(s):
            nxt = host.to(DEV, non_blocking=True)
        del batch, out
        r.mark(f"step {i}")
    torch.cuda.synchronize()
    del nxt
    r.mark("end")


@program
def idle_stream_record(r):
    """record_stream on an idle side stream, then an immediate malloc: the event has (almost surely)
    completed already. Timing-dependent: run with --repeat."""
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    x = torch.empty(MiB, device=DEV)
    torch.cuda.synchronize()
    x.record_stream(s)
    del x
    r.mark("del x, idle stream")
    y = torch.empty(MiB, device=DEV)
    r.mark("y 4 MiB")


@program
def events_and_wait(r):
    """Event record/wait between streams; the block's reuse follows the event, not the wait."""
    s = torch.cuda.Stream()
    ev = torch.cuda.Event()
    busy(s)
    with torch.cuda.stream(s):
        y = torch.ones(MiB, device=DEV)
    ev.record(s)
    torch.cuda.current_stream().wait_event(ev)
    z = y + 1  # default stream, after the event
    y.record_stream(torch.cuda.current_stream())
    del y
    r.mark("y (side) freed, used on default")
    with torch.cuda.stream(s):
        y2 = torch.ones(MiB, device=DEV)
    r.mark("y2 on side stream while default is waiting")
    ev.synchronize()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        y3 = torch.ones(MiB, device=DEV)
    r.mark("y3 on side stream after synchronize")
    del z, y2, y3
    r.mark("end")


@program
def three_streams(r):
    """Three streams each cache their own small and large blocks."""
    streams = [torch.cuda.Stream() for _ in range(3)]
    keep = []
    for s in streams:
        with torch.cuda.stream(s):
            keep.append(torch.empty(256, device=DEV))
            keep.append(torch.empty(2 * MiB, device=DEV))
    r.mark("two blocks on each of 3 streams")
    keep.clear()
    r.mark("all freed")
    torch.cuda.empty_cache()
    r.mark("empty_cache")


@program
def side_stream_matmul(r):
    """cuBLAS workspaces are kept per (handle, stream): a side stream's first products park their own."""
    s = torch.cuda.Stream()
    a = torch.randn(256, 256, device=DEV)
    w = torch.randn(256, 256, device=DEV)
    b = torch.randn(256, device=DEV)
    r.mark("operands")
    c = a @ w
    r.mark("product on default stream")
    with torch.cuda.stream(s):
        d = a @ w
    r.mark("product on side stream")
    with torch.cuda.stream(s):
        e = torch.nn.functional.linear(a, w, b)
    r.mark("linear with bias on side stream")
    del c, d, e
    r.mark("end")


def measure_sleep():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(100_000_000)
    end.record()
    end.synchronize()
    return 100_000_000 / start.elapsed_time(end)


class NoMarks:
    def mark(self, label):
        pass


def run_one(name, out_path, run):
    # A warm-up pass first: the first launch of a kernel loads its module (CUDA's lazy loading), which waits
    # for the work already queued, busy streams included, and would make every pending event complete.
    global busy_cycles
    busy_cycles = 1000
    PROGRAMS[name](NoMarks())
    busy_cycles = BUSY_CYCLES
    torch.cuda.synchronize()
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.cuda.empty_cache()
    torch.cuda.reset_accumulated_memory_stats()
    torch.cuda.reset_peak_memory_stats()
    r = Recorder()
    PROGRAMS[name](r)
    torch.cuda.synchronize()
    result = r.finish(name, run)
    with open(out_path, "a") as f:
        f.write(json.dumps(result) + "\n")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--child":
        run_one(args[1], args[2], int(args[3]))
        return
    out_path = args[0]
    repeat = 1
    names = []
    rest = args[1:]
    while rest:
        a = rest.pop(0)
        if a == "--repeat":
            repeat = int(rest.pop(0))
        else:
            names.append(a)
    names = names or list(PROGRAMS)
    open(out_path, "w").close()
    cycles_per_ms = measure_sleep()
    print(f"torch.cuda._sleep: {cycles_per_ms:.0f} cycles a millisecond; BUSY_CYCLES = {BUSY_CYCLES / cycles_per_ms:.0f} ms")
    for name in names:
        for run in range(repeat):
            subprocess.run([sys.executable, __file__, "--child", name, out_path, str(run)], check=True)


if __name__ == "__main__":
    main()
