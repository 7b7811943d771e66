"""What ddp_probe.py and fsdp_probe.py share: the Recorder (a rank's marks and allocator trace), the training
loop every program ends with, and the runner behind both command lines:

  torchrun --standalone --nproc_per_node=N PROBE.py OUT_DIR PROGRAM RUN
  python3 PROBE.py --all OUT_DIR N REPEATS [PROGRAM...]   each run in fresh processes; OUT_DIR.tgz at the end

A probe's PROGRAMS maps a name to program(recorder, rank, world_size); the file format is ddp_probe.py's.
"""
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
# The nanoGPT model (gpt2_scenarios) and the scenarios it imports.
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "golden", "gpt2"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "shared", "golden"))

ITERATIONS = 3


class Recorder:
    def __init__(self):
        self.marks = []
        self.streams = {0: 0}
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None, stacks="python")

    def stream(self, s):
        return self.streams.setdefault(s, len(self.streams))

    def mark(self, label):
        torch.cuda.synchronize()
        st = torch.cuda.memory_stats()
        per_stream = {}
        for seg in torch.cuda.memory._snapshot()["segments"]:
            entry = per_stream.setdefault(self.stream(seg["stream"]), [0, 0])
            entry[0] += seg["total_size"]
            entry[1] += seg["allocated_size"]
        self.marks.append({
            "label": label,
            "allocated": st.get("allocated_bytes.all.current", 0),
            "reserved": st.get("reserved_bytes.all.current", 0),
            "max_allocated": st.get("allocated_bytes.all.peak", 0),
            "max_reserved": st.get("reserved_bytes.all.peak", 0),
            "active": st.get("active_bytes.all.current", 0),
            "segments": st.get("segment.all.current", 0),
            "blocks": st.get("allocation.all.current", 0),
            "requested": st.get("requested_bytes.all.current", 0),
            "inactive_split": st.get("inactive_split_bytes.all.current", 0),
            "num_device_alloc": st.get("num_device_alloc", 0),
            "num_device_free": st.get("num_device_free", 0),
            "num_sync_all_streams": st.get("num_sync_all_streams", 0),
            "device_free": torch.cuda.mem_get_info()[0],
            "streams": {str(k): v for k, v in sorted(per_stream.items())},
        })

    def trace(self):
        entries = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
        # [action, size, stream ordinal, address]: the address says which of two equal free blocks best fit
        # took (placement ties, issue 31); the tests read the first three.
        out = [[e["action"], e.get("size", 0), self.stream(e.get("stream", 0)), e.get("addr", 0)] for e in entries
               if e["action"] != "snapshot"]
        torch.cuda.memory._record_memory_history(enabled=None)
        return out


def nanogpt(rank, cfg_name):
    """The probes' nanoGPT (shared/golden/gpt2/gpt2_scenarios.py) of config "tiny" or "small", seeded and on
    this rank's GPU: (the gpt2_scenarios module, the config, the model)."""
    import gpt2_scenarios as g
    dev = torch.device("cuda", rank)
    g.DEV = dev
    cfg = {"tiny": g.TINY, "small": g.SMALL}[cfg_name]
    torch.manual_seed(1337)
    return g, cfg, g.GPT(cfg).to(dev)


def token_batch(rank, cfg, B, T):
    """This rank's B x T batch of tokens and targets, seeded by rank."""
    dev = torch.device("cuda", rank)
    torch.manual_seed(100 + rank)
    x = torch.randint(0, cfg.vocab, (B, T), device=dev)
    y = torch.randint(0, cfg.vocab, (B, T), device=dev)
    return x, y


def train(r, model, opt, batch, clip=False, before_each=None, amp=None):
    """ITERATIONS of forward, backward, (clip,) step, zero_grad(set_to_none=True), marked after each. batch is
    (x, y) for a classifier (cross_entropy on its output) or ((x, y), None) for nanoGPT (its own loss);
    before_each(i), where given, runs first in iteration i; amp (a dtype), where given, runs the forward and
    loss under torch.autocast(device_type="cuda", dtype=amp)."""
    import contextlib
    x, y = batch
    for i in range(ITERATIONS):
        if before_each:
            before_each(i)
        with torch.autocast(device_type="cuda", dtype=amp) if amp else contextlib.nullcontext():
            out = model(*x) if isinstance(x, tuple) else model(x)
            loss = out[1] if isinstance(out, tuple) else F.cross_entropy(out, y)
        r.mark(f"s{i}_forward")
        loss.backward()
        r.mark(f"s{i}_backward")
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            r.mark(f"s{i}_clip")
        opt.step()
        r.mark(f"s{i}_step")
        opt.zero_grad(set_to_none=True)
        del out, loss
        r.mark(f"s{i}_zero_grad")


def run_rank(programs, out_dir, program, run):
    rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    r = Recorder()
    r.mark("start")
    dist.init_process_group("nccl")
    r.mark("process_group")
    programs[program](r, rank, world)
    doc = {"program": program, "world_size": world, "rank": rank, "run": run, "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "marks": r.marks, "trace": r.trace()}
    with open(os.path.join(out_dir, f"{program}.n{world}.run{run}.rank{rank}.json"), "w") as f:
        json.dump(doc, f)
    dist.barrier()
    dist.destroy_process_group()


def main(programs, script):
    """The probe's command line (see above); script is the probe's own file, which --all runs under torchrun."""
    args = sys.argv[1:]
    if args[0] == "--all":
        out_dir, n, repeats = args[1], int(args[2]), int(args[3])
        names = args[4:] or list(programs)
        os.makedirs(out_dir, exist_ok=True)
        env = dict(os.environ, NCCL_NVLS_ENABLE="0")
        for name in names:
            for run in range(repeats):
                p = subprocess.run(["torchrun", "--standalone", f"--nproc_per_node={n}", script, out_dir, name,
                                    str(run)], env=env, capture_output=True, text=True, timeout=300)
                print(name, run, "rc", p.returncode, p.stderr[-3000:] if p.returncode else "", flush=True)
        # One archive: the device tool brings back only a few files of a folder.
        subprocess.run(["tar", "czf", out_dir.rstrip("/") + ".tgz", "-C", os.path.dirname(os.path.abspath(out_dir)),
                        os.path.basename(out_dir.rstrip("/"))], check=True)
        return
    run_rank(programs, args[0], args[1], int(args[2]))
