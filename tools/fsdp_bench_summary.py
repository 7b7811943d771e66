#!/usr/bin/env python3
"""The table of tools/gpu_checks.sh's bench_fsdp step: reads the `result impl=... key=value ...` lines that
bench/bench_fsdp_gpt2.cpp and bench/pytorch_fsdp_step.py print and writes, per setting (model, mode, batch,
sequence, ranks), bytegrad's and PyTorch's per-GPU step, efficiency against their own one-GPU step, the
ratio bytegrad / PyTorch, the communication alone and the largest rank's peaks, as Markdown.
  python3 tools/fsdp_bench_summary.py LOG [GPU_NAME]"""
import sys


def results(path):
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            # bytegrad-launch prefixes each rank's lines with "[rank R] "
            line = line.removeprefix("[rank 0] ")
            if not line.startswith("result impl="):
                continue
            fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
            rows.append(fields)
    return rows


def table(rows, gpu=""):
    settings = {}
    for r in rows:
        key = (r["model"], r["mode"], int(r["batch"]), int(r["seq"]), int(r["world"]))
        settings.setdefault(key, {})[r["impl"]] = r
    out = [f"FSDP2 GPT-2 step per GPU{' on ' + gpu if gpu else ''} (each rank its own batch; median of "
           "synchronized steps)", "",
           "| model, mode, batch x seq | ranks | one GPU bytegrad / PyTorch | FSDP2 bytegrad / PyTorch | "
           "efficiency bytegrad / PyTorch | step ratio bytegrad / PyTorch | all_gather + reduce_scatter alone bytegrad / "
           "PyTorch | peak allocated, max rank, bytegrad / PyTorch | peak reserved, max rank, bytegrad / PyTorch |",
           "|---|---|---|---|---|---|---|---|---|"]

    def pair(d, fn, fmt):
        return " / ".join(fmt.format(fn(d[i])) if i in d else "missing" for i in ("bytegrad", "pytorch"))

    for key in sorted(settings):
        d = settings[key]
        model, mode, b, t, world = key
        ratio = "n/a"
        if "bytegrad" in d and "pytorch" in d:
            ratio = f"{float(d['bytegrad']['fsdp_ms']) / float(d['pytorch']['fsdp_ms']):.3f}"
        out.append(
            f"| {model} {mode}, {b} x {t} | {world} | "
            + pair(d, lambda r: float(r["one_gpu_ms"]), "{:.2f} ms") + " | "
            + pair(d, lambda r: float(r["fsdp_ms"]), "{:.2f} ms") + " | "
            + pair(d, lambda r: 100.0 * float(r["one_gpu_ms"]) / float(r["fsdp_ms"]), "{:.1f}%") + f" | {ratio} | "
            + pair(d, lambda r: float(r["all_gather_ms"]) + float(r["reduce_scatter_ms"]), "{:.2f} ms") + " | "
            + pair(d, lambda r: int(float(r["peak_allocated_max"])), "{:,}") + " | "
            + pair(d, lambda r: int(float(r["peak_reserved_max"])), "{:,}") + " |")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = results(sys.argv[1])
    if not rows:
        sys.exit(f"fsdp_bench_summary.py: no result lines in {sys.argv[1]}")
    sys.stdout.write(table(rows, sys.argv[2] if len(sys.argv) > 2 else ""))


if __name__ == "__main__":
    main()
