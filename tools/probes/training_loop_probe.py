#!/usr/bin/env python3
"""Records, in real PyTorch, what issue 29's training-loop pieces do.

Usage: python3 training_loop_probe.py OUT_DIR
Writes OUT_DIR/lr_schedulers.json: for each schedule, get_last_lr() after construction and after each of
100 steps (optimizer.step() before each scheduler.step()), with two param groups (lr 0.1 and 0.02), floats
as Python's repr (json), so they read back bit for bit.
Writes OUT_DIR/clip_grad.jsonl (CUDA only): the allocator's trace (action, size) during clip_grad_norm_ and
clip_grad_value_ on a small model's gradients, with the norm returned.
Writes OUT_DIR/grad_scaler.json (CUDA only): torch.amp.GradScaler's allocation events, call by call (scale,
step, update), over three float16-autocast iterations, the second with an inf gradient (skipped), and the
scale after each update (read by tests/optim/grad_scaler.cpp once copied to tests/data/pytorch_probes/).
Writes OUT_DIR/optimizer_load.json (CUDA only): torch.cuda.memory_allocated and the peak around
Adam.load_state_dict from a same-device state dict, from float32 and float64 host copies, and around the
first step after loading (compared with the arithmetic in tests/optim/state_dict.cpp).
"""
import copy
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


def grad_scaler(out_dir):
    if not torch.cuda.is_available():
        return
    dev = "cuda"
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(64, 32, device=dev) * 0.01)
    x = torch.randn(8, 64, device=dev)
    opt = torch.optim.SGD([p], lr=0.01)
    scaler = torch.amp.GradScaler("cuda")
    # Warm-up on a scaler of its own, so that kernel loading does not show in the traces.
    warm = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        loss = (x @ p).float().pow(2).mean()
    warm.scale(loss).backward()
    warm.step(opt)
    warm.update()
    iterations = []
    for i in range(3):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = (x @ p).float().pow(2).mean()
        scaled, scale_events = trace_of(lambda: scaler.scale(loss))
        scaled.backward()
        poisoned = i == 1
        if poisoned:
            p.grad.fill_(float("inf"))
        before = p.detach().clone()
        _, step_events = trace_of(lambda: scaler.step(opt))
        stepped = not torch.equal(before, p.detach())
        _, update_events = trace_of(lambda: scaler.update())
        iterations.append({"poisoned": poisoned, "stepped": stepped, "scale": scale_events, "step": step_events,
                           "update": update_events, "scale_after": scaler.get_scale(),
                           "growth_tracker_after": scaler._get_growth_tracker()})
        del scaled, before
    # unscale_ called on its own (before clipping), then step.
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = (x @ p).float().pow(2).mean()
    scaler.scale(loss).backward()
    _, unscale_events = trace_of(lambda: scaler.unscale_(opt))
    _, step_after_unscale = trace_of(lambda: scaler.step(opt))
    scaler.update()
    with open(os.path.join(out_dir, "grad_scaler.json"), "w") as f:
        json.dump({"torch": torch.__version__, "iterations": iterations, "unscale_": unscale_events,
                   "step_after_unscale_": step_after_unscale, "state_dict": scaler.state_dict()}, f, indent=1)


def optimizer_load(out_dir):
    if not torch.cuda.is_available():
        return
    dev = "cuda"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(dev)
    x, y = torch.randn(16, 4, device=dev), torch.randn(16, 1, device=dev)

    def train_step(opt):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    source = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    train_step(source)
    result = {"torch": torch.__version__}

    def measure(name, fn):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        result[name] = {"allocated_delta": torch.cuda.memory_allocated() - start,
                        "peak_delta": torch.cuda.max_memory_allocated() - start}

    same = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    measure("load_same_device", lambda: same.load_state_dict(source.state_dict()))
    host = copy.deepcopy(source.state_dict())
    for entry in host["state"].values():
        for k, v in list(entry.items()):
            if k != "step":
                entry[k] = v.cpu()
    own = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    train_step(own)
    measure("load_host_float32_over_existing_state", lambda: own.load_state_dict(host))
    host64 = copy.deepcopy(host)
    for entry in host64["state"].values():
        for k, v in list(entry.items()):
            if k != "step":
                entry[k] = v.double()
    fresh = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    measure("load_host_float64_fresh", lambda: fresh.load_state_dict(host64))
    fresh.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    measure("first_step_after_load", lambda: fresh.step())
    with open(os.path.join(out_dir, "optimizer_load.json"), "w") as f:
        json.dump(result, f, indent=1)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    schedules(out_dir)
    clip_grad(out_dir)
    grad_scaler(out_dir)
    optimizer_load(out_dir)


if __name__ == "__main__":
    main()
