#!/usr/bin/env python3
"""Where the placement model's segment order first departs from PyTorch's, per generated-sweep run.

  python3 tools/probes/segment_departures.py [--estimate build/programs/bytegrad-estimate] x0/c013 xd/c008 ...

For each run (workspace/case of docs/evidence/generated_segments/) it runs bytegrad-estimate on meta with the
recorded configuration and --memory-viz, then, with compare_segments.py's readers, finds the first segment
(creation order) that sits on the other side of an earlier segment of its pool, both alive together, than in
the recording; it prints both segments' addresses relative to each side's first segment. It also says whether
the `--segments` trial's figures equal tests/data's trial t0 (where not, the recording is another outcome).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_segments as cs  # noqa: E402

EVIDENCE = "docs/evidence/generated_segments"
T0 = "tests/data/pytorch_probes/gpt2/generated/t0"
MiB = 1 << 20


def estimate_args(estimate, workspace, config, viz):
    args = [estimate, "gpt2"]
    for flag, key in (("--n-layer", "n_layer"), ("--n-head", "n_head"), ("--n-embd", "n_embd"), ("--vocab", "vocab"),
                      ("--block", "block"), ("--batch", "batch"), ("--seq", "seq"), ("--optimizer", "optimizer"),
                      ("--steps", "steps"), ("--attention", "attention")):
        args += [flag, str(config[key])]
    args += ["--foreach", "on" if config["foreach"] else "off"]
    if config["amp"]:
        args += ["--amp", config["amp"]]
    if config["checkpoint"]:
        args.append("--checkpoint")
    if workspace == "x0":
        args.append("--no-workspace")
    return args + ["--memory-viz", viz]


def first_departure(want, got):
    for k in range(min(len(want), len(got))):
        for j in range(k):
            if cs.pool_of(want[j]) != cs.pool_of(want[k]):
                continue
            if not (cs.overlap(want[j], want[k]) and cs.overlap(got[j], got[k])):
                continue
            if (want[j]["address"] < want[k]["address"]) != (got[j]["address"] < got[k]["address"]):
                return k, j
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimate", default="build/programs/bytegrad-estimate")
    parser.add_argument("runs", nargs="+", help="workspace/case, e.g. x0/c013")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for run in options.runs:
            workspace, case = run.split("/")
            recording = glob.glob(f"{EVIDENCE}/{workspace}/{case}_*.json")[0]
            doc = json.load(open(recording))
            viz = os.path.join(tmp, "viz.json")
            done = subprocess.run(estimate_args(options.estimate, workspace, doc["config"], viz), capture_output=True,
                                  text=True)
            if done.returncode:
                print(f"{run}: bytegrad-estimate failed: {done.stderr.strip()[-300:]}")
                continue
            t0 = glob.glob(f"{T0}/{workspace}/{case}_*.json")
            same = bool(t0) and json.load(open(t0[0]))["steps"] == doc["steps"]
            want = cs.pytorch_segments(recording.replace(".json", ".segments.gz"))
            got = cs.bytegrad_segments(viz)
            sizes = "same sizes" if [s["size"] for s in want] == [s["size"] for s in got] else "sizes differ"
            found = first_departure(want, got)
            head = f"{run}: {len(want)} segments, {sizes}, recording {'==' if same else '!='} t0"
            if not found:
                print(f"{head}: no order departs")
                continue
            k, j = found

            def where(side, i):
                return f"{(side[i]['address'] - side[0]['address']) / MiB:+.0f}"

            print(f"{head}: #{k} ({cs.pool_of(want[k])} {want[k]['size'] // MiB} MiB, {want[k]['mark']} "
                  f"{want[k]['frame']}) PyTorch {where(want, k)} bytegrad {where(got, k)} MiB, against #{j} "
                  f"PyTorch {where(want, j)} bytegrad {where(got, j)}")


if __name__ == "__main__":
    main()
