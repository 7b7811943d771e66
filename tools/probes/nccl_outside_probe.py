#!/usr/bin/env python3
"""What NCCL takes outside PyTorch's caching allocator, per communicator and per first collective of each
kind, on the world group and on subgroups (issues 27 and 28: FSDP2's int `reshard_after_forward` all-gathers
over a subgroup in backward, and each subgroup is a communicator of its own).

  NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=N nccl_outside_probe.py OUT_DIR [broadcast_first]

Each rank writes OUT_DIR/nccl_outside.n<N>.rank<R>.json: {"world_size", "rank", "torch", "nccl",
"steps": [{"label", "device_free", "reserved", "outside_delta"}]}, where outside_delta is the drop in
cudaMemGetInfo's free bytes since the previous step less the growth of the allocator's reserved bytes (every
step synchronizes first): what the step made outside the allocator. The collectives move 1 MiB, so the
allocator's own blocks stay small and cached. Steps: CUDA context, process group (lazy: no communicator),
then on the world group the first all_gather_into_tensor, reduce_scatter_tensor, all_reduce, broadcast and a
second all_gather; then subgroups by new_group (ranks in pairs, [0,1], [2,3], ..., every rank calls
new_group for every pair as PyTorch requires), their first all_gather_into_tensor, reduce_scatter_tensor and
all_reduce; then a second set of subgroups (ranks r and r + N/2, the other dimension of a (N/2, 2) mesh, as
DeviceMesh makes for FSDP2's int reshard) and their first all_gather.

With `broadcast_first` (DDP's order: its constructor broadcasts the module's state before any all_reduce), a
fresh process's world group starts with a broadcast, then all_gather and all_reduce; then a new group of every
rank (a second communicator over the same ranks) starts with a broadcast too, then all_gather and all_reduce.
Files are then named nccl_outside_broadcast_first.n<N>.rank<R>.json.
"""
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    out_dir = sys.argv[1]
    broadcast_first = len(sys.argv) > 2 and sys.argv[2] == "broadcast_first"
    rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    steps = []
    last = {}

    def step(label):
        torch.cuda.synchronize()
        free, _ = torch.cuda.mem_get_info()
        reserved = torch.cuda.memory_reserved()
        delta = 0
        if last:
            delta = (last["free"] - free) - (reserved - last["reserved"])
        last.update(free=free, reserved=reserved)
        steps.append({"label": label, "device_free": free, "reserved": reserved, "outside_delta": delta})

    step("start")
    torch.zeros(1, device=device)
    step("cuda_context")
    dist.init_process_group("nccl")
    step("process_group")

    n = 1 << 18  # float32 elements: 1 MiB per rank
    def gather(group, size):
        out = torch.empty(n * size, device=device)
        dist.all_gather_into_tensor(out, torch.ones(n, device=device), group=group)

    def scatter(group, size):
        out = torch.empty(n, device=device)
        dist.reduce_scatter_tensor(out, torch.ones(n * size, device=device), group=group)

    if broadcast_first:
        dist.broadcast(torch.ones(n, device=device), src=0)
        step("world broadcast (communicator)")
        gather(None, world)
        step("world all_gather_into_tensor")
        dist.all_reduce(torch.ones(n, device=device))
        step("world all_reduce")
        copy = dist.new_group(list(range(world)))
        step("new_group of every rank")
        dist.broadcast(torch.ones(n, device=device), src=0, group=copy)
        step("copy broadcast (communicator)")
        gather(copy, world)
        step("copy all_gather_into_tensor")
        dist.all_reduce(torch.ones(n, device=device), group=copy)
        step("copy all_reduce")
        finish(out_dir, world, rank, steps, "nccl_outside_broadcast_first")
        return

    gather(None, world)
    step("world all_gather_into_tensor (communicator)")
    scatter(None, world)
    step("world reduce_scatter_tensor")
    dist.all_reduce(torch.ones(n, device=device))
    step("world all_reduce")
    dist.broadcast(torch.ones(n, device=device), src=0)
    step("world broadcast")
    gather(None, world)
    step("world all_gather again")

    if world >= 4 and world % 2 == 0:
        pairs = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)]
        step("new_group pairs")
        mine = pairs[rank // 2]
        gather(mine, 2)
        step("pair all_gather_into_tensor (communicator)")
        scatter(mine, 2)
        step("pair reduce_scatter_tensor")
        dist.all_reduce(torch.ones(n, device=device), group=mine)
        step("pair all_reduce")
        half = world // 2
        columns = [dist.new_group(list(range(c, world, half))) for c in range(half)]
        step("new_group columns")
        gather(columns[rank % half], world // half)
        step("column all_gather_into_tensor (communicator)")

    finish(out_dir, world, rank, steps, "nccl_outside")


def finish(out_dir, world, rank, steps, name):
    doc = {"world_size": world, "rank": rank, "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "steps": steps}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.n{world}.rank{rank}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    if rank == 0:
        for s in steps:
            print(f"{s['label']:<48} outside_delta {s['outside_delta'] / 2**20:9.1f} MiB ({s['outside_delta']} B)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
