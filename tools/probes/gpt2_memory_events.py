"""Allocator event streams of nanoGPT's GPT-2 training in PyTorch (shared/golden/gpt2/gpt2_scenarios.py's
model and loop), to compare event by event with bytegrad's history on meta; and the embedding backward's
own events on both of CUDA's paths (num_indices <= 3072: zeros + a feature kernel; above: the sort-based
path with its temporaries).

  CUBLAS_WORKSPACE_CONFIG=:0:0 python3 gpt2_memory_events.py OUTDIR [tiny|small|embedding]...

Writes OUTDIR/<what>.events: one event a line, `<action> <size> <address> <top python frame>`, `# mark <label>` lines
between the training phases; embedding.events has `# case V D N` headers.
"""
import os, sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "golden", "gpt2"))
import gpt2_scenarios as g  # noqa: E402


def frame_of(entry):
    for f in entry.get("frames", []):
        name = f.get("filename", "")
        if name.endswith(".py") and "torch/cuda/memory" not in name:
            return f"{os.path.basename(name)}:{f.get('line')}:{f.get('name')}"
    return "-"


class Events:
    def __init__(self):
        self.lines = []
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=10**7)
        self.seen = 0

    def flush(self):
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        for e in trace[self.seen:]:
            if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free"):
                self.lines.append(f"{e['action']} {e['size']} {e['addr']:#x} {frame_of(e)}")
        self.seen = len(trace)

    def mark(self, label):
        self.flush()
        self.lines.append(f"# mark {label} allocated={torch.cuda.memory_allocated()} "
                          f"reserved={torch.cuda.memory_reserved()} peak={torch.cuda.max_memory_allocated()}")


def train(cfg, B, T, out):
    ev = Events()

    class R:
        notes = {}

        def mark(self, label):
            ev.mark(label)

    g.train(R(), cfg, B, T, None, False)
    ev.flush()
    open(out, "w").write("\n".join(ev.lines) + "\n")


def embedding(out):
    ev = Events()
    for V, D, N in ((50257, 768, 1024), (50257, 768, 3072), (50257, 768, 3073), (50257, 768, 4096),
                    (50257, 768, 8192), (50257, 768, 32768), (512, 64, 4096), (1024, 768, 4096),
                    (50257, 768, 65536), (100, 64, 5000)):
        w = torch.randn(V, D, device="cuda", requires_grad=True)
        idx = torch.randint(0, V, (N,), device="cuda")
        y = F.embedding(idx, w)
        gy = torch.randn_like(y)
        ev.mark(f"case {V} {D} {N} before_backward")
        y.backward(gy)
        ev.mark(f"case {V} {D} {N} after_backward")
        del w, idx, y, gy
        torch.cuda.empty_cache()
        ev.mark(f"case {V} {D} {N} cleared")
    ev.flush()
    open(out, "w").write("\n".join(ev.lines) + "\n")


if __name__ == "__main__":
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for what in sys.argv[2:]:
        if what == "tiny":
            train(g.TINY, 4, 64, os.path.join(outdir, "tiny.events"))
        elif what == "small":
            train(g.SMALL, 4, 256, os.path.join(outdir, "small.events"))
        elif what == "embedding":
            embedding(os.path.join(outdir, "embedding.events"))
