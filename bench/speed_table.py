#!/usr/bin/env python3
"""Issue 30's table: bytegrad's GPT-2 small training step beside PyTorch eager and torch.compile, one run.
Reads bench_gpt2's output (`build/bench/bench_gpt2 cuda STEPS MODE`, one block per mode) and
bench/pytorch_compile_step.py's --json lines (a copy of ../shared/bench's baseline), and prints, per mode and
shape, the median step of each, the ratios bytegrad / eager and bytegrad / compile, the peaks allocated, and
the issue's target for that row, as Markdown.
  python3 bench/speed_table.py BENCH_GPT2_LOG PYTORCH_JSON [GPU_NAME]
tools/gpu_checks.sh's bench_speed step runs both and this."""
import json
import re
import sys

# Issue 30's "done when", per (mode, shape): every 8x1024 row at or below torch.compile, bf16 + SDPA 8x1024 at
# or below 22 ms, bf16 + SDPA 4x256 at or below 8 ms, fp32 4x256 at or below llm.c's 24.8 ms.
TARGETS = {("bf16_sdpa", "8x1024"): 22.0, ("bf16_sdpa", "4x256"): 8.0, ("fp32", "4x256"): 24.8}


def bytegrad_rows(path):
    """{(mode, "BxT"): (ms, peak)} from bench_gpt2's blocks."""
    rows, mode = {}, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"GPT-2 small (\S+) training step on (\S+)", line)
            if m:
                mode = m.group(1)
                continue
            m = re.match(r"\s+(\d+x\d+)\s+([0-9.]+)\s+(\d+)\s*$", line)
            if m and mode:
                rows[(mode, m.group(1))] = (float(m.group(2)), int(m.group(3)))
    return rows


def pytorch_rows(path):
    """{(backend, mode, "BxT"): (ms, peak)} from pytorch_compile_step.py --json."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if "median_ms" in r:
                rows[(r["backend"], r["mode"], f"{r['B']}x{r['T']}")] = (r["median_ms"], r["peak_alloc_bytes"])
    return rows


def table(ours, theirs, gpu=""):
    modes = {"bf16_sdpa": "bf16 + SDPA", "bf16": "bf16 autocast, slow attention", "fp32": "fp32"}
    out = [f"GPT-2 small training step{' on ' + gpu if gpu else ''}, median ms (bytegrad's bench_gpt2 beside "
           "pytorch_compile_step.py, same run)", "",
           "| step | bytegrad | PyTorch eager | torch.compile | / eager | / compile | target | "
           "peak allocated bytegrad / eager |", "|---|---|---|---|---|---|---|---|"]
    for shape in ("8x1024", "4x256"):
        for mode, name in modes.items():
            ms, peak = ours.get((mode, shape), (None, None))
            eager, eager_peak = theirs.get(("eager", mode, shape), (None, None))
            compiled, _ = theirs.get(("compile", mode, shape), (None, None))
            if ms is None and eager is None:
                continue
            target = TARGETS.get((mode, shape))
            if target is None and shape == "8x1024":
                target = compiled
            met = "" if ms is None or target is None else (" (met)" if ms <= target else " (not met)")

            def f(v, unit=""):
                return "-" if v is None else f"{v:.2f}{unit}"

            ratio = lambda a, b: "-" if a is None or b is None else f"{a / b:.2f}"  # noqa: E731
            out.append(f"| {name}, {shape} | {f(ms)} | {f(eager)} | {f(compiled)} | {ratio(ms, eager)} | "
                       f"{ratio(ms, compiled)} | {f(target)}{met} | {peak if peak is not None else '-'} / "
                       f"{eager_peak if eager_peak is not None else '-'} |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    print(table(bytegrad_rows(sys.argv[1]), pytorch_rows(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""))
