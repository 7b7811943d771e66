#!/usr/bin/env python3
"""The baseline for bench_training and bench_attention: the same training steps in PyTorch (eager, from
Python), timed the same way (each step synchronized, median of the timed steps after warm-up), on the same
machine in the same run. Prints one table."""
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def median_us(step, warmup, steps):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def seed_mlp(n):
    torch.manual_seed(0)
    l1 = nn.Linear(n, n, bias=False).cuda()
    l2 = nn.Linear(n, 1, bias=False).cuda()
    x = torch.ones(n, n, device="cuda")

    def step():
        l1.zero_grad()
        l2.zero_grad()
        l2(l1(x)).sum().backward()
        torch.cuda.synchronize()
    return median_us(step, 10, 200)


def attention(B=16, L=64, C=256, H=4):
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(C, H, batch_first=True).cuda()
    x = torch.randn(B, L, C, device="cuda")
    target = torch.randn(B, L, C, device="cuda")

    def step():
        y, _ = attn(x, x, x, need_weights=False)
        F.mse_loss(y, target).backward()
        attn.zero_grad()
        torch.cuda.synchronize()
    return median_us(step, 10, 100)


if __name__ == "__main__":
    print(f"PyTorch {torch.__version__} (Python, eager) on {torch.cuda.get_device_name(0)}")
    for n in (256, 1024, 4096):
        print(f"seed MLP n={n:<5} {seed_mlp(n):10.1f} us/step")
    print(f"attention B=16 L=64 C=256 H=4 {attention():10.1f} us/step")
