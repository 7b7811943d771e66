#!/usr/bin/env python3
"""Where PyTorch's eager GPT-2 small fp32 training step spends its GPU time (bench/pytorch_gpt2_step.py's step,
the golden program's model and AdamW foreach), under torch.profiler: per CUDA kernel name (top 30), per aten op
that launched the kernels (self device time), and per autograd node. bytegrad's side of the same table is
`BYTEGRAD_PROFILE_KERNELS=1 build/bench/bench_gpt2 cuda STEPS`.
    pytorch_gpt2_profile.py [STEPS] [fp32|bf16|bf16_sdpa] [compile] [BxT ...]   (default: 5 fp32 steps at 4x256
    and 8x1024; bf16: the forward under bf16 autocast, _sdpa: with SDPA, as pytorch_gpt2_step.py; compile: the
    model under torch.compile, as bench/pytorch_compile_step.py times it: what a compiler's kernels are)"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2_step import gpt2_step  # noqa: E402


def device_us(e, self_time):
    for name in (("self_device_time_total", "self_cuda_time_total") if self_time
                 else ("device_time_total", "cuda_time_total")):
        v = getattr(e, name, None)
        if v is not None:
            return v
    return 0.0


def table(title, rows, steps, total_us, top):
    print(f"{title:<72} {'calls':>7} {'total ms':>10} {'ms/step':>9} {'%':>6}")
    for name, calls, us in rows[:top]:
        print(f"{name[:72]:<72} {calls:>7} {us / 1e3:>10.3f} {us / 1e3 / steps:>9.3f} {100 * us / total_us:>6.2f}")


def profile_size(B, T, steps, mode, compiled):
    step = gpt2_step(B, T, amp=mode != "fp32", sdpa=mode == "bf16_sdpa", wrap=torch.compile if compiled else None)
    for _ in range(5 if compiled else 3):
        step()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    # CUDA-side events that are not kernels or copies (the optimizer's user annotation on the GPU timeline)
    # would count their span twice.
    kernels = [(e.key, e.count, device_us(e, True)) for e in events
               if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.key.startswith(("Optimizer.", "ProfilerStep"))]
    kernels.sort(key=lambda r: -r[2])
    total = sum(r[2] for r in kernels) or 1.0
    print(f"\n{B} x {T} tokens: {total / 1e3:.3f} ms of CUDA kernels and copies over {steps} steps, "
          f"{total / 1e3 / steps:.3f} ms per step")
    table("by CUDA kernel (top 30)", kernels, steps, total, 30)
    ops = [(e.key, e.count, device_us(e, True)) for e in events
           if e.device_type != torch.autograd.DeviceType.CUDA and device_us(e, True) > 0]
    ops.sort(key=lambda r: -r[2])
    print()
    table("by op that launched the kernels (self device time)", ops, steps, total, 40)
    nodes = [(e.key.replace("autograd::engine::evaluate_function: ", ""), e.count, device_us(e, False)) for e in events
             if e.key.startswith("autograd::engine::evaluate_function: ")]
    nodes.sort(key=lambda r: -r[2])
    print()
    table("by autograd node (device time, children included)", nodes, steps, total, 30)
    sys.stdout.flush()


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
modes = [a for a in sys.argv[2:] if a in ("fp32", "bf16", "bf16_sdpa")]
mode = modes[0] if modes else "fp32"
compiled = "compile" in sys.argv[2:]
sizes = [tuple(int(v) for v in a.split("x")) for a in sys.argv[2:] if a not in modes and a != "compile"] \
    or [(4, 256), (8, 1024)]
print(f"PyTorch {torch.__version__} {'torch.compile' if compiled else 'eager'} GPT-2 small {mode} step "
      f"(AdamW foreach) under torch.profiler, {steps} steps")
for B, T in sizes:
    if compiled:
        torch._dynamo.reset()
    profile_size(B, T, steps, mode, compiled)
