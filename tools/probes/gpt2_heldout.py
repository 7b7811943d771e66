"""GPT-2 training figures at other sizes, sequence lengths and AdamW paths than the goldens (to check
bytegrad's rules beyond them): gpt2_scenarios.py's train() for each case in a fresh process.

  python3 gpt2_heldout.py OUTFILE        one JSON line per case: {"case", "workspace", "steps": [...]}

tests/data/pytorch_probes/gpt2/heldout/x0 (CUBLAS_WORKSPACE_CONFIG=:0:0) and xd (default) hold them, one file a case.
"""
import json, os, subprocess, sys

CASES = {  # name: (n_layer, n_head, n_embd, vocab, block, B, T, foreach)
    "tiny_single": (2, 2, 64, 512, 64, 4, 64, False),
    "small_single": (12, 12, 768, 50257, 1024, 4, 256, False),
    "small_4x1024": (12, 12, 768, 50257, 1024, 4, 1024, None),
    "mid_8x512": (4, 4, 256, 8000, 512, 8, 512, None),
    "mid_single_8x512": (4, 4, 256, 8000, 512, 8, 512, False),
}

if len(sys.argv) > 2:  # one case in this process
    sys.path.insert(0, "shared/golden/gpt2")
    import gpt2_scenarios as g
    from scenarios import Rec
    L, H, C, V, BL, B, T, fe = CASES[sys.argv[2]]
    r = Rec(sys.argv[2])
    g.train(r, g.Cfg(L, H, C, V, BL), B, T, fe, False)
    print(json.dumps(dict(case=sys.argv[2], workspace=os.environ.get("CUBLAS_WORKSPACE_CONFIG", "default"),
                          steps=r.steps)))
else:
    with open(sys.argv[1], "w") as out:
        for name in CASES:
            for env in ({"CUBLAS_WORKSPACE_CONFIG": ":0:0"}, {}):
                p = subprocess.run([sys.executable, __file__, "-", name], capture_output=True, text=True,
                                   env=dict(os.environ, **env))
                out.write(p.stdout.strip().splitlines()[-1] + "\n" if p.returncode == 0 else
                          json.dumps(dict(case=name, error=p.stderr[-500:])) + "\n")
