#!/usr/bin/env python3
"""bench_sdpa's baseline: PyTorch's F.scaled_dot_product_attention (causal) on the same shapes and dtypes, its
forward alone and forward + backward, median of synchronized calls after 3 warm-up calls. On an H100 PyTorch
2.11 runs cuDNN's attention for bf16 and the memory-efficient kernel for fp32 ("default" rows); the bf16
shapes also run with the flash backend forced ("flash" rows), FlashAttention-2 as PyTorch ships it."""
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(steps, fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
print(f"PyTorch {torch.__version__} F.scaled_dot_product_attention on {torch.cuda.get_device_name(0)} "
      f"(causal; median of {steps} synchronized calls)")
print(f"{'B x H x T x D':>22} {'dtype':>9} {'backend':>8} {'forward ms':>12} {'fwd+bwd ms':>16}")


def run(B, H, T, D, dt, backend):
    qkv = torch.randn(B, T, 3 * H * D, device="cuda").to(dt).requires_grad_()
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(H * D, dim=2))
    with torch.no_grad():
        fwd = median_ms(steps, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    g = torch.ones(B, H, T, D, device="cuda", dtype=dt)

    def both():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        qkv.grad = None

    print(f"{f'{B}x{H}x{T}x{D}':>22} {str(dt).split('.')[1]:>9} {backend:>8} {fwd:>12.3f} "
          f"{median_ms(steps, both):>16.3f}")


for B, H, T, D in ((4, 12, 256, 64), (8, 12, 1024, 64), (4, 8, 1024, 128)):
    for dt in (torch.bfloat16, torch.float32):
        run(B, H, T, D, dt, "default")
        if dt == torch.bfloat16:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                run(B, H, T, D, dt, "flash")
