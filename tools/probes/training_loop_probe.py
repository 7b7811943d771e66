#!/usr/bin/env python3
"""Records, in real PyTorch, what issue 29's training-loop pieces do.

Usage: python3 training_loop_probe.py OUT_DIR
Writes OUT_DIR/lr_schedulers.json: for each schedule, get_last_lr() after construction and after each of
100 steps (optimizer.step() before each scheduler.step()), with two param groups (lr 0.1 and 0.02), floats
as Python's repr (json), so they read back bit for bit.
Writes OUT_DIR/clip_grad.jsonl (CUDA only): the allocator's trace (action, size) during clip_grad_norm_ and
clip_grad_value_ on a small model's gradients, with the norm returned.
"""
import json
import math
import os
import sys

import torch
from torch.optim import lr_scheduler as S

STEPS = 100


def make_optimizer():
    a = torch.nn.Parameter(torch.zeros(3))
    b = torch.nn.Parameter(torch.zeros(2))
    return torch.optim.Adam([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.02}])


SCHEDULES = {
    "StepLR(7, 0.5)": lambda o: S.StepLR(o, 7, 0.5),
    "MultiStepLR([10, 30, 30, 80], 0.3)": lambda o: S.MultiStepLR(o, [10, 30, 30, 80], 0.3),
    "ExponentialLR(0.97)": lambda o: S.ExponentialLR(o, 0.97),
    "CosineAnnealingLR(30, 0.001)": lambda o: S.CosineAnnealingLR(o, 30, 0.001),
    "CosineAnnealingLR(100)": lambda o: S.CosineAnnealingLR(o, 100),
    "LambdaLR(0.95 ** e)": lambda o: S.LambdaLR(o, lambda e: 0.95 ** e),
    "LambdaLR([1 / (e + 1), 0.5 + e / 200])": lambda o: S.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 0.5 + e / 200]),
    "LinearLR(0.25, 1.0, 10)": lambda o: S.LinearLR(o, 0.25, 1.0, 10),
    "LinearLR()": lambda o: S.LinearLR(o),
    "LinearLR(1.0, 0.1, 50)": lambda o: S.LinearLR(o, 1.0, 0.1, 50),
    "SequentialLR([LinearLR(0.1, 1.0, 5), CosineAnnealingLR(95)], [5])":
        lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 5), S.CosineAnnealingLR(o, 95)], [5]),
    "SequentialLR([ExponentialLR(0.9), StepLR(10, 0.5), LinearLR(0.5, 1.0, 20)], [20, 60])":
        lambda o: S.SequentialLR(o, [S.ExponentialLR(o, 0.9), S.StepLR(o, 10, 0.5), S.LinearLR(o, 0.5, 1.0, 20)],
                                 [20, 60]),
}


def schedules(out_dir):
    result = {}
    for name, make in SCHEDULES.items():
        opt = make_optimizer()
        sched = make(opt)
        values = [list(sched.get_last_lr())]
        for _ in range(STEPS):
            opt.step()
            sched.step()
            values.append(list(sched.get_last_lr()))
        result[name] = values
    # Two schedulers stepping the same optimizer (chained): the groups' lr after each step.
    opt = make_optimizer()
    a, b = S.StepLR(opt, 5, 0.5), S.ExponentialLR(opt, 0.99)
    values = [[g["lr"] for g in opt.param_groups]]
    for _ in range(STEPS):
        opt.step()
        a.step()
        b.step()
        values.append([g["lr"] for g in opt.param_groups])
    result["StepLR(5, 0.5) then ExponentialLR(0.99), chained"] = values
    with open(os.path.join(out_dir, "lr_schedulers.json"), "w") as f:
        json.dump({"torch": torch.__version__, "steps": STEPS, "schedules": result}, f, indent=1)


def trace_of(fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000, context=None, stacks="python")
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    out = fn()
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [[e["action"], e["size"]] for e in trace if e["action"] in ("alloc", "free_requested")]
    return out, events


def clip_grad(out_dir):
    if not torch.cuda.is_available():
        return
    dev = "cuda"
    lines = []
    # Gradients of four parameters, sizes 1000x300, 300, 10x300 and 10 (float32), filled deterministically.
    shapes = [(1000, 300), (300,), (10, 300), (10,)]
    for name, call in [
        ("clip_grad_norm_(max_norm=1.0)", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0)),
        ("clip_grad_norm_(max_norm=1e6)", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1e6)),
        ("clip_grad_norm_(1.0, norm_type=inf)", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0, float("inf"))),
        ("clip_grad_norm_(1.0, foreach=False)", lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=False)),
        ("clip_grad_value_(0.01)", lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.01)),
    ]:
        def make_params():
            ps = []
            for i, shape in enumerate(shapes):
                p = torch.nn.Parameter(torch.zeros(shape, device=dev))
                n = math.prod(shape)
                p.grad = (torch.arange(n, device=dev, dtype=torch.float32).reshape(shape) % 7 - 3) * (0.01 * (i + 1))
                ps.append(p)
            return ps

        call(make_params())  # warm-up: the kernels are loaded, so the trace shows the call alone
        params = make_params()
        out, events = trace_of(lambda: call(params))
        norm = float(out) if out is not None else None
        first = params[0].grad.flatten()[:5].tolist()
        lines.append(json.dumps({"call": name, "norm": norm, "grad0_first5": first, "events": events}))
        del params, out
    with open(os.path.join(out_dir, "clip_grad.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    schedules(out_dir)
    clip_grad(out_dir)


if __name__ == "__main__":
    main()
