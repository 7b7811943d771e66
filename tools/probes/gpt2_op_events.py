"""Allocator events of nanoGPT's GPT-2 training in PyTorch, each event tagged with the aten op that made it
(the ops as the dispatcher runs them: after autocast's casts, so `aten._to_copy` lines show the casts), for
building and checking autocast's and SDPA's memory rules event by event.

  [CUBLAS_WORKSPACE_CONFIG=:0:0] python3 gpt2_op_events.py OUTDIR SCENARIO...   (a name from
      shared/golden/gpt2/gpt2_scenarios.py's SCEN, or `sdpa`: single scaled_dot_product_attention calls)

Writes OUTDIR/<scenario>.events: `<action> <size>` lines, `# op <aten op>` before the events an op made
(events between ops are frees of Python references), and `# mark <label> allocated=.. reserved=.. peak=..`.
Caution: the TorchDispatchMode that names the ops gives every tensor it sees a Python object holding a
reference, so the autograd engine's last-reference tests (InputBuffer's in-place gradient sums) answer
differently: backward's events here are not the plain program's (its marks come from the goldens, or from
gpt2_heldout_amp.py's separate run). Which event belongs to which op comes from the allocator's cumulative counters (allocations, frees,
segment mallocs and frees), read before each op, so one snapshot at the end gives the whole trace.
"""
import os, sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "golden", "gpt2"))
import gpt2_scenarios as g  # noqa: E402


def event_count():
    s = torch.cuda.memory_stats()
    return (s.get("allocation.all.allocated", 0) + s.get("allocation.all.freed", 0) +
            s.get("segment.all.allocated", 0) + s.get("segment.all.freed", 0))


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.notes = []  # (event index, line)
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=10**7)
        self.start = event_count()

    def note(self, line):
        self.notes.append((event_count() - self.start, line))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.note(f"# op {func}")
        return func(*args, **(kwargs or {}))

    def mark(self, label):
        self.note(f"# mark {label} allocated={torch.cuda.memory_allocated()} "
                  f"reserved={torch.cuda.memory_reserved()} peak={torch.cuda.max_memory_allocated()}")

    def write(self, path):
        trace = [e for e in torch.cuda.memory._snapshot()["device_traces"][0]
                 if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free")]
        lines, n = [], 0
        for index, line in self.notes + [(len(trace), None)]:
            while n < index and n < len(trace):
                e = trace[n]
                lines.append(f"{e['action']} {e['size']}")
                n += 1
            if line:
                lines.append(line)
        open(path, "w").write("\n".join(lines) + "\n")


def scenario(name, out):
    rec = Recorder()

    class R:
        notes = {}

        def mark(self, label):
            rec.mark(label)

    train = g.train
    g.train = lambda *a, **k: train(*a, **dict(k, timed=0))  # the marks only, no timing loop
    with rec:
        g.SCEN[name](R())
    rec.write(out)


def sdpa(out):
    """One causal SDPA forward and backward per case, fp32 and bf16, as GPT-2's attention calls it."""
    rec = Recorder()
    cases = [(4, 12, 256, 64, torch.bfloat16), (4, 12, 256, 64, torch.float32), (2, 2, 64, 32, torch.bfloat16),
             (2, 2, 64, 32, torch.float32), (8, 12, 1024, 64, torch.bfloat16), (1, 4, 100, 64, torch.bfloat16),
             (3, 5, 77, 48, torch.float32), (2, 16, 512, 128, torch.bfloat16), (2, 4, 300, 64, torch.float16)]
    for B, H, T, D, dt in cases:
        qkv = torch.randn(B, T, 3 * H * D, device="cuda", dtype=dt, requires_grad=True)
        with rec:
            q, k, v = qkv.split(H * D, dim=2)
            q = q.view(B, T, H, D).transpose(1, 2)
            k = k.view(B, T, H, D).transpose(1, 2)
            v = v.view(B, T, H, D).transpose(1, 2)
            rec.mark(f"case_{B}x{H}x{T}x{D}_{str(dt).split('.')[1]}_start")
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            rec.mark("forward")
            y.backward(torch.ones_like(y))
            rec.mark("backward")
            del q, k, v, y, qkv
            rec.mark("freed")
        torch.cuda.empty_cache()
    rec.write(out)


if __name__ == "__main__":
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for what in sys.argv[2:]:
        out = os.path.join(outdir, what + ".events")
        if what == "sdpa":
            sdpa(out)
        else:
            scenario(what, out)
