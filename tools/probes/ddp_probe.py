#!/usr/bin/env python3
"""Records, in real PyTorch 2.11 with NCCL, what every rank's caching allocator holds under
DistributedDataParallel and ZeroRedundancyOptimizer (issue 27): the goldens the distributed layer is held to.

  torchrun --standalone --nproc_per_node=N ddp_probe.py OUT_DIR PROGRAM RUN
  python3 ddp_probe.py --all OUT_DIR N REPEATS [PROGRAM...]   each run in fresh processes; OUT_DIR.tgz at the end

Each rank writes OUT_DIR/<PROGRAM>.n<N>.run<RUN>.rank<R>.json:
  {"program", "world_size", "rank", "run", "marks": [{"label", "allocated", "reserved", "max_allocated",
   "max_reserved", "active", "segments", "blocks", "requested", "inactive_split", "num_device_alloc",
   "num_device_free", "num_sync_all_streams", "device_free", "streams": {stream_ordinal: [reserved, allocated]}}],
   "trace": [[action, size, stream_ordinal], ...]}
Every mark synchronizes the device first, so a run's figures do not depend on how far the GPU got (a replay
synchronizes at the same points). Measured 2026-11-26 on two H200s: all 12 programs ran (rc 0, about 7 minutes
for 2 repeats); the files were not kept (fetch OUT_DIR.tgz). device_free is cudaMemGetInfo's free bytes: NCCL's own buffers and the CUDA context show there, never in the
allocator's figures. Streams are numbered by first appearance (0: the default stream). Keep NCCL_NVLS_ENABLE=0.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import ITERATIONS, main, nanogpt, token_batch, train  # noqa: E402  (same folder; also puts nanoGPT on the path)


# ------------------------------------------------------------------------------------------ the models

class MLP(nn.Module):
    """1024 -> 4096 -> 4096 -> 10: 20.8M parameters (83 MB of float32), several 25 MiB buckets."""

    def __init__(self, unused=False):
        super().__init__()
        self.fc1 = nn.Linear(1024, 4096)
        self.fc2 = nn.Linear(4096, 4096)
        self.fc3 = nn.Linear(4096, 10)
        self.unused = nn.Linear(256, 256) if unused else None

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def mlp_program(r, rank, ddp_kwargs=None, no_sync=False, zero1=False, zero_bucket_view=False):
    dev = torch.device("cuda", rank)
    torch.manual_seed(1337)
    model = MLP(unused=bool(ddp_kwargs and ddp_kwargs.get("find_unused_parameters"))).to(dev)
    r.mark("model")
    ddp = DDP(model, device_ids=[rank], **(ddp_kwargs or {}))
    r.mark("wrapped")
    if zero1:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3,
                                      parameters_as_bucket_view=zero_bucket_view)
    else:
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    torch.manual_seed(100 + rank)
    x = torch.randn(64, 1024, device=dev)
    y = torch.randint(0, 10, (64,), device=dev)
    r.mark("data")
    for i in range(ITERATIONS):
        if no_sync:
            with ddp.no_sync():
                loss = F.cross_entropy(ddp(x), y)
                r.mark(f"s{i}_no_sync_forward")
                loss.backward()
                del loss
                r.mark(f"s{i}_no_sync_backward")
        loss = F.cross_entropy(ddp(x), y)
        r.mark(f"s{i}_forward")
        loss.backward()
        r.mark(f"s{i}_backward")
        opt.step()
        r.mark(f"s{i}_step")
        opt.zero_grad(set_to_none=True)
        del loss
        r.mark(f"s{i}_zero_grad")


def gpt2_program(r, rank, cfg_name, B, T, ddp_kwargs=None, zero1=False, zero_bucket_view=False):
    g, cfg, model = nanogpt(rank, cfg_name)
    r.mark("model")
    ddp = DDP(model, device_ids=[rank], **(ddp_kwargs or {}))
    r.mark("wrapped")
    if zero1:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=6e-4,
                                      betas=(0.9, 0.95), weight_decay=0.1,
                                      parameters_as_bucket_view=zero_bucket_view)
    else:
        opt = g.make_optimizer(model, None)
    x, y = token_batch(rank, cfg, B, T)
    r.mark("data")
    train(r, ddp, opt, ((x, y), None))


PROGRAMS = {
    "mlp_ddp": lambda r, rank, w: mlp_program(r, rank),
    "mlp_ddp_bucket_view": lambda r, rank, w: mlp_program(r, rank, {"gradient_as_bucket_view": True}),
    "mlp_ddp_cap1": lambda r, rank, w: mlp_program(r, rank, {"bucket_cap_mb": 1}),
    "mlp_ddp_unused": lambda r, rank, w: mlp_program(r, rank, {"find_unused_parameters": True}),
    "mlp_ddp_static": lambda r, rank, w: mlp_program(r, rank, {"static_graph": True}),
    "mlp_ddp_no_sync": lambda r, rank, w: mlp_program(r, rank, no_sync=True),
    "mlp_zero1": lambda r, rank, w: mlp_program(r, rank, zero1=True),
    # parameters_as_bucket_view: the constructor's flat bucket per rank, parameters re-pointed into it.
    "mlp_zero1_bucket_view": lambda r, rank, w: mlp_program(r, rank, zero1=True, zero_bucket_view=True),
    "gpt2_tiny_ddp": lambda r, rank, w: gpt2_program(r, rank, "tiny", 4, 64),
    "gpt2_tiny_ddp_bucket_view": lambda r, rank, w: gpt2_program(r, rank, "tiny", 4, 64,
                                                                 {"gradient_as_bucket_view": True}),
    "gpt2_small_ddp": lambda r, rank, w: gpt2_program(r, rank, "small", 4, 256),
    "gpt2_small_ddp_bucket_view": lambda r, rank, w: gpt2_program(r, rank, "small", 4, 256,
                                                                  {"gradient_as_bucket_view": True}),
    "gpt2_small_zero1": lambda r, rank, w: gpt2_program(r, rank, "small", 4, 256, zero1=True),
    "gpt2_tiny_zero1_bucket_view": lambda r, rank, w: gpt2_program(r, rank, "tiny", 4, 64, zero1=True,
                                                                   zero_bucket_view=True),
}


if __name__ == "__main__":
    main(PROGRAMS, __file__)
