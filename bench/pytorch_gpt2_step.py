#!/usr/bin/env python3
"""bench_gpt2's baseline: PyTorch's eager GPT-2 small fp32 training step (shared/golden/gpt2/gpt2_scenarios.py's
model and optimizer), timed as bench_gpt2 times its own: median of synchronized steps after 3 warm-up steps.
  pytorch_gpt2_step.py [STEPS [fp32|bf16|bf16_sdpa]]   (bf16: the forward under bf16 autocast; _sdpa: with SDPA)"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared", "golden", "gpt2"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared", "golden"))
import gpt2_scenarios as g  # noqa: E402


def gpt2_step(B, T, amp=False, sdpa=False, device="cuda", wrap=None, cfg=None):
    """One synchronized training step of GPT-2 small (or `cfg`) at B x T tokens on `device`
    (bench/pytorch_gpt2_profile.py, pytorch_ddp_step.py and pytorch_fsdp_step.py use it too); wrap(model), where
    given (DDP's wrapper, or fully_shard applied in place), runs before the optimizer is made over
    model.parameters()."""
    cfg = cfg or g.SMALL
    torch.manual_seed(1337)
    model = g.GPT(cfg, sdpa).to(device)
    wrapped = wrap(model) if wrap else model
    opt = g.make_optimizer(model, foreach=None)
    x = torch.randint(0, cfg.vocab, (B, T), device=device)
    y = torch.randint(0, cfg.vocab, (B, T), device=device)

    def step():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=amp):
            logits, loss = wrapped(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    return step


def median_ms(step, steps):
    """The median wall time of `steps` calls of step() after 3 warm-up calls, in milliseconds (step synchronizes)."""
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    mode = sys.argv[2] if len(sys.argv) > 2 else "fp32"  # fp32 | bf16 (autocast) | bf16_sdpa (autocast + SDPA)
    print(f"PyTorch {torch.__version__} eager GPT-2 small {mode} step (AdamW foreach; median of {steps} synchronized "
          f"steps)")
    for B, T in ((4, 256), (8, 1024)):
        torch.cuda.reset_peak_memory_stats()
        ms = median_ms(gpt2_step(B, T, amp=mode != "fp32", sdpa=mode == "bf16_sdpa"), steps)
        print(f"{B}x{T:<6} {ms:12.2f} ms {torch.cuda.max_memory_allocated():16d}")


if __name__ == "__main__":
    main()
