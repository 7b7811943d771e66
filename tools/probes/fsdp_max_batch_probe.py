"""The largest batch of GPT-2 small under FSDP2 that trains within an allocator cap, in real PyTorch 2.11 with
NCCL: what `bytegrad-estimate gpt2 --seq T --fsdp N --limit SIZE --max-batch` is held to (issue 28).

  python3 fsdp_max_batch_probe.py N LIMIT_BYTES T BATCH...   each batch in fresh processes (torchrun); prints
                                                             "batch B: fits" or "batch B: out of memory"
  torchrun --standalone --nproc_per_node=N fsdp_max_batch_probe.py --rank LIMIT_BYTES T B   (one try)

Each rank caps its allocator at LIMIT_BYTES as the estimator's --limit does:
torch.cuda.set_per_process_memory_fraction(LIMIT_BYTES / the card's total). The program is fsdp_probe.py's
gpt2_small_fsdp (each block, then the root, under fully_shard; nanoGPT's AdamW; three iterations) at batch B.
A rank that runs out of memory exits with status 3, and torchrun stops the others. Keep NCCL_NVLS_ENABLE=0.

  python3 fsdp_max_batch_probe.py --detail DIR N LIMIT_BYTES T BATCH...
      the same, and each rank records its memory history (no stacks): at an out-of-memory it prints the whole
      message and writes DIR/n{N}_b{B}_rank{R}_oom.pickle (a memory_viz snapshot with the trace up to it); a
      rank that fits prints its max_memory_allocated / max_memory_reserved. LIMIT_BYTES 0: no cap.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_OF_MEMORY = 3


class NoMarks:
    def mark(self, label):
        pass


def run_rank(limit, T, B, detail=None):
    import torch
    import torch.distributed as dist

    sys.path.insert(0, HERE)
    from fsdp_probe import gpt2_program

    rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    if limit:
        torch.cuda.set_per_process_memory_fraction(limit / torch.cuda.mem_get_info()[1])
    dist.init_process_group("nccl")
    if detail:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None, stacks="python")
    try:
        gpt2_program(NoMarks(), rank, world, "small", B, T)
    except torch.OutOfMemoryError as e:
        message = str(e) if detail else str(e).splitlines()[0]
        print(f"rank {rank}: out of memory at batch {B}: {message}", flush=True)
        if detail:
            torch.cuda.memory._dump_snapshot(os.path.join(detail, f"n{world}_b{B}_rank{rank}_oom.pickle"))
        os._exit(OUT_OF_MEMORY)
    if detail:
        print(f"rank {rank} batch {B}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
              f"max_memory_reserved {torch.cuda.max_memory_reserved()} "
              f"num_alloc_retries {torch.cuda.memory_stats()['num_alloc_retries']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    args = sys.argv[1:]
    detail = None
    if args[0] == "--detail":
        detail = os.path.abspath(args[1])
        os.makedirs(detail, exist_ok=True)
        args = args[2:]
    if args[0] == "--rank":
        run_rank(int(args[1]), int(args[2]), int(args[3]), os.environ.get("FSDP_PROBE_DETAIL"))
        return
    n, limit, T = int(args[0]), int(args[1]), int(args[2])
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    if detail:
        env["FSDP_PROBE_DETAIL"] = detail
    for B in (int(b) for b in args[3:]):
        p = subprocess.run(["torchrun", "--standalone", f"--nproc_per_node={n}", __file__, "--rank", str(limit), str(T),
                            str(B)], env=env, capture_output=True, text=True, timeout=300)
        oom = "out of memory at batch" in p.stdout
        verdict = "fits" if p.returncode == 0 else "out of memory" if oom else f"failed (rc {p.returncode})"
        print(f"N {n} limit {limit} T {T} batch {B}: {verdict}", flush=True)
        if detail:
            print("\n".join(line for line in p.stdout.splitlines() if line.startswith("rank ")), flush=True)
        if p.returncode != 0 and not oom:
            print(p.stdout[-2000:], p.stderr[-2000:], flush=True)


if __name__ == "__main__":
    main()
