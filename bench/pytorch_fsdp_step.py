#!/usr/bin/env python3
"""bench_fsdp_gpt2's baseline: PyTorch's GPT-2 small step under FSDP2 on N GPUs (NCCL), fully_shard on each
transformer block then on the root (reshard_after_forward at its default), as tools/probes/fsdp_probe.py applies
it; shared/golden/gpt2/gpt2_scenarios.py's model and AdamW (foreach over the DTensor shards), each rank its own
B x T batch. Beside it the one-GPU step without FSDP, one all_gather of the whole model and one reduce_scatter
of the whole gradient alone, and each rank's peak allocated and reserved bytes over the FSDP run; timed as
bench_fsdp_gpt2 times its own (median of synchronized steps after 3 warm-up steps).
  python3 pytorch_fsdp_step.py N [STEPS [fp32|bf16_sdpa [BATCH [SEQ]]]] [--tiny]    (starts torchrun itself)
  --tiny: nanoGPT tiny (2 layers, 64 wide, vocabulary 512, block 64) instead of GPT-2 small."""
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpt2_step import g, gpt2_step, median_ms  # noqa: E402  (also puts the golden model on the path)


def shard(model):
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    return model


def parameters(cfg):
    """nanoGPT's parameter count, wte tied to lm_head (124,439,808 for GPT-2 small)."""
    e = cfg.n_embd
    return cfg.vocab * e + cfg.block * e + cfg.n_layer * (12 * e * e + 13 * e) + 2 * e


def step_ms(dev, steps, mode, B, T, cfg, fsdp):
    return median_ms(gpt2_step(B, T, amp=mode != "fp32", sdpa=mode == "bf16_sdpa", device=dev,
                               wrap=shard if fsdp else None, cfg=cfg), steps)


def comm_ms(dev, steps, world, cfg):
    shard_numel = -(-parameters(cfg) // world)
    full = torch.zeros(shard_numel * world, device=dev)
    part = torch.zeros(shard_numel, device=dev)

    def gather():
        dist.all_gather_into_tensor(full, part)
        torch.cuda.synchronize()

    def scatter():
        dist.reduce_scatter_tensor(part, full, op=dist.ReduceOp.AVG)
        torch.cuda.synchronize()

    return median_ms(gather, steps), median_ms(scatter, steps)


def rank_main(steps, mode, B, T, tiny):
    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl")
    cfg = g.TINY if tiny else g.SMALL
    one_gpu, one_alloc, one_reserved = 0.0, 0, 0
    if rank == 0:
        torch.cuda.reset_peak_memory_stats(dev)
        one_gpu = step_ms(dev, steps, mode, B, T, cfg, fsdp=False)
        one_alloc, one_reserved = torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev)
    dist.barrier()
    ag_ms, rs_ms = comm_ms(dev, steps, world, cfg)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    fsdp_ms = step_ms(dev, steps, mode, B, T, cfg, fsdp=True)
    mine = (fsdp_ms, torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev), ag_ms, rs_ms)
    out = [None] * world
    dist.all_gather_object(out, mine)
    if rank == 0:
        slowest = max(o[0] for o in out)
        peak_alloc, peak_reserved = max(o[1] for o in out), max(o[2] for o in out)
        ag, rs = max(o[3] for o in out), max(o[4] for o in out)
        model = "nanoGPT tiny" if tiny else "GPT-2 small"
        print(f"PyTorch {torch.__version__} {model} {mode} step under FSDP2 (nccl), {B}x{T} tokens per GPU (AdamW "
              f"foreach; median of {steps} synchronized steps)")
        print(f"one GPU, no FSDP: {one_gpu:.2f} ms (peak allocated {one_alloc}, reserved {one_reserved})")
        print(f"{world} ranks under FSDP2: {slowest:.2f} ms (slowest rank; rank 0 {out[0][0]:.2f})")
        for r, o in enumerate(out):
            print(f"  rank {r}: {o[0]:.2f} ms, peak allocated {o[1]}, reserved {o[2]}")
        print(f"one all_gather of the whole model alone: {ag:.2f} ms; one reduce_scatter of the whole gradient: "
              f"{rs:.2f} ms")
        print(f"scaling efficiency {100.0 * one_gpu / slowest:.1f}%; FSDP2 adds {slowest - one_gpu:.2f} ms per step")
        print(f"result impl=pytorch model={'tiny' if tiny else 'small'} mode={mode} batch={B} seq={T} world={world} "
              f"one_gpu_ms={one_gpu:.3f} fsdp_ms={slowest:.3f} all_gather_ms={ag:.3f} reduce_scatter_ms={rs:.3f} "
              f"peak_allocated_max={peak_alloc} peak_reserved_max={peak_reserved}", flush=True)
    dist.destroy_process_group()


def main():
    tiny = "--tiny" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--tiny"]
    if "LOCAL_RANK" in os.environ:
        rank_main(int(args[0]), args[1], int(args[2]), int(args[3]), tiny)
        return
    n = int(args[0])
    steps = args[1] if len(args) > 1 else "20"
    mode = args[2] if len(args) > 2 else "bf16_sdpa"
    B = args[3] if len(args) > 3 else "8"
    T = args[4] if len(args) > 4 else "1024"
    if mode not in ("fp32", "bf16_sdpa"):
        sys.exit(f"pytorch_fsdp_step.py: mode '{mode}': expected fp32 or bf16_sdpa")
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    subprocess.run(["torchrun", "--standalone", f"--nproc_per_node={n}", __file__, steps, mode, B, T]
                   + (["--tiny"] if tiny else []), env=env, check=True)


if __name__ == "__main__":
    main()
