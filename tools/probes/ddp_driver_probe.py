#!/usr/bin/env python3
"""Where the driver, NCCL and the host put their own allocations in a DDP process, beside PyTorch's segments
(issue 27; docs/evidence/ddp_addresses/README.md says why: PyTorch's GPT-2 small DDP processes lay their
segments out in a way bytegrad's placement model does not, a free range above DDP's broadcast buffers that
the forward fills upward, and which 32 MiB slots among `.to()`'s segments are free differs per process).

  torchrun --standalone --nproc_per_node=2 ddp_driver_probe.py OUT_DIR [PROGRAM]     (default gpt2_small_ddp)

Runs ddp_probe.py's PROGRAM through its first step on every rank and, like driver_allocations_probe.py,
scans the device address range around PyTorch's segments (cuMemGetAddressRange) and the process's address
map: after the process group, after every op from the model's construction through the first forward
(the main thread's ops), and at every mark. Each rank writes OUT_DIR/<PROGRAM>.rank<R>.log (every segment,
foreign allocation and mapping of 1 MiB or more that appeared or went, relative to the anchor: the highest
segment after the model's `.to()`) and OUT_DIR/<PROGRAM>.rank<R>.json (ddp_probe.py's recording, with
addresses, for ddp_placement.py). Keep NCCL_NVLS_ENABLE=0.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ddp_probe  # noqa: E402  (same folder)
import driver_allocations_probe as dap  # noqa: E402
import probe_common  # noqa: E402

# The scanner, the reporter and the every-op dispatch mode of driver_allocations_probe.py's child program
# (everything before it picks a program).
SCANNER = {}
exec(dap.CHILD.split("\nprog = sys.argv[1]")[0], SCANNER)


class ScanningRecorder(probe_common.Recorder):
    def mark(self, label):
        super().mark(label)
        SCANNER["report"](f"mark {label}")
        # Every op until the first forward ends; marks only after it (the backward runs on autograd's thread).
        SCANNER["state"]["marks_only"] = label not in ("start", "process_group", "model", "wrapped", "data")


def main():
    out_dir = sys.argv[1]
    program = sys.argv[2] if len(sys.argv) > 2 else "gpt2_small_ddp"
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    os.makedirs(out_dir, exist_ok=True)
    log = open(os.path.join(out_dir, f"{program}.rank{rank}.log"), "w")
    sys.stdout = log
    ddp_probe.ITERATIONS = probe_common.ITERATIONS = 1
    r = ScanningRecorder()
    r.mark("start")
    dist.init_process_group("nccl")
    r.mark("process_group")
    with SCANNER["EveryOp"]():
        ddp_probe.PROGRAMS[program](r, rank, int(os.environ["WORLD_SIZE"]))
    doc = {"program": program, "rank": rank, "torch": torch.__version__, "marks": r.marks, "trace": r.trace()}
    with open(os.path.join(out_dir, f"{program}.rank{rank}.json"), "w") as f:
        json.dump(doc, f)
    log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
