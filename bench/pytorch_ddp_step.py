#!/usr/bin/env python3
"""bench_ddp_gpt2's baseline: PyTorch's GPT-2 small step under DistributedDataParallel on N GPUs (NCCL),
shared/golden/gpt2/gpt2_scenarios.py's model and optimizer, each rank its own B x T batch; the one-GPU step
without DDP and one all_reduce of the whole gradient (what DDP would add if nothing overlapped backward),
timed the same way (median of synchronized steps after
3 warm-up steps).
  python3 pytorch_ddp_step.py N [STEPS [fp32|bf16_sdpa [BATCH [SEQ]]]]    (starts torchrun itself)"""
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2_step import gpt2_step, median_ms  # noqa: E402  (also puts the golden model on the path)


def step_ms(dev, steps, mode, B, T, ddp):
    wrap = (lambda model: DDP(model, device_ids=[dev.index])) if ddp else None
    return median_ms(gpt2_step(B, T, amp=mode != "fp32", sdpa=mode == "bf16_sdpa", device=dev, wrap=wrap), steps)


def rank_main(steps, mode, B, T):
    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl")
    one_gpu = step_ms(dev, steps, mode, B, T, ddp=False) if rank == 0 else 0.0
    dist.barrier()
    flat = torch.zeros(124439808, device=dev)  # GPT-2 small's parameters (wte tied to lm_head)

    def reduce():
        dist.all_reduce(flat)
        torch.cuda.synchronize()

    reduce_ms = median_ms(reduce, steps)
    del flat
    ddp_ms = step_ms(dev, steps, mode, B, T, ddp=True)
    out = [None] * world
    dist.all_gather_object(out, (ddp_ms, reduce_ms))
    if rank == 0:
        slowest = max(o[0] for o in out)
        reduce_max = max(o[1] for o in out)
        print(f"PyTorch {torch.__version__} GPT-2 small {mode} step, {B}x{T} tokens per GPU (AdamW foreach; median "
              f"of {steps} synchronized steps)")
        print(f"one GPU, no DDP: {one_gpu:.2f} ms")
        print(f"{world} ranks under DDP: {slowest:.2f} ms (slowest rank; rank 0 {out[0][0]:.2f})")
        print(f"one all_reduce of the whole gradient alone: {reduce_max:.2f} ms")
        print(f"scaling efficiency {100.0 * one_gpu / slowest:.1f}%; DDP adds {slowest - one_gpu:.2f} ms per step",
              flush=True)
    dist.destroy_process_group()


def main():
    if "LOCAL_RANK" in os.environ:
        rank_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    n = int(sys.argv[1])
    steps = sys.argv[2] if len(sys.argv) > 2 else "20"
    mode = sys.argv[3] if len(sys.argv) > 3 else "bf16_sdpa"
    B = sys.argv[4] if len(sys.argv) > 4 else "8"
    T = sys.argv[5] if len(sys.argv) > 5 else "1024"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    subprocess.run(["torchrun", "--standalone", f"--nproc_per_node={n}", __file__, steps, mode, B, T], env=env,
                   check=True)


if __name__ == "__main__":
    main()
