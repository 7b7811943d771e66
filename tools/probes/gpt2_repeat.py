#!/usr/bin/env python3
"""Does PyTorch give the same figures when the same GPT-2 program runs again? Runs gpt2_sweep.py's cases
several times, each in a fresh process (as the sweep and the goldens do), and reports, mark by mark, the
distinct figures the runs produced. Where they differ, the program's figures turn on the CUDA driver's
segment placement (docs/status.md), which no allocator model can predict for a single run.

  python3 tools/probes/gpt2_repeat.py OUTDIR TRIALS x0|xd CASE...

Writes OUTDIR/<x0|xd>/CASE.trial<N>.json (gpt2_sweep.py's plain-case layout) and prints the summary.
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_sweep  # noqa: E402

FIGURES = ("allocated", "reserved", "max_allocated", "max_reserved", "segments", "blocks", "requested",
           "inactive_split")


def main(argv):
    if len(argv) < 4:
        print(__doc__)
        return 2
    outdir, trials, sub, names = argv[0], int(argv[1]), argv[2], argv[3:]
    ws = dict(gpt2_sweep.WORKSPACES)[sub]
    os.makedirs(os.path.join(outdir, sub), exist_ok=True)
    for name in names:
        runs = []
        for t in range(trials):
            doc, summary = gpt2_sweep.plain_case(name, ws, os.path.join(outdir, sub))
            with open(os.path.join(outdir, sub, f"{name}.trial{t}.json"), "w") as f:
                json.dump(doc, f, indent=1)
            print(f"{sub} {name} trial {t}: {summary}", flush=True)
            runs.append(doc["steps"])
        print(f"== {sub} {name}: {trials} runs", flush=True)
        for i, step in enumerate(runs[0]):
            outcomes = {}
            for r in runs:
                if i < len(r):
                    key = tuple(r[i].get(k) for k in FIGURES)
                    outcomes[key] = outcomes.get(key, 0) + 1
            tag = "same" if len(outcomes) == 1 else f"{len(outcomes)} outcomes"
            print(f"  {step.get('label', i)}: {tag}", flush=True)
            if len(outcomes) > 1:
                for key, n in sorted(outcomes.items(), key=lambda kv: -kv[1]):
                    print(f"      x{n} " + " ".join(f"{k}={v}" for k, v in zip(FIGURES, key)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
