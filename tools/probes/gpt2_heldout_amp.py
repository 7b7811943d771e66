"""GPT-2 training figures beyond the goldens for autocast, SDPA and activation checkpointing: gpt2_scenarios.py's
train() for each case in a fresh process, with the marks (scenarios.py's Rec) and, from a second run, the
op-tagged allocator events (gpt2_op_events.py's format). The marks come from a run without the op recorder:
its TorchDispatchMode gives each tensor an op touches a Python object, which holds a reference, so the
autograd engine's "last reference" tests (InputBuffer's in-place accumulation) answer differently under it.

  python3 gpt2_heldout_amp.py OUTDIR [CASE...]     writes OUTDIR/{x0,xd}/CASE.json and CASE.events
      (x0: CUBLAS_WORKSPACE_CONFIG=:0:0, xd: PyTorch's default workspaces)
  python3 gpt2_heldout_amp.py OUTDIR --requests [CASE...]    writes OUTDIR/{x0,xd}/CASE.requests.json

CASE.requests.json: the allocator's events of a third run, recorded by the allocator's own history
(torch.cuda.memory._record_memory_history: no dispatch mode, so backward's events are the plain program's),
between every two marks, as [{label, figures, events: [[action, size(, address for segments)], ...]}]:
`alloc` and `free_completed` with requested sizes, `segment_alloc`/`segment_free` with their addresses. The
figures are that run's own marks: where two free blocks of one size tie, best fit takes the one at the lower
address, and the CUDA driver's segment addresses differ from run to run, so a run's placement figures
(allocated, reserved, inactive_split, ...) may differ from CASE.json's while its requests are the same.

checkpoint cases run each Block under torch.utils.checkpoint(use_reentrant=False), as
`x = checkpoint(block, x, use_reentrant=False)` in nanoGPT's block loop would.
"""
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {  # name: (n_layer, n_head, n_embd, vocab, block, B, T, foreach, amp, sdpa, checkpoint)
    "tiny_bf16_single": (2, 2, 64, 512, 64, 4, 64, False, True, False, False),
    "mid_bf16_8x512": (4, 4, 256, 8000, 512, 8, 512, None, True, False, False),
    "mid_bf16_sdpa_8x512": (4, 4, 256, 8000, 512, 8, 512, None, True, True, False),
    "tiny_fp32_sdpa": (2, 2, 64, 512, 64, 4, 64, None, False, True, False),
    "mid_fp32_sdpa_8x512": (4, 4, 256, 8000, 512, 8, 512, None, False, True, False),
    "tiny_bf16_sdpa": (2, 2, 64, 512, 64, 4, 64, None, True, True, False),
    "tiny_fp32_checkpoint": (2, 2, 64, 512, 64, 4, 64, None, False, False, True),
    "tiny_bf16_checkpoint": (2, 2, 64, 512, 64, 4, 64, None, True, False, True),
    "small_fp32_checkpoint": (12, 12, 768, 50257, 1024, 4, 256, None, False, False, True),
    "small_bf16_checkpoint": (12, 12, 768, 50257, 1024, 4, 256, None, True, False, True),
}

if len(sys.argv) > 3 and sys.argv[1] == "-":  # one case in this process: - CASE OUTDIR
    import torch
    import torch.utils.checkpoint
    sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "golden", "gpt2"))
    sys.path.insert(0, HERE)
    import gpt2_scenarios as g
    from gpt2_op_events import Recorder
    from scenarios import Rec
    name, outdir = sys.argv[2], sys.argv[3]
    L, H, C, V, BL, B, T, fe, amp, sdpa, ck = CASES[name]
    if ck:
        plain = g.Block.forward
        g.Block.forward = lambda self, x: torch.utils.checkpoint.checkpoint(plain, self, x, use_reentrant=False)
    marks = Rec(name)  # the golden files' figures at each mark, from a run without the op recorder
    if len(sys.argv) > 4 and sys.argv[4] == "requests":
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=10**7)
        seen, out = [0], []

        class Q:
            notes = {}

            def mark(self, label):
                marks.mark(label)
                trace = torch.cuda.memory._snapshot()["device_traces"][0]
                events = [[e["action"], e["size"]] + ([e["addr"]] if e["action"].startswith("segment") else [])
                          for e in trace[seen[0]:]
                          if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free")]
                seen[0] = len(trace)
                out.append(dict(label=label, figures=marks.steps[-1], events=events))

        g.train(Q(), g.Cfg(L, H, C, V, BL), B, T, fe, amp, sdpa=sdpa)
        json.dump(out, open(os.path.join(outdir, name + ".requests.json"), "w"), separators=(",", ":"))
    elif len(sys.argv) > 4 and sys.argv[4] == "events":
        rec = Recorder()

        class R:
            notes = {}

            def mark(self, label):
                rec.mark(label)

        with rec:
            g.train(R(), g.Cfg(L, H, C, V, BL), B, T, fe, amp, sdpa=sdpa)
        rec.write(os.path.join(outdir, name + ".events"))
    else:
        g.train(marks, g.Cfg(L, H, C, V, BL), B, T, fe, amp, sdpa=sdpa)
        json.dump(dict(case=name, workspace=os.environ.get("CUBLAS_WORKSPACE_CONFIG", "default"), steps=marks.steps),
                  open(os.path.join(outdir, name + ".json"), "w"), indent=1)
else:
    outdir = sys.argv[1]
    requests = len(sys.argv) > 2 and sys.argv[2] == "--requests"
    names = sys.argv[2 + requests:] or list(CASES)
    for sub, env in (("x0", {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}), ("xd", {})):
        os.makedirs(os.path.join(outdir, sub), exist_ok=True)
        for name in names:
            for what in (("requests",) if requests else ("marks", "events")):
                p = subprocess.run([sys.executable, __file__, "-", name, os.path.join(outdir, sub), what],
                                   capture_output=True, text=True, env=dict(os.environ, **env))
                print(sub, name, what, "rc", p.returncode, p.stderr[-600:] if p.returncode else "", flush=True)
