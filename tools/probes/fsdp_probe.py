#!/usr/bin/env python3
"""Records, in real PyTorch 2.11 with NCCL, what every rank's caching allocator holds under FSDP2
(`fully_shard`, issue 28): the goldens the sharded-training layer is held to.

  torchrun --standalone --nproc_per_node=N fsdp_probe.py OUT_DIR PROGRAM RUN
  python3 fsdp_probe.py --all OUT_DIR N REPEATS [PROGRAM...]   each run in fresh processes; OUT_DIR.tgz at the end

The file format is ddp_probe.py's (marks with per-stream figures, the allocator trace by stream ordinal:
0 is the default stream, the others numbered by first appearance). fully_shard is applied as PyTorch's
examples and torchtitan apply it: to each Linear of the MLP (each transformer block of nanoGPT), then to the
root. Every program runs three iterations of forward, backward, (clip,) step, zero_grad(set_to_none=True).
Keep NCCL_NVLS_ENABLE=0.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_probe import MLP  # noqa: E402  (same folder)
from probe_common import main, nanogpt, token_batch, train  # noqa: E402  (also puts the nanoGPT model on the path)


class UnevenMLP(nn.Module):
    """1000 -> 3001 -> 1001 -> 10: first dimensions that no world size of 2 or 4 divides evenly."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1000, 3001)
        self.fc2 = nn.Linear(3001, 1001)
        self.fc3 = nn.Linear(1001, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def shard_kwargs(reshard, mixed):
    kw = {}
    if reshard is not None:
        kw["reshard_after_forward"] = reshard
    if mixed:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return kw


def mlp_program(r, rank, world, reshard=None, mixed=False, uneven=False, meta=False):
    dev = torch.device("cuda", rank)
    torch.manual_seed(1337)
    make = UnevenMLP if uneven else MLP
    if meta:
        with torch.device("meta"):
            model = make()
    else:
        model = make().to(dev)
    r.mark("model")
    kw = shard_kwargs(reshard, mixed)
    for layer in (model.fc1, model.fc2, model.fc3):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    r.mark("sharded")
    if meta:
        model.to_empty(device=dev)
        r.mark("to_empty")
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()
        r.mark("initialised")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(100 + rank)
    x = torch.randn(64, 1000 if uneven else 1024, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    r.mark("data")
    train(r, model, opt, (x, y), clip=False)


def gpt2_program(r, rank, world, cfg_name, B, T, reshard=None, mixed=False, clip=False, amp=None,
                 checkpoint=False):
    if checkpoint:
        # Each Block's forward under torch.utils.checkpoint(use_reentrant=False), as gpt2_sweep.py does: the
        # block's FSDP hooks run around it, the recomputation in backward calls the plain forward.
        import torch.utils.checkpoint
        import gpt2_scenarios as g
        plain = g.Block.forward
        g.Block.forward = lambda self, x: torch.utils.checkpoint.checkpoint(plain, self, x, use_reentrant=False)
    g, cfg, model = nanogpt(rank, cfg_name)
    r.mark("model")
    kw = shard_kwargs(reshard, mixed)
    for block in model.transformer.h:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    r.mark("sharded")
    opt = g.make_optimizer(model, None)
    x, y = token_batch(rank, cfg, B, T)
    r.mark("data")
    train(r, model, opt, ((x, y), None), clip=clip, amp=amp)


PROGRAMS = {
    "mlp_fsdp": lambda r, rank, w: mlp_program(r, rank, w),
    "mlp_fsdp_no_reshard": lambda r, rank, w: mlp_program(r, rank, w, reshard=False),
    "mlp_fsdp_reshard_int": lambda r, rank, w: mlp_program(r, rank, w, reshard=max(1, w // 2)),
    "mlp_fsdp_mixed": lambda r, rank, w: mlp_program(r, rank, w, mixed=True),
    "mlp_fsdp_uneven": lambda r, rank, w: mlp_program(r, rank, w, uneven=True),
    "mlp_fsdp_meta": lambda r, rank, w: mlp_program(r, rank, w, meta=True),
    "gpt2_tiny_fsdp": lambda r, rank, w: gpt2_program(r, rank, w, "tiny", 4, 64),
    "gpt2_tiny_fsdp_no_reshard": lambda r, rank, w: gpt2_program(r, rank, w, "tiny", 4, 64, reshard=False),
    "gpt2_tiny_fsdp_mixed": lambda r, rank, w: gpt2_program(r, rank, w, "tiny", 4, 64, mixed=True),
    "gpt2_tiny_fsdp_clip": lambda r, rank, w: gpt2_program(r, rank, w, "tiny", 4, 64, clip=True),
    "gpt2_tiny_fsdp_amp": lambda r, rank, w: gpt2_program(r, rank, w, "tiny", 4, 64, amp=torch.bfloat16),
    "gpt2_tiny_fsdp_checkpoint": lambda r, rank, w: gpt2_program(r, rank, w, "tiny", 4, 64, checkpoint=True),
    "gpt2_small_fsdp": lambda r, rank, w: gpt2_program(r, rank, w, "small", 4, 256),
    "gpt2_small_fsdp_mixed": lambda r, rank, w: gpt2_program(r, rank, w, "small", 4, 256, mixed=True),
}


if __name__ == "__main__":
    main(PROGRAMS, __file__)
