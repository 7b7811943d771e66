"""GPT-2 training figures beyond the goldens for autocast, SDPA and activation checkpointing: gpt2_scenarios.py's
train() for each case in a fresh process, with the marks (scenarios.py's Rec) and, from a second run, the
op-tagged allocator events (gpt2_op_events.py's format). The marks come from a run without the op recorder:
its TorchDispatchMode gives each tensor an op touches a Python object, which holds a reference, so the
autograd engine's "last reference" tests (InputBuffer's in-place accumulation) answer differently under it.

  python3 gpt2_heldout_amp.py OUTDIR [CASE...]     writes OUTDIR/{x0,xd}/CASE.json and CASE.events
      (x0: CUBLAS_WORKSPACE_CONFIG=:0:0, xd: PyTorch's default workspaces)

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
    if len(sys.argv) > 4 and sys.argv[4] == "events":
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
    names = sys.argv[2:] or list(CASES)
    for sub, env in (("x0", {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}), ("xd", {})):
        os.makedirs(os.path.join(outdir, sub), exist_ok=True)
        for name in names:
            for what in ("marks", "events"):
                p = subprocess.run([sys.executable, __file__, "-", name, os.path.join(outdir, sub), what],
                                   capture_output=True, text=True, env=dict(os.environ, **env))
                print(sub, name, what, "rc", p.returncode, p.stderr[-600:] if p.returncode else "", flush=True)
